#include "tt/autocast.h"

#include <ATen/autocast_mode.h>

#include "tt/compat.h"

namespace tt::amp {
namespace {

void apply(const AutocastState& s) {
#if TT_AUTOCAST_DEVICE_API
  at::autocast::set_autocast_enabled(at::kCPU, s.cpu);
  at::autocast::set_autocast_dtype(at::kCPU, s.cpu_dtype);
  at::autocast::set_autocast_enabled(at::kCUDA, s.cuda);
  at::autocast::set_autocast_dtype(at::kCUDA, s.cuda_dtype);
#else
  at::autocast::set_cpu_enabled(s.cpu);
  at::autocast::set_autocast_cpu_dtype(s.cpu_dtype);
  at::autocast::set_enabled(s.cuda);
  at::autocast::set_autocast_gpu_dtype(s.cuda_dtype);
#endif
}

}  // namespace

AutocastState current_autocast() {
  AutocastState s;
#if TT_AUTOCAST_DEVICE_API
  s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
  s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
  s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#else
  s.cpu = at::autocast::is_cpu_enabled();
  s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
  s.cuda = at::autocast::is_enabled();
  s.cuda_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
  return s;
}

AutocastScope::AutocastScope(const AutocastState& state) : previous_(current_autocast()), nested_(state.any()) {
  apply(state);
  if (nested_) at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  apply(previous_);
}

}  // namespace tt::amp
