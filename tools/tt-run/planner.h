#pragma once
// The memory-budget planner's search, apart from how a configuration is measured (plan.cpp
// runs tt-run probes; the tests give a synthetic cost table). No torch, no YAML here.
//
// A configuration is the user's pipeline plus one alternative (or none) of each technique
// dimension (a plugin and the alternatives it offers: checkpoint all / every 2, amp bf16, chunked
// attention, adam8bit, offload, or an out-of-tree plugin's; tt::PlannerOffer) and a micro-batch
// size. The planner
//   1. measures the pipeline as written at its micro-batch (the reference), at the smallest
//      micro-batch, and each alternative alone: per-component factors (parameters, gradients,
//      optimizer state, the rest of the peak) and a step-time factor each;
//   2. estimates every configuration from the measured configuration with the most of its
//      techniques (the reference at least; one that lacks none listed before its own, as plugins
//      act in list order) times the factors of the techniques that one lacks (per component; the
//      rest a technique adds in proportion to what it moves out of the others, e.g. offload's
//      first-step state, which adam8bit makes smaller; a slowdown that every technique shares,
//      leaving a model's fused step, counted once), moved to its micro-batch by what the two
//      reference runs show: the rest
//      of the peak by a power of the micro-batch, the step time as a part that is the same at
//      every micro-batch (the batch's work, the optimizer) plus one per micro-step (ceil(batch/m)
//      of them), each within [0, 1] of the reference's time; no estimate faster than the fastest
//      configuration measured at that micro-batch or a larger one;
//      estimates are redone after every measurement;
//   3. prunes what cannot fit even with the estimate's slack, and measures the rest fastest
//      estimate first, until the fastest measured fit is no slower than the next estimate
//      (or max_probes is spent); then that fit's simpler neighbours (one technique fewer, its
//      micro-batch) estimated within the slack, so that a technique that buys nothing is dropped;
//   4. picks, among the measured configurations whose peak fits budget x (1 - margin), the
//      fastest; among those within noise of it, the one with the fewest techniques, then the
//      largest micro-batch ("as written" when it fits and is within noise);
//      where nothing measured fits, measures the configurations estimated within the slack of the
//      limit, smallest estimate first, until one fits or max_probes (at least 4) more are spent (a refusal
//      rests on measured peaks: a combination's estimate can be far over its peak);
//   5. re-measures close contenders round-robin (the fastest fit and each simpler fit that is
//      within noise of it, within 25% of it, or the pipeline as written) until their difference
//      exceeds the measured noise, each has max_repeats probes, or max_probes is spent.
// A configuration's step time is the lowest median of its probes (load on the machine only
// slows a probe down); its noise the spread of step times within that probe (standard error),
// at least noise_floor of the time. Two times are within noise when they differ by no more than
// the sum of their noises.
// Measurements are kept, so planning for several budgets (--recommend) measures each
// configuration once (plus its re-measurements), and recommend() makes the choices monotone: a
// larger budget never gets a choice that a smaller budget's choice beats.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tt::plan {

struct Alternative {
  std::string label;  // "checkpoint(all)", "amp(bf16)"
  std::string yaml;   // its entry in the plugins: list, YAML flow text
};

struct Dimension {
  std::string name;  // the plugin that offers the alternatives
  std::vector<Alternative> alternatives;
};

struct Candidate {
  std::vector<int> pick;  // per dimension: -1 none, else an alternative's index
  int64_t micro = 0;
  bool operator<(const Candidate& o) const { return pick != o.pick ? pick < o.pick : micro < o.micro; }
  bool operator==(const Candidate& o) const { return pick == o.pick && micro == o.micro; }
};

struct Cost {
  enum class Status { Ok, OutOfMemory, Failed };
  Status status = Status::Failed;
  int64_t peak = 0, parameters = 0, gradients = 0, optimizer = 0;
  double step_ms = 0;          // a probe: the median of `steps`; the planner: the lowest over probes
  std::vector<double> steps;   // the measured steps' times (ms) of that probe
  std::string reason;          // why a probe failed
  // Set by the planner:
  int probes = 0;              // how many times the configuration was measured
  std::vector<double> probe_ms;  // each probe's median, in the order measured
  double noise_ms = 0;         // the time's noise (see above)
  bool noise_is_floor = false;  // the noise is noise_floor x the time, not the steps' spread
  bool ok() const { return status == Status::Ok; }
};

using Probe = std::function<Cost(const Candidate&)>;

// "100.0 ms/step, the lowest of 2 probes' medians (2159.0, 100.0), +- 2.0 (2% noise floor)": a
// configuration's time as measured, for the plan's explanations.
std::string timing(const Cost& c);

struct Settings {
  std::vector<int64_t> micro_sizes;  // largest (the batch size) first; the first that runs is the reference
  double margin = 0.10;              // the chosen peak stays under budget x (1 - margin)
  double slack = 0.25;               // estimates within limit x (1 + slack) are still measured
  double noise_floor = 0.02;         // a time's noise is at least this share of it
  int max_probes = 16;               // measurements per plan() beyond the reference ones
  int max_repeats = 3;               // probes of one configuration, re-measurements included
};

// The verdicts of a configuration that was not measured.
inline constexpr const char* kPruned = "pruned (estimate over)";
inline constexpr const char* kEstimatedSlower = "not measured (estimated slower than the fastest fit)";
inline constexpr const char* kBeyondMaxProbes = "not measured: beyond --max-probes";

struct Row {
  Candidate candidate;
  std::string label;
  double est_peak = 0, est_ms = 0;
  bool measured = false;
  Cost cost;
  std::string verdict;  // chosen, fits, over the limit, out of memory, failed, or one of the above
  bool within_noise = false;  // a fit whose time is within noise of the chosen one's
};

struct Plan {
  int64_t budget = 0, limit = 0;  // limit = budget x (1 - margin)
  bool found = false;
  Candidate chosen;
  std::string chosen_label;
  Cost chosen_cost;
  std::string fastest_label;  // the fastest measured fit (the chosen one or within its noise)
  Cost fastest_cost;
  Cost reference;  // the pipeline as written
  std::string why;
  // Nothing fits: the smallest peak measured, and by how much it misses the limit.
  int64_t smallest_peak = 0, shortfall = 0;
  std::string smallest_label;
  std::vector<Row> rows;  // every configuration measured or estimated, fastest estimate first
  std::vector<std::string> excluded;  // alternatives that failed alone, with the reason
  int probes = 0;                     // measurements this plan() made (cached ones not counted)
};

class Planner {
 public:
  Planner(std::vector<Dimension> dims, Settings settings, Probe probe);
  // Throws std::runtime_error when the pipeline as written does not run at any micro-batch.
  Plan plan(int64_t budget);
  // A plan per budget (ascending), each chosen from all the measurements made for all of them,
  // so that no budget's choice is beaten by a smaller budget's.
  std::vector<Plan> recommend(std::vector<int64_t> budgets);
  // Every configuration with its estimate from the reference runs alone (they are made first if
  // no plan has made them): what a search starts from, for checking the estimates against
  // measurements (tt-run --plan-estimates). The reference runs' rows are marked measured.
  std::vector<Row> estimates();
  std::string label(const Candidate& c) const;
  int total_probes() const { return probe_runs_; }  // every probe run, re-measurements included
  const std::vector<Dimension>& dimensions() const { return dims_; }
  // |a - b| within the sum of their noises.
  static bool within_noise(const Cost& a, const Cost& b);
  // a is to be preferred over b: faster beyond the noise; within it, fewer techniques, then a
  // larger micro-batch, then faster.
  bool beats(const Candidate& a, const Cost& ca, const Candidate& b, const Cost& cb) const;

 private:
  Plan plan(int64_t budget, const Candidate* at_least, bool search);
  const Cost& measure(const Candidate& c, int& counter);
  const Cost& remeasure(const Candidate& c, int& counter);
  void absorb(Cost& into, Cost probe) const;
  void calibrate(int& counter);
  void estimate(const Candidate& c, double& peak, double& ms) const;
  std::vector<Row> configurations() const;  // estimated, in enumeration order

  std::vector<Dimension> dims_;
  Settings s_;
  Probe probe_;
  std::map<Candidate, Cost> cache_;
  int probe_runs_ = 0;
  bool calibrated_ = false;
  Candidate ref_;
  Cost ref_cost_;
  double rest_exponent_ = 1;
  // The share of the reference's step time spent once per micro-step (the rest once per step):
  // 0 until the smallest micro-batch is measured.
  double per_micro_step_ = 0;
  double time_scale(int64_t from_micro, int64_t to_micro) const;  // step time at to / at from
  int64_t micro_steps(int64_t micro) const;  // per step: ceil(batch / micro), the batch the largest size
  // The reference ran a model's fused step (no gradient tensors: Model::fused_step), which any
  // technique leaves: the slowdown they share, the least of theirs alone, is in no factor.
  double fast_path_ = 1;
  // per dimension and alternative: factors on parameters, gradients, optimizer, rest; time;
  // `carry`: the rest a technique adds per byte it moves out of the other components (offload's
  // first-step state), so that it follows what there is to move; `g_bytes`: its gradients where the
  // reference has none (the fused step)
  struct Factors {
    double p = 1, g = 1, o = 1, r = 1, t = 1, carry = 0, g_bytes = 0;
    bool usable = false;
    std::string reason;
  };
  std::vector<std::vector<Factors>> factors_;
};

}  // namespace tt::plan
