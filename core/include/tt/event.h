#pragma once
#include "tt/export.h"

namespace tt {

// In firing order within one fit. Per batch: BATCH_START, then for each micro-batch
// BEFORE_FORWARD .. AFTER_BACKWARD, then once BEFORE_STEP, AFTER_STEP, BATCH_END; then,
// when due, the evaluation (BEFORE_EVAL, EVAL, AFTER_EVAL) and a checkpoint (CHECKPOINT).
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
  BATCH_END,        // the batch is done; the built-in callbacks write its metrics line here
  BEFORE_EVAL,      // an evaluation is about to run (every eval_every steps and at the end)
  EVAL,             // validation metrics computed, in state.metrics: plugins may add their own
  AFTER_EVAL,       // state.metrics is the evaluation's line of metrics.jsonl, written after this
  CHECKPOINT,       // a checkpoint is about to be written (every checkpoint_every steps, once
                    // checkpoint_minutes passed, at the end, when interrupted): bring state up to
                    // date; save_state() follows
  EPOCH_END,
  FIT_END,
  OOM,              // an out-of-memory error was caught during the batch
};

constexpr int kEventCount = static_cast<int>(Event::OOM) + 1;
TT_API const char* to_string(Event e);
// AFTER_* and *_END events run plugins in reverse order.
TT_API bool runs_in_reverse(Event e);

}  // namespace tt
