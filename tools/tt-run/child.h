#pragma once
// What tt-run's compare mode and the budget planner share: a pipeline written with dotted-key
// changes, run by a child tt-run process, and its measurements read back.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tt/pipeline.h"

namespace tt::child {

// Reads a pipeline file as YAML (ConfigError naming the file when it cannot).
YAML::Node load_yaml(const std::string& file);

// Starts `tt_run YAML -q --run-dir RUN_DIR`, output appended to LOG; returns the wait status.
int run(const std::string& tt_run, const std::filesystem::path& yaml, const std::filesystem::path& run_dir,
        const std::filesystem::path& log);

// A wait status in words: "ok", "out of memory" (exit 4), "interrupted" (130, or ended by a
// signal once this process was interrupted), "error (exit N)", "crashed (signal N)".
std::string status_of(int wait_status);

// The last line of a log that says "error" (else its last line).
std::string last_error_line(const std::filesystem::path& log);

// What a finished run measured: summary.json's memory figures, and the median step time of the
// metrics.jsonl step lines after `warmup` steps, with the throughput at that time (the examples
// a step takes over the median step time, not the median of the steps' own rates, which differs
// from it with an even count of steps).
struct Measured {
  nlohmann::json summary;
  double step_ms = 0, samples_per_s = 0, loss = 0;
  double examples_per_step = 0;
  std::vector<double> step_times_ms;  // each step after the warm-up
  int64_t peak = 0, rss = 0, params = 0, grads = 0, optimizer = 0, activations = 0;
  int64_t teacher = 0, rest = 0;  // a frozen second model's bytes; the peak less the parts (summary.json's)
  // oom-guard's tensor peak since its last out-of-memory retry (-1: no retry, or not measured);
  // `peak` is the process's, the failed attempt's included.
  int64_t peak_since_retry = -1;
};
Measured collect(const std::filesystem::path& run_dir, int warmup);

// "FILE trains no steps (trainer.max_steps: 0 ...)": the start of the refusal of an
// evaluation-only pipeline by a tool that measures training steps (compare, the planner, profile).
std::string trains_no_steps(const std::string& file);
// Examples per second at a step time: what a table shows beside that time.
double samples_per_s(double examples_per_step, double step_ms);


}  // namespace tt::child
