#pragma once
// tt-run's compare mode: the same model, data and seed under several plugin sets, each variant
// in its own child process, collected into one table (ratios against a baseline), compare.csv,
// compare.json and a Pareto plot (peak tensor memory against step time).
//
// The table breaks the peak into parameters, gradients, optimizer state, activations and the
// rest (peak less those four, a teacher and what plugins report holding in tensors, each named
// under the table with what they report holding elsewhere: tt::report_held; what a plugin holds
// of its own unreported, the step's batch; summary.json's rest_bytes), and has a
// validation column when the pipeline evaluates (val_loss, else the first of the model's
// validation metrics by name; each variant's whole validation object is in compare.json).
// A variant whose pipeline is refused (an unknown plugin or option, a plugin that does not
// load) is named in its row with the reason and the others still run; when every variant is
// refused, nothing runs.
//
//   tt-run PIPELINE.yaml            with a compare: section
//   tt-run --compare A.yaml B.yaml  each file a variant (named by its file name)
//   tt-run --compare RUN_A RUN_B    runs that exist, tabulated from their summary.json and
//                                   metrics.jsonl (the median step after --warmup); nothing runs
//
// compare:
//   baseline: baseline       # the variant ratios are taken against (default: the first)
//   steps: 20                # measured steps per variant
//   warmup_steps: 3          # steps run first and left out of the timing
//   repeats: 1               # runs per variant (median step time over them)
//   variants:
//     baseline: {}                                  # the pipeline as written, its plugins included
//     checkpoint: {plugins: [checkpoint]}           # plugins: replaces the pipeline's list
//     amp-small: {plugins: [amp], set: {trainer.micro_batch_size: 4}}   # any key=value override
#include <string>
#include <vector>

namespace tt::compare {

struct Options {
  std::string tt_run;                  // this executable, to start the variants
  std::vector<std::string> files;      // one file with compare:, or one file per variant
  std::vector<std::string> overrides;  // key=value, applied to every variant
  std::string out_dir;                 // default <output.dir>/<name>-compare-<time>
  int steps = -1, warmup = -1, repeats = -1;  // command-line values win over the section's
  bool quiet = false;
  bool dry_run = false;                // validate every variant's pipeline, run none
};

// A comparison that ran to its end with a variant that did not run (refused, out of memory,
// crashed, failed): the table is written, that variant's row says why.
constexpr int kSomeVariantsFailed = 7;

// Runs the comparison; returns tt-run's exit code: 0 when every variant ran, kSomeVariantsFailed
// when one did not (the others still ran, and the table says which and why; without the baseline
// there are no ratios), 130 when interrupted (the table holds the variants that finished, the
// others' rows say they did not run). Throws tt::ConfigError on a bad compare section, a pipeline
// file that does not exist, or when every variant is refused. With dry_run: each variant's pipeline is built and validated (in a
// temporary folder, removed after), a line per variant goes to stderr, and the exit code is 0
// when every variant is valid, 2 (a configuration error) when any is refused.
int run(const Options& o);

}  // namespace tt::compare
