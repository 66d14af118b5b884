// Claims a module API version this core does not support.
#include "tt/module.h"

extern "C" __attribute__((visibility("default"))) const tt_module_info* tt_module_entry() noexcept {
  static const tt_module_info info{999u, "plugin", "test-wrong-api", "wrong API version",
                                   TT_TORCH_VERSION_STRING, __GXX_ABI_VERSION, _GLIBCXX_USE_CXX11_ABI,
                                   TT_WITH_CUDA, TT_COMPILER_STRING, nullptr};
  return &info;
}
