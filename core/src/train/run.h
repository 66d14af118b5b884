#pragma once
// One fit's working set, shared by the trainer's parts (setup, step, gradient sync,
// checkpoints, callbacks). Internal to core: plugins see State only.
#include <sys/resource.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/gradient_ready.h"
#include "train/plugin_host.h"
#include "tt/error.h"
#include "tt/dataset.h"
#include "tt/meter.h"
#include "tt/pipeline.h"
#include "tt/report.h"
#include "tt/runtime.h"
#include "tt/state.h"
#include "tt/trainer.h"

namespace spdlog::sinks {
class sink;
}

namespace tt {

class DataLoader;
class GradSync;
class Schedule;
namespace dist {
class Context;
}

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs a component's code (data, model, optimizer factories; forward; backward) so that what
// it throws names it ("WHAT: ..."), unless it is tt's own error (which already says what to
// fix) or out-of-memory (which the step handles).
template <class F>
auto with_context(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& e) {
    TT_FAIL(what, ": ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    TT_FAIL(what, ": ", e.what());
  }
}

// What the loop recorded, for metrics lines and the summary.
struct RunRecord {
  std::vector<double> step_losses, step_times, optimizer_times, comm_times;  // a dropped batch's loss is NaN
  std::vector<int64_t> step_examples;             // each step's examples, over every rank
  bool loss_summed = false;                       // the model's loss is a sum over the examples (ModelOutput::reduction)
  std::vector<double> epoch_losses, epoch_times;  // NaN: every batch of the epoch was dropped
  int64_t dropped_batches = 0;                     // by this process: non-finite losses (on_nan: skip)
  Clock::time_point started, train_started, epoch_started;
  double started_unix = 0;  // when fit() began, Unix seconds (summary started_at)
  double load_before = -1;  // the machine's 1-minute load average when fit() began (-1: unknown)
  void start() {
    started = Clock::now();
    started_unix = unix_seconds();
    load_before = load_average();
    started_on_disk = std::filesystem::file_time_type::clock::now();
  }
  std::filesystem::file_time_type started_on_disk;  // the files this process writes are newer
  double setup_seconds = 0, train_seconds = 0;
  struct rusage usage_start {}, usage_end {};  // around the training loop
  std::map<std::string, double> validation;    // the last evaluation's metrics
  std::vector<std::pair<int64_t, double>> val_losses;  // each evaluation's (step, val_loss): loss.png's points
  void add_validation(int64_t step, const std::map<std::string, double>& metrics) {
    validation = metrics;
    const auto it = metrics.find("val_loss");
    if (it != metrics.end() && std::isfinite(it->second)) val_losses.emplace_back(step, it->second);
  }
  std::map<std::string, double> model_metrics; // what the model's write_outputs reported
  std::vector<std::string> replica_hashes;     // every rank's parameter hash after the fit
  int64_t library_pages_released = 0;          // RSS given back before training (release_library_pages)
};

struct Run {
  Pipeline pipeline;
  TrainerConfig config;
  std::filesystem::path predict_input;  // Trainer::will_predict: checked in setup (Model::check_predict_input)
  std::vector<std::string> command;     // Trainer::set_command: summary.json's
  State state;
  PluginHost host;
  Meter& meter = Meter::global();

  // Built by setup (train/setup.h).
  Datasets data;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<Schedule> schedule;
  std::vector<at::Tensor> trainable;  // the parameters the optimizer steps
  dist::Context* dist = nullptr;      // a multi-process run (tt-run --nproc, torchrun environment)
  std::unique_ptr<GradSync> sync;     // with dist
  GradientReady gradient_ready{*this};
  bool root = true;                   // rank 0: the one that writes the run directory
  std::shared_ptr<spdlog::sinks::sink> log_file;  // RUN_DIR/log.txt, beside the console
  int dir_lock = -1;                               // lock_run_dir's (rank 0), closed by ~Run
  // Why a line could not be written to log.txt (disk full), or empty; the run fails at its end.
  std::string log_file_error() const;
  int threads = 1;
  int64_t max_epochs = -1, max_steps = -1;  // -1: no limit of that kind
  double base_lr = 0;
  double lr_epoch_pos = 0;  // the epoch position the schedule's last learning rate was set for

  // Where the fit stands beyond State (saved in checkpoints).
  int64_t start_step = 0;                   // the step this process started at
  int64_t next_epoch = 0, next_batch = 0;   // resume position
  double epoch_loss_sum = 0;
  int64_t epoch_batches = 0;
  int64_t last_checkpoint_step = -1;
  // trainer.checkpoint_every (0: off), trainer.checkpoint_minutes (in seconds; 0: off) and when
  // the last checkpoint (or the training loop) ended.
  int64_t checkpoint_every = 0;
  double checkpoint_seconds = 0;
  Clock::time_point last_checkpoint_time;
  bool time_for_checkpoint() const {
    return checkpoint_seconds > 0 && seconds_since(last_checkpoint_time) >= checkpoint_seconds;
  }
  // After a step: checkpoint_every divides it, or checkpoint_minutes passed (on any rank: the
  // ranks agree in the step's sync).
  bool checkpoint_due() const;
  int64_t dropped_in_a_row = 0;  // the last steps, all dropped for a loss not finite (on_nan: skip)
  int64_t step_items = 0;        // the step's ModelOutput::items, over its micro-batches (this rank's)
  int64_t last_eval_step = -1;
  bool resumed = false;       // loaded a checkpoint (--resume)
  bool from_checkpoint = false;  // --resume of a run with checkpoints: its weights come from one, not init_from
  std::string resumed_from;
  bool optimizer_measured = false, gradients_measured = false;
  int64_t accumulation_warned = 0;  // micro-batches per step last warned of beside a step in backward (-1: data-parallel)

  RunRecord record;

  Run(Pipeline p, TrainerConfig c);
  ~Run();

  // Live and peak bytes where the model's tensors live: the CPU meter's foreground (not the batch
  // the loader is prefetching meanwhile; activations and optimizer state are measured on it, and
  // the peak counts it so), or CUDA's allocator.
  int64_t live() const;
  int64_t peak() const;
  void reset_peak();
  // The process's RSS high-water mark, the resets of measure_apart carried over.
  int64_t rss_peak() const;
  // Runs `f` with the tensor and RSS peaks reset for it and returns its own; the run's peaks
  // are not raised by it (peak() and rss_peak() stay the training steps'), and the training
  // steps' memory cap is lifted while it runs. Evaluation, prediction.
  struct Peaks {
    int64_t tensor = 0, rss = 0;
  };
  Peaks measure_apart(const std::function<void()>& f);
  // The evaluations' highest peaks in this process (-1 before any).
  Peaks eval_peaks{-1, -1};
  int64_t peak_floor = 0, rss_peak_floor = 0;
  // The training steps' cap (trainer.memory_cap, or a budget tt-run did not plan): on the CPU
  // meter or the CUDA device. `capping` while it applies.
  int64_t memory_cap = 0;
  bool capping = false;
  void set_capping(bool on);
  void set_lr(double lr);
  bool done() const { return state.step >= state.total_steps || state.stop; }
  // An optimizer that defers updates (FusedAdamW::defer_rows) brings every parameter up to
  // date, and rows owned by other ranks come home, before anything reads them whole:
  // evaluation, checkpoints, outputs, epoch ends.
  void flush_optimizer();
  void zero_grads();
};

// Puts a module in eval mode while it lives, then gives each of its modules its mode back (in
// the order modules() lists them, parents first: train(bool) sets the children too).
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& m) {
    for (const auto& x : m.modules()) modes_.emplace_back(x, x->is_training());
    m.eval();
  }
  ~EvalMode() {
    for (const auto& [x, training] : modes_) x->train(training);
  }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  std::vector<std::pair<std::shared_ptr<torch::nn::Module>, bool>> modes_;
};

}  // namespace tt
