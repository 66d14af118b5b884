#pragma once
// Autocast (automatic mixed precision) state as a value, and a scope that applies one.
//
// The amp plugin enters autocast around the forward pass; activation checkpointing records
// the state at forward time and re-enters it when it re-runs a block in backward (so the
// recomputation rounds as the forward did); keep_fp32 layers leave it for their own forward.
// LibTorch's autocast state is thread-local; the cast cache is cleared when the outermost
// scope exits, as torch.autocast does.
#include <c10/core/ScalarType.h>

#include "tt/export.h"

namespace tt::amp {

struct AutocastState {
  bool cpu = false, cuda = false;
  c10::ScalarType cpu_dtype = c10::ScalarType::BFloat16, cuda_dtype = c10::ScalarType::Half;
  bool any() const { return cpu || cuda; }
};

// The calling thread's current autocast state.
TT_API AutocastState current_autocast();

// Applies `state` for its lifetime (nesting counted; cache cleared on leaving the outermost
// enabled scope), then restores what was there.
class TT_API AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState previous_;
  bool nested_;
};

// Autocast off for its lifetime (a layer kept in float32).
class TT_API NoAutocast : public AutocastScope {
 public:
  NoAutocast() : AutocastScope(AutocastState{}) {}
};

}  // namespace tt::amp
