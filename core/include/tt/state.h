#pragma once
// What the training loop works on. Plugins receive it with every event.
#include <torch/optim/optimizer.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tt/batch.h"
#include "tt/export.h"
#include "tt/model.h"

namespace tt {

struct Pipeline;
class Meter;
class Schedule;

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
  std::map<std::string, double> metrics;  // per-step extras plugins want logged

  // Data-parallel runs (tt/dist.h): this process's rank and the number of processes. Only
  // rank 0 writes files; plugins writing outputs check it.
  int rank = 0;
  int world_size = 1;
  // true: the trainer all-reduces gradients before BEFORE_STEP. A plugin whose optimizer
  // synchronizes them itself (zero1) sets it false on OPTIMIZER; that optimizer's save() is
  // then collective (every rank calls it; rank 0 writes the archive).
  bool gradient_sync = true;
};

}  // namespace tt
