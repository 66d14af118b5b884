#include "planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>

#include "tt/options.h"

namespace tt::plan {

namespace {

double ratio(double x, double y) { return y > 0 ? x / y : 1.0; }
int64_t rest_of(const Cost& c) { return std::max<int64_t>(1, c.peak - c.parameters - c.gradients - c.optimizer); }

}  // namespace

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

const Cost& Planner::measure(const Candidate& c, int& counter) {
  auto it = cache_.find(c);
  if (it != cache_.end()) return it->second;
  ++counter;
  return cache_.emplace(c, probe_(c)).first->second;
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
  // How the rest of the peak (activations, temporaries) and the step time follow the micro-batch.
  if (ref_index + 1 < s_.micro_sizes.size()) {
    const Candidate half{none, s_.micro_sizes[ref_index + 1]};
    const Cost& h = measure(half, counter);
    if (h.ok()) {
      const double lm = std::log(static_cast<double>(ref_.micro) / static_cast<double>(half.micro));
      rest_exponent_ = std::clamp(std::log(ratio(rest_of(ref_cost_), rest_of(h))) / lm, 0.0, 1.5);
      time_exponent_ = std::clamp(std::log(ratio(h.step_ms, ref_cost_.step_ms)) / lm, 0.0, 2.0);
    }
  }
  factors_.assign(dims_.size(), {});
  for (size_t d = 0; d < dims_.size(); ++d) {
    factors_[d].resize(dims_[d].alternatives.size());
    for (size_t a = 0; a < dims_[d].alternatives.size(); ++a) {
      Candidate c = ref_;
      c.pick[d] = static_cast<int>(a);
      const Cost& x = measure(c, counter);
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
      f.r = ratio(rest_of(x), rest_of(ref_cost_));
      f.t = ratio(x.step_ms, ref_cost_.step_ms);
    }
  }
  calibrated_ = true;
}

void Planner::estimate(const Candidate& c, double& peak, double& ms) const {
  double p = ref_cost_.parameters, g = ref_cost_.gradients, o = ref_cost_.optimizer,
         r = static_cast<double>(rest_of(ref_cost_)), t = ref_cost_.step_ms;
  // Start from the measured configuration with the most of c's techniques and none that c lacks
  // (the reference at least), moved to c's micro-batch, then apply the factors of the techniques
  // it lacks: what was measured together keeps how those techniques interact.
  const Candidate* from = &ref_;
  const Cost* base = &ref_cost_;
  int from_count = 0;
  for (const auto& [k, x] : cache_) {
    if (!x.ok()) continue;
    int count = 0;
    bool subset = true;
    for (size_t d = 0; d < dims_.size() && subset; ++d) {
      if (k.pick[d] < 0) continue;
      subset = k.pick[d] == c.pick[d];
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
  for (size_t d = 0; d < dims_.size(); ++d) {
    if (c.pick[d] < 0 || from->pick[d] >= 0) continue;
    const Factors& f = factors_[d][static_cast<size_t>(c.pick[d])];
    p *= f.p, g *= f.g, o *= f.o, r *= f.r, t *= f.t;
  }
  const double m = static_cast<double>(c.micro) / static_cast<double>(from->micro);
  r *= std::pow(m, rest_exponent_);
  t *= std::pow(1.0 / m, time_exponent_);
  peak = p + g + o + r;
  ms = t;
}

Plan Planner::plan(int64_t budget) {
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

  // Every configuration: the usable alternatives of each dimension (or none) x micro-batch
  // sizes from the reference's down.
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

  const double limit = static_cast<double>(out.limit);
  const double prune_above = limit * (1.0 + s_.slack);
  auto measured = [&](const Row& r) -> const Cost* {
    auto it = cache_.find(r.candidate);
    return it == cache_.end() ? nullptr : &it->second;
  };
  auto fits = [&](const Cost* c) { return c && c->ok() && static_cast<double>(c->peak) <= limit; };
  // The fastest measured fit; within `tie` of its time, the simplest: fewest techniques, then the
  // largest micro-batch (step times of a few probe steps differ by a few percent run to run).
  auto techniques = [](const Candidate& c) { return std::count_if(c.pick.begin(), c.pick.end(), [](int a) { return a >= 0; }); };
  auto fastest_fit = [&]() {
    double fastest = std::numeric_limits<double>::infinity();
    for (const auto& r : rows)
      if (fits(measured(r))) fastest = std::min(fastest, measured(r)->step_ms);
    return fastest;
  };
  auto best_fit = [&]() -> const Row* {
    const double fastest = fastest_fit();
    const Row* best = nullptr;
    for (const auto& r : rows) {
      const Cost* c = measured(r);
      if (!fits(c) || c->step_ms > fastest * (1.0 + s_.tie)) continue;
      if (!best) {
        best = &r;
        continue;
      }
      const auto key = [&](const Row& x) {
        return std::make_tuple(techniques(x.candidate), -x.candidate.micro, measured(x)->step_ms);
      };
      if (key(r) < key(*best)) best = &r;
    }
    return best;
  };
  int probes_here = 0;
  for (;;) {
    for (auto& r : rows) estimate(r.candidate, r.est_peak, r.est_ms);  // with what was measured since
    const double fastest = fastest_fit();
    const Row* next = nullptr;
    for (const auto& r : rows)
      if (!measured(r) && r.est_peak <= prune_above && (!next || r.est_ms < next->est_ms)) next = &r;
    if (!next || fastest * (1.0 + s_.tie) < next->est_ms || probes_here >= s_.max_probes) break;
    measure(next->candidate, counter);
    ++probes_here;
  }
  const Row* best = best_fit();
  const double fastest = fastest_fit();
  if (!best) {
    // Nothing fits: measure the configuration estimated smallest, so that the shortfall is a
    // measured figure, not an estimate.
    const Row* smallest = nullptr;
    for (const auto& r : rows)
      if (!smallest || r.est_peak < smallest->est_peak) smallest = &r;
    if (smallest && !measured(*smallest)) measure(smallest->candidate, counter);
    const Cost* least = nullptr;
    for (const auto& r : rows) {
      const Cost* c = measured(r);
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

  for (auto& r : rows) {
    const Cost* c = measured(r);
    if (c) {
      r.measured = true;
      r.cost = *c;
      r.verdict = !c->ok() ? (c->status == Cost::Status::OutOfMemory ? "out of memory" : "failed")
                  : fits(c) ? "fits"
                            : "over the limit";
    } else {
      r.verdict = r.est_peak > prune_above ? "pruned (estimate over)" : "not measured (estimated slower)";
    }
  }
  if (best) {
    out.found = true;
    out.chosen = best->candidate;
    out.chosen_label = best->label;
    out.chosen_cost = *measured(*best);
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

  const std::string lim = format_bytes(out.limit) + " (the budget " + format_bytes(budget) + " less a " +
                          std::to_string(static_cast<int>(std::lround(s_.margin * 100))) + "% margin)";
  if (out.found) {
    if (out.chosen_cost.step_ms > fastest)
      out.why = "the simplest measured configuration within " + std::to_string(std::lround(s_.tie * 100)) +
                "% of the fastest that fits (" + std::to_string(std::lround(fastest)) + " ms/step); its peak, " +
                format_bytes(out.chosen_cost.peak) + ", fits under " + lim;
    else
      out.why = "the fastest measured configuration whose peak, " + format_bytes(out.chosen_cost.peak) +
                ", fits under " + lim;
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
              " or make the model or batch smaller";
  } else {
    out.why = "nothing fits under " + lim + ", and no configuration ran to measure by how much";
  }
  return out;
}

}  // namespace tt::plan
