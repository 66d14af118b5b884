#pragma once
// Every difference between the LibTorch versions tt builds against (Debian's 1.13 on CPU,
// 2.x with CUDA) lives here, so that the rest of the code is written once.
#include <torch/version.h>

#define TT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10::Allocator::allocate lost its const qualifier and gained a pure copy_data in 2.3.
#if TT_TORCH_AT_LEAST(2, 3)
#define TT_ALLOCATOR_CONST
#define TT_ALLOCATOR_HAS_COPY_DATA 1
#else
#define TT_ALLOCATOR_CONST const
#define TT_ALLOCATOR_HAS_COPY_DATA 0
#endif

// Autocast state: per-device functions (is_cpu_enabled, set_autocast_cpu_dtype, ...) up to
// 2.3, one API taking a DeviceType (is_autocast_enabled(type), set_autocast_dtype) from 2.4.
#define TT_AUTOCAST_DEVICE_API TT_TORCH_AT_LEAST(2, 4)

#define TT_STRINGIFY_(x) #x
#define TT_STRINGIFY(x) TT_STRINGIFY_(x)
#define TT_TORCH_VERSION_STRING \
  TT_STRINGIFY(TORCH_VERSION_MAJOR) "." TT_STRINGIFY(TORCH_VERSION_MINOR) "." TT_STRINGIFY(TORCH_VERSION_PATCH)

#ifndef TT_WITH_CUDA
#define TT_WITH_CUDA 0
#endif

#if defined(__clang__)
#define TT_COMPILER_STRING "clang " __clang_version__
#elif defined(__GNUC__)
#define TT_COMPILER_STRING "gcc " __VERSION__
#else
#define TT_COMPILER_STRING "unknown"
#endif

#include <sstream>
#include <string>
#include <type_traits>

namespace tt::compat {
// torch::optim::Optimizer::state_ is keyed by the parameter's TensorImpl address printed as a
// string in 1.x (c10::guts::to_string), by the address itself in 2.x.
template <class Key, class Impl>
Key optimizer_state_key(Impl* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << static_cast<const void*>(impl);
    return s.str();
  } else {
    return impl;
  }
}
}  // namespace tt::compat
