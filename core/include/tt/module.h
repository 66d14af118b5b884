#pragma once
// The one entry point every plugin or model shared library exports.
//
// A module .so defines   TT_MODULE("plugin", "my-plugin", "what it does", register_fn)
// where register_fn(tt::Registry&) adds the module's plugins, models, datasets,
// optimizers or schedules by name. The loader reads the plain-C fields of the info
// struct first (API version, build fingerprint) and calls register_fn only when they
// match this core, so a module built against another ABI is refused with an
// explanation, never loaded into a crash. This header is deliberately light (no torch).
#include <cstdint>

#include "tt/compat.h"

// Bump when tt_module_info, Registry, Plugin, Model, Dataset, State or nn::Block change layout.
#define TT_API_VERSION 16u
#define TT_MODULE_ENTRY_SYMBOL "tt_module_entry"

namespace tt {
class Registry;
}

extern "C" {
struct tt_module_info {
  uint32_t api_version;         // TT_API_VERSION the module was built with; checked first
  const char* kind;             // "plugin" or "model"
  const char* name;             // component name used in pipelines
  const char* description;      // one line for tt-run --list
  const char* torch_version;    // LibTorch "major.minor.patch"
  uint32_t gxx_abi_version;     // __GXX_ABI_VERSION
  int32_t cxx11_abi;            // _GLIBCXX_USE_CXX11_ABI
  int32_t cuda;                 // built against a CUDA LibTorch
  const char* compiler;         // informational only
  void (*register_components)(tt::Registry&);  // called only after the checks pass
};
}

#define TT_MODULE(KIND, NAME, DESCRIPTION, REGISTER_FN)                                               \
  extern "C" __attribute__((visibility("default"))) const tt_module_info* tt_module_entry() noexcept { \
    static const tt_module_info info{TT_API_VERSION,         KIND,                                     \
                                     NAME,                   DESCRIPTION,                              \
                                     TT_TORCH_VERSION_STRING, __GXX_ABI_VERSION,                       \
                                     _GLIBCXX_USE_CXX11_ABI, TT_WITH_CUDA,                             \
                                     TT_COMPILER_STRING,     REGISTER_FN};                             \
    return &info;                                                                                     \
  }
