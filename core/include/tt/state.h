#pragma once
// What the training loop works on. Plugins receive it with every event.
#include <torch/optim/optimizer.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tt/batch.h"
#include "tt/export.h"
#include "tt/model.h"

namespace tt {

struct Pipeline;
struct Datasets;
class Meter;
class Schedule;

// What the meter measured of the training loop (summary.json's "memory").
struct MemoryBreakdown {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;
  int64_t peak_tensor = 0, peak_rss = 0;
  int64_t rss_anon_start = 0, rss_anon_end = 0;  // anonymous (not file-backed) RSS around training
  int64_t teacher = 0;                           // a frozen second model's bytes (State::teacher)
  int64_t held = 0;  // what plugins report holding in tensors (tt::report_held, Held::Tensors)
  int64_t peak_reserved = 0;  // CPU: the allocator's peak hold (tensors' pages and its cache)
  // `peak` less the four parts, the teacher and what plugins report holding in tensors: what a
  // plugin holds of its own unreported and what is live beside the step (not the next batch: the
  // loader's prefetch counts from when the step takes it, tt/meter.h); negative
  // where the parts, each its own largest, were not all live at the peak. summary.json's
  // rest_bytes, which compare and profile show.
  int64_t rest(int64_t peak) const {
    return peak - parameters - gradients - optimizer_state - activations - teacher - held;
  }
};

// What a plugin reported holding (tt::report_held): the largest figure for each (plugin, what).
// `where` is a tt::Held (tt/extension.h) as an int, so that this header needs no other.
struct HeldMemory {
  std::string plugin, what;
  int64_t bytes = 0;
  int where = 0;
};

// The last batch as the loop measured it; filled before BATCH_END.
struct StepReport {
  double seconds = 0;                      // loading the batch to the end of the optimizer step
  int64_t examples = 0;                    // examples of the batch, over all ranks
  double lr = 0;                           // the learning rate the step used
  bool skipped = false;                    // no update applied (a plugin vetoed it, or NaN with on_nan: skip)
  bool dropped = false;                    // its loss was not finite (on_nan: skip): batch_loss is NaN and
                                           // the epoch's mean loss leaves it out
  std::optional<double> grad_norm;         // before clipping, when trainer.grad_clip is set
  std::optional<double> optimizer_seconds; // when the optimizer stepped
  std::optional<double> comm_seconds;      // in collectives (data-parallel runs)
};

struct TT_API State {
  const Pipeline* pipeline = nullptr;
  std::shared_ptr<Model> model;
  std::shared_ptr<torch::optim::Optimizer> optimizer;  // a plugin may replace it on OPTIMIZER
  const Schedule* schedule = nullptr;
  Meter* meter = nullptr;
  at::Device device{at::kCPU};
  std::filesystem::path run_dir;

  // Position. `step` counts optimizer steps taken (skipped steps included).
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;     // index of the current batch within the epoch
  int64_t batches_per_epoch = 0;
  int64_t total_steps = 0;
  double lr = 0;

  // The current batch and micro-batch.
  Batch batch;
  Batch micro;
  int64_t batch_size = 0;         // configured examples per optimizer step
  int64_t micro_batch_size = 0;   // examples per forward/backward; plugins may change it
  int64_t micro_index = 0, micro_count = 0;
  ModelOutput output;             // of the current micro-batch
  at::Tensor loss;                // what backward() will use; AFTER_LOSS may replace it
  double batch_loss = 0;          // the batch's loss as the model defines it (unscaled)

  // Flags plugins set.
  bool skip_step = false;         // BEFORE_STEP: do not apply this step's update
  bool retry_batch = false;       // OOM: the plugin handled it; run the batch again
  bool stop = false;              // any event: end the fit after this batch

  std::string oom_message;        // OOM: what failed
  // Extras for metrics.jsonl: cleared at BATCH_START, written with the step's line after
  // BATCH_END. During an evaluation (BEFORE_EVAL .. AFTER_EVAL) it holds that evaluation's
  // metrics: the model's, then what plugins add on EVAL; written as the evaluation's line.
  std::map<std::string, double> metrics;
  StepReport last_step;           // the batch just run, as measured (read it on BATCH_END)
  int64_t skipped_steps = 0;      // steps without an update so far
  MemoryBreakdown memory;         // filled as the loop measures it

  // Extension points a plugin registers (tt/extension.h: contracts and helpers).
  const Datasets* datasets = nullptr;     // what the model was built from (to build another)
  std::shared_ptr<Model> teacher;         // a second model, frozen by the trainer after INIT
  std::vector<std::function<void(size_t, at::Tensor&)>> gradient_ready_hooks;
  std::vector<std::function<void()>> gradients_complete_hooks;
  std::vector<HeldMemory> held;           // what plugins report holding (tt::report_held)
  std::vector<std::function<ModelOutput(const Batch&, const std::function<ModelOutput(const Batch&)>&)>> loss_hooks;

  // Data-parallel runs (tt/dist.h): this process's rank and the number of processes. Only
  // rank 0 writes files; plugins writing outputs check it.
  int rank = 0;
  int world_size = 1;
  // true: the trainer all-reduces gradients before BEFORE_STEP. A plugin whose optimizer
  // synchronizes them itself (zero1) sets it false on OPTIMIZER (and applies trainer.grad_clip to
  // the synchronized gradients: the trainer does not clip then); that optimizer's save() is
  // then collective (every rank calls it; rank 0 writes the archive).
  bool gradient_sync = true;
};

}  // namespace tt
