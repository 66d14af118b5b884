#include "planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <tuple>

#include "tt/options.h"
#include "tt/report.h"

namespace tt::plan {

namespace {

double ratio(double x, double y) { return y > 0 ? x / y : 1.0; }
int64_t rest_of(const Cost& c) { return std::max<int64_t>(1, c.peak - c.parameters - c.gradients - c.optimizer); }
int techniques(const Candidate& c) {
  return static_cast<int>(std::count_if(c.pick.begin(), c.pick.end(), [](int a) { return a >= 0; }));
}
// Fewer techniques, then the larger micro-batch: the simpler configuration first.
std::tuple<int, int64_t> simplicity(const Candidate& c) { return {techniques(c), -c.micro}; }

// The standard error of the mean of a probe's step times.
double standard_error(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0, ss = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()));
}

}  // namespace

std::string timing(const Cost& c) {
  auto f1 = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", x);
    return std::string(buf);
  };
  std::string s = f1(c.step_ms) + " ms/step";
  if (c.probe_ms.size() >= 2) {
    s += ", the lowest of " + std::to_string(c.probe_ms.size()) + " probes' medians (";
    for (size_t i = 0; i < c.probe_ms.size(); ++i) s += (i ? ", " : "") + f1(c.probe_ms[i]);
    s += ")";
  } else {
    s += ", 1 probe";
  }
  const int floor_pct = c.step_ms > 0 ? static_cast<int>(std::lround(100.0 * c.noise_ms / c.step_ms)) : 0;
  return s + ", +- " + f1(c.noise_ms) +
         (c.noise_is_floor ? " (" + std::to_string(floor_pct) + "% noise floor)" : " (standard error of its steps)");
}

Planner::Planner(std::vector<Dimension> dims, Settings settings, Probe probe)
    : dims_(std::move(dims)), s_(std::move(settings)), probe_(std::move(probe)) {
  if (s_.micro_sizes.empty()) throw std::invalid_argument("planner: no micro-batch sizes");
  if (!(s_.margin >= 0 && s_.margin < 1)) throw std::invalid_argument("planner: the margin must be in [0, 1)");
}

std::string Planner::label(const Candidate& c) const {
  std::string s;
  for (size_t d = 0; d < dims_.size(); ++d)
    if (c.pick[d] >= 0) s += (s.empty() ? "" : " + ") + dims_[d].alternatives[static_cast<size_t>(c.pick[d])].label;
  return (s.empty() ? std::string("as written") : s) + " @ micro " + std::to_string(c.micro);
}

bool Planner::within_noise(const Cost& a, const Cost& b) {
  return std::fabs(a.step_ms - b.step_ms) <= a.noise_ms + b.noise_ms;
}

bool Planner::beats(const Candidate& a, const Cost& ca, const Candidate& b, const Cost& cb) const {
  if (!within_noise(ca, cb)) return ca.step_ms < cb.step_ms;
  if (simplicity(a) != simplicity(b)) return simplicity(a) < simplicity(b);
  return ca.step_ms < cb.step_ms;
}

// Folds one probe into what is known of a configuration: the lowest median time, the largest
// peak; a probe that fails makes the configuration fail.
void Planner::absorb(Cost& into, Cost probe) const {
  if (probe.ok() && probe.step_ms <= 0 && !probe.steps.empty()) probe.step_ms = median(probe.steps);
  const int probes = into.probes + 1;
  std::vector<double> probe_ms = into.ok() || into.probes == 0 ? into.probe_ms : std::vector<double>{};
  if (probe.ok()) probe_ms.push_back(probe.step_ms);
  if (into.probes == 0 || !probe.ok() || !into.ok()) {
    if (into.probes == 0 || !probe.ok()) into = std::move(probe);
  } else {
    const int64_t peak = std::max(into.peak, probe.peak);
    if (probe.step_ms < into.step_ms) {
      into.step_ms = probe.step_ms;
      into.steps = std::move(probe.steps);
    }
    into.peak = peak;
  }
  into.probes = probes;
  into.probe_ms = into.ok() ? std::move(probe_ms) : std::vector<double>{};
  const double floor = s_.noise_floor * into.step_ms, spread = standard_error(into.steps);
  into.noise_ms = into.ok() ? std::max(floor, spread) : 0;
  into.noise_is_floor = into.ok() && floor >= spread;
}

const Cost& Planner::measure(const Candidate& c, int& counter) {
  auto it = cache_.find(c);
  if (it != cache_.end()) return it->second;
  return remeasure(c, counter);
}

const Cost& Planner::remeasure(const Candidate& c, int& counter) {
  ++counter;
  ++probe_runs_;
  Cost probe = probe_(c);
  absorb(cache_[c], std::move(probe));
  return cache_[c];
}

void Planner::calibrate(int& counter) {
  const std::vector<int> none(dims_.size(), -1);
  size_t ref_index = s_.micro_sizes.size();
  std::string oom_reason;
  for (size_t i = 0; i < s_.micro_sizes.size(); ++i) {
    const Candidate c{none, s_.micro_sizes[i]};
    const Cost& cost = measure(c, counter);
    if (cost.ok()) {
      ref_index = i;
      ref_ = c;
      ref_cost_ = cost;
      break;
    }
    if (cost.status == Cost::Status::Failed)
      throw std::runtime_error("the pipeline as written does not run (micro-batch " + std::to_string(c.micro) +
                               "): " + cost.reason);
    oom_reason = cost.reason;
  }
  if (ref_index == s_.micro_sizes.size())
    throw std::runtime_error("the pipeline as written runs out of memory at every micro-batch down to " +
                             std::to_string(s_.micro_sizes.back()) + ": " + oom_reason);
  // The smallest micro-batch that runs, then each alternative alone at the reference's micro-batch.
  const Cost* smallest_cost = nullptr;
  Candidate smallest = ref_;
  for (size_t i = s_.micro_sizes.size() - 1; i > ref_index; --i) {  // the smallest that runs
    smallest = {none, s_.micro_sizes[i]};
    if (measure(smallest, counter).ok()) {
      smallest_cost = &cache_[smallest];
      break;
    }
  }
  std::vector<std::vector<const Cost*>> alone(dims_.size());
  bool faster_alone = false;
  for (size_t d = 0; d < dims_.size(); ++d)
    for (size_t a = 0; a < dims_[d].alternatives.size(); ++a) {
      Candidate c = ref_;
      c.pick[d] = static_cast<int>(a);
      alone[d].push_back(&measure(c, counter));
      faster_alone = faster_alone || (alone[d].back()->ok() && alone[d].back()->step_ms * 1.25 < ref_cost_.step_ms);
    }
  // The pipeline as written is every factor's and ratio's denominator: where a technique alone
  // ran more than 1.25x faster than its one probe (techniques trade time for memory; one slow
  // probe under load put a chunked-attention fit at 0.13x), it is measured again, as a reference
  // probe (--max-probes does not count it). Its lowest median is its time.
  if (faster_alone && cache_[ref_].probes < 2) ref_cost_ = remeasure(ref_, counter);
  // How the rest of the peak (activations, temporaries) and the step time follow the micro-batch,
  // from the two ends of the range: the micro-batches between are interpolated, not extrapolated
  // from a small difference between two neighbours. Where the smallest fails (a model that needs
  // more than one example), the smallest that runs.
  if (smallest_cost) {
    const Cost& h = *smallest_cost;
    const double sizes = static_cast<double>(ref_.micro) / static_cast<double>(smallest.micro);
    rest_exponent_ = std::clamp(std::log(ratio(rest_of(ref_cost_), rest_of(h))) / std::log(sizes), 0.0, 1.5);
    // t(m) = t_ref x ((1 - s) + s x n(m)/n(ref)), n(m) = ceil(batch/m) micro-steps: s within
    // [0, 1], a smaller micro-batch is never faster and at most n(m)/n(ref) times slower
    // (beyond that is load on the machine during a probe)
    const double steps =
        static_cast<double>(micro_steps(smallest.micro)) / static_cast<double>(micro_steps(ref_.micro));
    per_micro_step_ = std::clamp((ratio(h.step_ms, ref_cost_.step_ms) - 1.0) / (steps - 1.0), 0.0, 1.0);
  }
  factors_.assign(dims_.size(), {});
  for (size_t d = 0; d < dims_.size(); ++d) {
    factors_[d].resize(dims_[d].alternatives.size());
    for (size_t a = 0; a < dims_[d].alternatives.size(); ++a) {
      const Cost& x = *alone[d][a];
      Factors& f = factors_[d][a];
      if (!x.ok()) {
        f.reason = dims_[d].alternatives[a].label + ": " +
                   (x.status == Cost::Status::OutOfMemory ? "out of memory alone at micro-batch " +
                                                                std::to_string(ref_.micro)
                                                          : "fails alone") +
                   (x.reason.empty() ? "" : " (" + x.reason + ")");
        continue;
      }
      f.usable = true;
      f.p = ratio(x.parameters, ref_cost_.parameters);
      f.g = ratio(x.gradients, ref_cost_.gradients);
      f.o = ratio(x.optimizer, ref_cost_.optimizer);
      if (ref_cost_.gradients == 0) f.g_bytes = static_cast<double>(x.gradients);
      // What it moves out of the other components, and the rest it adds: that rise, up to the
      // bytes moved, follows the bytes moved (offload of a state made by its first step in tensor
      // memory, then moved: adam8bit's).
      const double moved = static_cast<double>(std::max<int64_t>(0, ref_cost_.parameters - x.parameters) +
                                               std::max<int64_t>(0, ref_cost_.gradients - x.gradients) +
                                               std::max<int64_t>(0, ref_cost_.optimizer - x.optimizer));
      const double rise = static_cast<double>(rest_of(x) - rest_of(ref_cost_));
      if (moved > 0 && rise > 0) f.carry = std::min(1.0, rise / moved);
      f.r = (static_cast<double>(rest_of(x)) - f.carry * moved) / static_cast<double>(rest_of(ref_cost_));
      f.t = ratio(x.step_ms, ref_cost_.step_ms);
    }
  }
  // A reference on a model's fused step (no gradients) that every technique alone leaves
  // (gradients): the slowdown they share is the least of theirs, counted once per configuration.
  fast_path_ = 1;
  if (ref_cost_.ok() && ref_cost_.gradients == 0) {
    double least = std::numeric_limits<double>::infinity();
    bool all_left = true;
    for (size_t d = 0; d < dims_.size(); ++d)
      for (size_t a = 0; a < dims_[d].alternatives.size(); ++a)
        if (factors_[d][a].usable) {
          all_left = all_left && alone[d][a]->gradients > 0;
          least = std::min(least, factors_[d][a].t);
        }
    if (all_left && std::isfinite(least) && least > 1) {
      fast_path_ = least;
      for (auto& per_dim : factors_)
        for (auto& f : per_dim)
          if (f.usable) f.t /= fast_path_;
    }
  }
  calibrated_ = true;
}

void Planner::estimate(const Candidate& c, double& peak, double& ms) const {
  double p = ref_cost_.parameters, g = ref_cost_.gradients, o = ref_cost_.optimizer,
         r = static_cast<double>(rest_of(ref_cost_)), t = ref_cost_.step_ms;
  // Start from the measured configuration with the most of c's techniques and none that c lacks
  // (the reference at least), moved to c's micro-batch, then apply the factors of the techniques
  // it lacks: what was measured together keeps how those techniques interact. Plugins act in list
  // order (offload moves the state adam8bit made), so the techniques applied come after the
  // base's own.
  const Candidate* from = &ref_;
  const Cost* base = &ref_cost_;
  int from_count = 0;
  for (const auto& [k, x] : cache_) {
    if (!x.ok()) continue;
    int count = 0;
    bool subset = true, added = false;
    for (size_t d = 0; d < dims_.size() && subset; ++d) {
      if (k.pick[d] < 0) {
        added = added || c.pick[d] >= 0;
        continue;
      }
      subset = k.pick[d] == c.pick[d] && !added;
      ++count;
    }
    if (!subset) continue;
    const auto dist = [&](int64_t m) { return std::fabs(std::log(static_cast<double>(m) / static_cast<double>(c.micro))); };
    if (count > from_count || (count == from_count && dist(k.micro) < dist(from->micro))) {
      from = &k, base = &x, from_count = count;
    }
  }
  p = base->parameters, g = base->gradients, o = base->optimizer, r = static_cast<double>(rest_of(*base)),
  t = base->step_ms;
  r *= std::pow(static_cast<double>(c.micro) / static_cast<double>(from->micro), rest_exponent_);
  const bool from_fast_path = base->gradients == 0;  // the fused step, which any technique leaves
  for (size_t d = 0; d < dims_.size(); ++d) {
    if (c.pick[d] < 0 || from->pick[d] >= 0) continue;
    const Factors& f = factors_[d][static_cast<size_t>(c.pick[d])];
    const double moved = p * std::max(0.0, 1 - f.p) + g * std::max(0.0, 1 - f.g) + o * std::max(0.0, 1 - f.o);
    p *= f.p, o *= f.o, t *= f.t;
    g = g > 0 ? g * f.g : f.g_bytes;
    r = r * f.r + f.carry * moved;
  }
  if (from_fast_path && techniques(c) > 0) t *= fast_path_;
  t *= time_scale(from->micro, c.micro);
  peak = p + g + o + r;
  // Time factors of single probes multiply, and a slow reference probe (load, a cold start) makes
  // every technique look faster than it is: no estimate is faster than the fastest configuration
  // measured at its micro-batch or a larger one (techniques trade time for memory; a smaller
  // micro-batch runs more micro-steps).
  double fastest = std::numeric_limits<double>::infinity();
  for (const auto& [k, x] : cache_)
    if (x.ok() && k.micro >= c.micro) fastest = std::min(fastest, x.step_ms);
  ms = std::isfinite(fastest) ? std::max(t, fastest) : t;
}

int64_t Planner::micro_steps(int64_t micro) const {
  const int64_t batch = s_.micro_sizes.front();
  return (batch + micro - 1) / micro;
}

double Planner::time_scale(int64_t from_micro, int64_t to_micro) const {
  const auto at = [&](int64_t m) {
    return 1.0 - per_micro_step_ + per_micro_step_ * static_cast<double>(micro_steps(m)) /
                                       static_cast<double>(micro_steps(ref_.micro));
  };
  return at(to_micro) / at(from_micro);
}

// Every configuration: the usable alternatives of each dimension (or none) x micro-batch sizes
// from the reference's down.
std::vector<Row> Planner::configurations() const {
  std::vector<Row> rows;
  std::vector<int> pick(dims_.size(), -1);
  std::function<void(size_t)> enumerate = [&](size_t d) {
    if (d == dims_.size()) {
      for (int64_t m : s_.micro_sizes) {
        if (m > ref_.micro) continue;
        Row row;
        row.candidate = {pick, m};
        row.label = label(row.candidate);
        estimate(row.candidate, row.est_peak, row.est_ms);
        rows.push_back(std::move(row));
      }
      return;
    }
    for (int a = -1; a < static_cast<int>(dims_[d].alternatives.size()); ++a) {
      if (a >= 0 && !factors_[d][static_cast<size_t>(a)].usable) continue;
      pick[d] = a;
      enumerate(d + 1);
    }
    pick[d] = -1;
  };
  enumerate(0);
  return rows;
}

std::vector<Row> Planner::estimates() {
  int counter = 0;
  if (!calibrated_) calibrate(counter);
  std::vector<Row> rows = configurations();
  for (auto& r : rows)
    if (auto it = cache_.find(r.candidate); it != cache_.end()) r.measured = true, r.cost = it->second;
  return rows;
}

Plan Planner::plan(int64_t budget) { return plan(budget, nullptr, true); }

std::vector<Plan> Planner::recommend(std::vector<int64_t> budgets) {
  std::sort(budgets.begin(), budgets.end());
  for (int64_t b : budgets) plan(b, nullptr, true);  // the measurements
  // The choices, from everything measured, smallest budget first: a larger budget keeps the
  // smaller one's choice unless its own beats it.
  std::vector<Plan> out;
  for (int64_t b : budgets) {
    const Candidate* floor = !out.empty() && out.back().found ? &out.back().chosen : nullptr;
    out.push_back(plan(b, floor, false));
  }
  return out;
}

Plan Planner::plan(int64_t budget, const Candidate* at_least, bool search) {
  if (budget <= 0) throw std::invalid_argument("planner: the budget must be positive");
  Plan out;
  out.budget = budget;
  out.limit = static_cast<int64_t>(std::floor(static_cast<double>(budget) * (1.0 - s_.margin)));
  int counter = 0;
  if (!calibrated_) calibrate(counter);
  out.reference = ref_cost_;
  for (const auto& per_dim : factors_)
    for (const auto& f : per_dim)
      if (!f.usable) out.excluded.push_back(f.reason);

  std::vector<Row> rows = configurations();

  const double limit = static_cast<double>(out.limit);
  const double prune_above = limit * (1.0 + s_.slack);
  auto measured = [&](const Candidate& c) -> const Cost* {
    auto it = cache_.find(c);
    return it == cache_.end() ? nullptr : &it->second;
  };
  auto fits = [&](const Cost* c) { return c && c->ok() && static_cast<double>(c->peak) <= limit; };
  auto fastest_fit = [&]() -> const Row* {
    const Row* f = nullptr;
    for (const auto& r : rows)
      if (fits(measured(r.candidate)) && (!f || measured(r.candidate)->step_ms < measured(f->candidate)->step_ms)) f = &r;
    return f;
  };
  // The fastest fit; among the fits within noise of it, the simplest (tt::plan::Planner::beats).
  auto best_fit = [&]() -> const Row* {
    const Row* f = fastest_fit();
    if (!f) return nullptr;
    const Cost& cf = *measured(f->candidate);
    const Row* best = f;
    for (const auto& r : rows) {
      const Cost* c = measured(r.candidate);
      if (!fits(c) || !within_noise(*c, cf)) continue;
      if (beats(r.candidate, *c, best->candidate, *measured(best->candidate))) best = &r;
    }
    return best;
  };

  // A fit's simpler neighbours (one of its techniques fewer, its micro-batch) estimated within
  // the slack are measured too (at most one probe per technique it has): a technique that buys
  // nothing, in peak or time, is then left out by the choice of the simplest within noise.
  auto measure_simpler = [&](const Candidate& fit) {
    for (size_t d = 0; d < dims_.size(); ++d) {
      if (fit.pick[d] < 0) continue;
      Candidate c = fit;
      c.pick[d] = -1;
      double peak = 0, ms = 0;
      estimate(c, peak, ms);
      if (!measured(c) && peak <= prune_above) measure(c, counter);
    }
  };

  int probes_here = 0;
  if (search) {
    for (;;) {
      for (auto& r : rows) estimate(r.candidate, r.est_peak, r.est_ms);  // with what was measured since
      const Row* f = fastest_fit();
      const Row* next = nullptr;
      for (const auto& r : rows)
        if (!measured(r.candidate) && r.est_peak <= prune_above && (!next || r.est_ms < next->est_ms)) next = &r;
      if (!next || probes_here >= s_.max_probes) break;
      if (f && measured(f->candidate)->step_ms * (1.0 + s_.noise_floor) < next->est_ms) break;
      measure(next->candidate, counter);
      ++probes_here;
    }
    if (const Row* f = fastest_fit()) measure_simpler(f->candidate);
    // Close contenders, re-measured round-robin: the fastest fit first, then each simpler fit
    // whose order against it is not yet settled.
    while (probes_here < s_.max_probes) {
      const Row* f = fastest_fit();
      if (!f) break;
      const Cost cf = *measured(f->candidate);
      std::vector<Candidate> again;
      for (const auto& r : rows) {
        const Cost* c = measured(r.candidate);
        if (!fits(c) || r.candidate == f->candidate || !(simplicity(r.candidate) < simplicity(f->candidate))) continue;
        const bool close = techniques(r.candidate) == 0 || c->step_ms <= 1.25 * cf.step_ms || within_noise(*c, cf);
        if (!close) continue;
        const bool settled = within_noise(*c, cf) ? c->probes >= s_.max_repeats && cf.probes >= s_.max_repeats
                                                  : c->probes >= 2 && cf.probes >= 2;
        if (settled) continue;
        if (cf.probes < s_.max_repeats && (again.empty() || !(again.front() == f->candidate)))
          again.insert(again.begin(), f->candidate);
        if (c->probes < s_.max_repeats) again.push_back(r.candidate);
      }
      if (again.empty()) break;
      for (const auto& c : again) {
        if (probes_here >= s_.max_probes) break;
        remeasure(c, counter);
        ++probes_here;
      }
    }
  }
  const Row* best = best_fit();
  int left_within_slack = 0;  // unmeasured configurations estimated within the slack, nothing fitting
  if (!best) {
    // Nothing measured fits. A refusal tells the user to raise the budget, so it rests on
    // measurements, not estimates (which can be high: a combination's factors multiply, and
    // techniques interact): the configurations estimated within the slack of the limit are
    // measured, smallest estimate first (re-estimated after each), until one fits or max_probes
    // (at least 4) more are spent; the smallest estimate at least, however far over. One that
    // fits (or a simpler neighbour of it) is the choice; otherwise the smallest peak measured is
    // the shortfall below.
    const int allowance = std::max(4, s_.max_probes);
    for (int extra = 0; !best && extra < allowance; ++extra) {
      for (auto& r : rows) estimate(r.candidate, r.est_peak, r.est_ms);
      const Row* smallest = nullptr;
      for (const auto& r : rows)
        if (!measured(r.candidate) && (!smallest || r.est_peak < smallest->est_peak)) smallest = &r;
      if (!smallest || (extra > 0 && smallest->est_peak > prune_above)) break;
      measure(smallest->candidate, counter);
      best = best_fit();
    }
    if (best) {
      measure_simpler(best->candidate);
      best = best_fit();
    } else {
      for (const auto& r : rows) left_within_slack += !measured(r.candidate) && r.est_peak <= prune_above;
    }
  }
  if (best && at_least) {
    const Cost* floor = measured(*at_least);
    if (fits(floor) && beats(*at_least, *floor, best->candidate, *measured(best->candidate)))
      for (const auto& r : rows)
        if (r.candidate == *at_least) best = &r;
  }
  const Row* fastest_row = fastest_fit();
  const Candidate fastest = fastest_row ? fastest_row->candidate : Candidate{};
  if (!best) {
    // Nothing fits, the smallest estimate measured too: the shortfall is a measured figure.
    const Cost* least = nullptr;
    for (const auto& r : rows) {
      const Cost* c = measured(r.candidate);
      if (c && c->ok() && (!least || c->peak < least->peak)) {
        least = c;
        out.smallest_label = r.label;
      }
    }
    if (least) {
      out.smallest_peak = least->peak;
      out.shortfall = least->peak - out.limit;
    }
  }

  const Cost* chosen_cost = best ? measured(best->candidate) : nullptr;
  for (auto& r : rows) {
    const Cost* c = measured(r.candidate);
    if (c) {
      r.measured = true;
      r.cost = *c;
      r.verdict = !c->ok() ? (c->status == Cost::Status::OutOfMemory ? "out of memory" : "failed")
                  : fits(c) ? "fits"
                            : "over the limit";
      r.within_noise = fits(c) && chosen_cost && within_noise(*c, *chosen_cost);
      if (r.within_noise && !(r.candidate == best->candidate)) r.verdict = "fits, within noise of the choice";
    } else {
      // The search stops at the first estimate slower than the fastest fit, or when max_probes is
      // spent: an estimate no slower than that (or any, when nothing fits) was left by the cap.
      const bool slower = fastest_row && r.est_ms > measured(fastest)->step_ms * (1.0 + s_.noise_floor);
      r.verdict = r.est_peak > prune_above ? kPruned : slower ? kEstimatedSlower : kBeyondMaxProbes;
    }
  }
  if (best) {
    out.found = true;
    out.chosen = best->candidate;
    out.chosen_label = best->label;
    out.chosen_cost = *chosen_cost;
    out.fastest_label = fastest_row->label;
    out.fastest_cost = *measured(fastest);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.measured != b.measured) return a.measured;
    const double ta = a.measured ? a.cost.step_ms : a.est_ms, tb = b.measured ? b.cost.step_ms : b.est_ms;
    return ta < tb;
  });
  for (auto& r : rows)
    if (out.found && r.candidate == out.chosen) r.verdict = "chosen";
  out.rows = std::move(rows);
  out.probes = counter;
  out.reference = *measured(ref_);  // with its re-measurements

  // Where the peak and the limit round to the same figure ("5.58 MiB fits under 5.58 MiB"), their bytes.
  const bool same_figure = out.found && format_bytes(out.chosen_cost.peak) == format_bytes(out.limit);
  const auto in_bytes = [&](int64_t b) { return same_figure ? " (" + std::to_string(b) + " bytes)" : std::string(); };
  const std::string lim = format_bytes(out.limit) + in_bytes(out.limit) + " (the budget " + format_bytes(budget) +
                          " less a " + std::to_string(static_cast<int>(std::lround(s_.margin * 100))) + "% margin)";
  if (out.found) {
    if (!(out.chosen == fastest) && within_noise(out.chosen_cost, out.fastest_cost))
      out.why = "the simplest measured configuration within noise of the fastest that fits (" + out.fastest_label +
                ", " + timing(out.fastest_cost) + "; this one " + timing(out.chosen_cost) + "); its peak, " +
                format_bytes(out.chosen_cost.peak) + in_bytes(out.chosen_cost.peak) + ", fits under " + lim;
    else if (!(out.chosen == fastest))
      out.why = "a smaller budget's choice, which beats the fastest fit here (" + out.fastest_label + ", " +
                timing(out.fastest_cost) + "; this one " + timing(out.chosen_cost) + "); its peak, " +
                format_bytes(out.chosen_cost.peak) + in_bytes(out.chosen_cost.peak) + ", fits under " + lim;
    else
      out.why = "the fastest measured configuration whose peak, " + format_bytes(out.chosen_cost.peak) +
                in_bytes(out.chosen_cost.peak) + ", fits under " + lim + " (" + timing(out.chosen_cost) + ")";
    // Name what it beat: the fastest measured configuration that did not fit.
    for (const auto& r : out.rows)
      if (r.measured && r.cost.ok() && r.cost.step_ms < out.chosen_cost.step_ms && r.verdict == "over the limit") {
        out.why += "; faster but over: " + r.label + " (" + format_bytes(r.cost.peak) + ")";
        break;
      }
  } else if (out.smallest_peak > 0) {
    out.why = "nothing fits under " + lim + ": the smallest measured peak, " + format_bytes(out.smallest_peak) +
              " (" + out.smallest_label + "), is " + format_bytes(out.shortfall) + " over; raise the budget to at least " +
              format_bytes(static_cast<int64_t>(std::ceil(static_cast<double>(out.smallest_peak) / (1.0 - s_.margin)))) +
              " or make the model or batch smaller" +
              (left_within_slack > 0 ? " (" + std::to_string(left_within_slack) + " configuration" +
                                           (left_within_slack == 1 ? " was" : "s were") + " estimated within " +
                                           std::to_string(static_cast<int>(std::lround(s_.slack * 100))) +
                                           "% of the limit and not measured: raise --max-probes to measure them)"
                                     : "");
  } else {
    out.why = "nothing fits under " + lim + ", and no configuration ran to measure by how much";
  }
  return out;
}

}  // namespace tt::plan
