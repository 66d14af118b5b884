// Claims to be built against another LibTorch and the old C++ ABI.
#include "tt/module.h"

extern "C" __attribute__((visibility("default"))) const tt_module_info* tt_module_entry() noexcept {
  static const tt_module_info info{TT_API_VERSION, "plugin", "test-wrong-fingerprint", "wrong fingerprint",
                                   "0.0.1", __GXX_ABI_VERSION, 0, TT_WITH_CUDA, "some other compiler", nullptr};
  return &info;
}
