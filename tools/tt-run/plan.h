#pragma once
// tt-run's memory-budget planner (the search itself is planner.h):
//
//   tt-run --budget 1.5GiB PIPELINE.yaml     (or trainer.memory_budget: 1.5GiB in the pipeline)
//       measures short probe runs of candidate configurations (each in its own tt-run process),
//       prints why it chose what it chose, writes plan.json and planned.yaml, then the caller
//       trains planned.yaml: the chosen plugins, micro-batch, trainer.memory_cap = the budget and
//       oom-guard as the safety net.
//   tt-run --recommend PIPELINE.yaml
//       the chosen settings for budgets of 0.5, 1, 2, 4, 8 and 16 GiB, or those of --budgets
//       (recommend.json); no training.
//   tt-run --plan-estimates PIPELINE.yaml
//       only the reference probes, then every configuration's estimated peak and step time
//       (estimates.json, with each configuration's plugins list), to check the estimates against
//       measurements (tools/bench-planner-estimates.sh); no search, no training.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "planner.h"

namespace tt {
struct Pipeline;
}

namespace tt::plan {

struct RunOptions {
  std::string tt_run;                  // this executable, to start the probes
  std::string file;                    // the pipeline
  std::vector<std::string> overrides;  // key=value, applied to every probe and to the plan
  int64_t budget = 0;                  // bytes (0 with recommend)
  bool recommend = false;
  // --budgets: recommend's budgets (bytes, as written), ascending; empty: 0.5, 1, 2, 4, 8, 16 GiB
  std::vector<std::pair<int64_t, std::string>> recommend_budgets;
  bool estimates_only = false;         // --plan-estimates: the reference runs and every estimate, no search
  std::string out_dir;                 // default <output.dir>/<name>-plan-<time>
  int probe_steps = 3;                 // measured steps per probe, after one warm-up step
  int max_probes = 16;                 // per budget, beyond the reference probes
  double margin = 0.10;
  bool quiet = false;
};

struct Outcome {
  int exit_code = 0;          // non-zero: stop (nothing fits: 4; interrupted: 130)
  std::string planned_yaml;   // --budget: the pipeline to train
};

Outcome run(const RunOptions& o);

// The plan's table as printed: the measured configurations, a line counting those not measured
// by why, the legend and the excluded alternatives.
std::string plan_table(const Plan& p, int max_probes);

// The technique dimensions the planner weighs for pipeline p: every installed plugin's planner
// offer (tt/registry.h; each module on the search path is loaded), in the offers' order, less the
// plugins p already names and the alternatives for another device. `notes` says what was left
// out and why.
std::vector<Dimension> offered_dimensions(const Pipeline& p, std::vector<std::string>& notes);

}  // namespace tt::plan
