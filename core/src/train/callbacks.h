#pragma once
// The trainer's built-in callbacks: what a run writes and shows, on the same events plugins
// use (tt/event.h). They run after every plugin, so they see what the plugins did.
//   MetricsLog       metrics.jsonl: a line per logged step (BATCH_END), per evaluation
//                    (AFTER_EVAL) and per epoch (EPOCH_END)
//   ProgressDisplay  the progress bar or periodic lines on stderr
//   CheckpointSaver  writes checkpoints/step-N.pt on CHECKPOINT (train/checkpoints.h)
//   RunReport        summary.json, the loss plot and the printed summary on FIT_END; a failed
//                    run's summary.json (status "failed") through write_failure
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "train/run.h"
#include "tt/plugin.h"
#include "tt/report.h"

namespace tt {

class MetricsLog final : public Plugin {
 public:
  explicit MetricsLog(const Run& run) : run_(run) {}
  void on(Event event, State& state) override;

 private:
  // Adds state.metrics to a line; a metric named as a field the trainer wrote in it (loss,
  // step, lr, ...) leaves the trainer's in place, with a warning the first time.
  void add_metrics(nlohmann::json& line, const State& state);
  const Run& run_;
  MetricsFile file_;
  int64_t log_every_ = 1;
  std::set<std::string> warned_;
};

class ProgressDisplay final : public Plugin {
 public:
  explicit ProgressDisplay(const Run& run) : run_(run) {}
  void on(Event event, State& state) override;
  void finish();  // ends the bar's line (before anything else is printed)

 private:
  const Run& run_;
  std::unique_ptr<Progress> progress_;
};

class CheckpointSaver final : public Plugin {
 public:
  explicit CheckpointSaver(Run& run) : run_(run) {}
  void on(Event event, State& state) override;

 private:
  Run& run_;
};

class RunReport final : public Plugin {
 public:
  explicit RunReport(const Run& run) : run_(run) {}
  void on(Event event, State& state) override;
  // summary.json with "status": "failed" (or "interrupted"), the error and what is known so
  // far; the error also goes to log.txt. Rank 0 only; never throws.
  void write_failure(const std::string& status, const std::string& error, int exit_code) noexcept;
  const nlohmann::json& summary() const { return summary_; }
  // Adds `key` to the summary written at the end of the fit and writes summary.json again (what
  // runs after the fit: a prediction). Nothing on a rank other than 0.
  void add_to_summary(const std::string& key, const nlohmann::json& value);
  // This process only writes the outputs of a run trained to the end by another (a resume):
  // the summary says so ("outputs_only") and takes the training's figures (memory, final loss,
  // step times) from `previous_summary`, the stopped run's summary.json where there is one;
  // those it lacks are left out, not reported as 0.
  void finish_only(const nlohmann::json& previous_summary);
  // A complete run resumed for what runs after the fit (--predict, --sample): its summary.json
  // stays as it is, add_to_summary adding to it.
  void keep(const nlohmann::json& complete_summary) { summary_ = complete_summary; }

 private:
  nlohmann::json build() const;
  nlohmann::json memory_estimate() const;
  void write_plots() const;
  void print() const;
  const Run& run_;
  nlohmann::json summary_;
  bool outputs_only_ = false;
  nlohmann::json previous_;
};

}  // namespace tt
