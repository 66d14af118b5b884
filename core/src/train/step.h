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

// The bytes of the optimizer's state, counted from the state itself where tt knows its tensors:
// torch's Adam and AdamW (and FusedAdamW: the moments), SGD (the momentum buffers) and an
// optimizer implementing tt::StateTensors (adam8bit); else -1, and the trainer measures what the
// optimizer's first step (or a checkpoint's load) leaves live instead.
int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

// The bytes of the parameters' gradients now (a sparse one's indices and values).
int64_t gradient_bytes(const std::vector<at::Tensor>& parameters);

// For an out-of-memory message: " (plugins hold 4.00 MiB of it: ema's the weights' average)",
// what plugins reported holding in tensors (tt::report_held), or "".
std::string held_by_plugins(const State& s);
// The name of the first of the model's parameters that holds a NaN or an infinity; "" if none.
std::string nonfinite_parameter(const State& s);
// After the training loop's `steps` (this process's): a NumericError where every step's loss was
// dropped (trainer.on_nan=skip) or the weights are not finite; a warning of the dropped steps.
void check_trained_numbers(Run& run, int64_t steps);

// `started`: when loading the batch began (the step's time counts from there).
void train_step(Run& run, Batch batch, Clock::time_point started);

}  // namespace tt
