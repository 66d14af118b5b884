#pragma once
#include "tt/export.h"

namespace tt {

// In firing order within one fit. Per batch: BATCH_START, then for each micro-batch
// BEFORE_FORWARD .. AFTER_BACKWARD, then once BEFORE_STEP, AFTER_STEP, BATCH_END.
enum class Event {
  INIT,             // model built, before the optimizer: model surgery (LoRA, kernels)
  OPTIMIZER,        // default optimizer built; a plugin may replace state.optimizer
  FIT_START,        // after a resume has restored everything
  EPOCH_START,
  BATCH_START,
  BEFORE_FORWARD,   // per micro-batch
  AFTER_FORWARD,
  AFTER_LOSS,       // state.loss is what backward will use: transform it here
  BEFORE_BACKWARD,
  AFTER_BACKWARD,
  BEFORE_STEP,      // once per batch, gradients complete: unscale, check, veto
  AFTER_STEP,
  BATCH_END,
  EVAL,             // after validation metrics are computed (state.metrics)
  EPOCH_END,
  FIT_END,
  OOM,              // an out-of-memory error was caught during the batch
};

constexpr int kEventCount = static_cast<int>(Event::OOM) + 1;
TT_API const char* to_string(Event e);
// AFTER_* and *_END events run plugins in reverse order.
TT_API bool runs_in_reverse(Event e);

}  // namespace tt
