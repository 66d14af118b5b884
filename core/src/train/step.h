#pragma once
// One optimizer step over one batch, in event order:
//   BATCH_START; per micro-batch: forward, loss, backward; (gradient sync); BEFORE_STEP;
//   clip; optimizer step; next learning rate; AFTER_STEP; BATCH_END.
// Around it: the NaN policy (trainer.on_nan), out-of-memory retries (OOM event; a retried batch
// restarts from the batch's random state) and the first measurements of gradient, activation
// and optimizer-state bytes.
#include "train/run.h"
#include "tt/batch.h"

namespace torch::optim {
class Optimizer;
}

namespace tt {

// The bytes of the optimizer's state tensors when it is an AdamW (its moments), else -1.
int64_t adamw_state_bytes(torch::optim::Optimizer& optimizer);

// `started`: when loading the batch began (the step's time counts from there).
void train_step(Run& run, Batch batch, Clock::time_point started);

}  // namespace tt
