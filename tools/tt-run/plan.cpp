#include "plan.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "child.h"
#include "planner.h"
#include "tt/error.h"
#include "tt/json_text.h"
#include "tt/log.h"
#include "tt/module_loader.h"
#include "tt/options.h"
#include "tt/pipeline.h"
#include "tt/registry.h"
#include "tt/report.h"
#include "tt/runtime.h"

namespace tt::plan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool installed(const std::string& plugin) {
  try {
    Registry::global().plugin(plugin);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A plugin's entry in the plugins list for one of its alternatives, as YAML flow text:
// "{name: checkpoint, policy: all}".
std::string plugin_entry(const std::string& plugin, const PlannerAlternative& a) {
  YAML::Node entry(YAML::NodeType::Map);
  entry["name"] = plugin;
  if (!a.options.empty())
    for (const auto& kv : YAML::Load(a.options)) entry[kv.first.Scalar()] = kv.second;
  entry.SetStyle(YAML::EmitterStyle::Flow);
  YAML::Emitter out;
  out << entry;
  return out.c_str();
}

}  // namespace

// Every module on the search path is loaded, so a plugin installed out of tree takes part as tt's
// own do.
std::vector<Dimension> offered_dimensions(const Pipeline& p, std::vector<std::string>& notes) {
  for (const auto& refusal : ModuleLoader::global().load_all()) notes.push_back("not loaded: " + refusal);
  std::set<std::string> named;
  for (const auto& c : p.plugins) named.insert(c.name);
  const bool cuda = p.trainer.get_string("device").rfind("cuda", 0) == 0;
  const auto device = cuda ? PlannerAlternative::Device::Cuda : PlannerAlternative::Device::Cpu;

  Registry& reg = Registry::global();
  std::vector<const PluginComponent*> offering;
  for (const auto& e : reg.entries(Kind::Plugin))  // by name
    if (!reg.plugin(e.name).planner.alternatives.empty()) offering.push_back(&reg.plugin(e.name));
  std::stable_sort(offering.begin(), offering.end(),
                   [](const PluginComponent* a, const PluginComponent* b) { return a->planner.order < b->planner.order; });

  std::vector<Dimension> out;
  const ModelComponent& model = reg.model(p.model.name);
  for (const PluginComponent* c : offering) {
    if (named.count(c->name)) {
      notes.push_back(c->name + ": kept as the pipeline sets it");
      continue;
    }
    if (const std::string part = missing_part(model, *c); !part.empty()) {
      notes.push_back(c->name + ": acts on a model's " + part + ", and model '" + p.model.name + "' has none");
      continue;
    }
    Dimension d{c->name, {}};
    for (const auto& a : c->planner.alternatives)
      if (a.only_on == PlannerAlternative::Device::Any || a.only_on == device)
        d.alternatives.push_back({a.label, plugin_entry(c->name, a)});
    if (d.alternatives.empty())
      notes.push_back(c->name + ": offers nothing for device " + p.trainer.get_string("device"));
    else
      out.push_back(std::move(d));
  }
  return out;
}

namespace {

std::vector<int64_t> micro_sizes(int64_t batch) {
  std::vector<int64_t> m;
  for (int64_t x = batch; x >= 1; x = x == 1 ? 0 : (x + 1) / 2)
    if (m.empty() || m.back() != x) m.push_back(x);
  return m;
}

std::string ms(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

// "+-2.0 floor" or "+-3.1 se": the noise and what it is.
std::string noise(const Cost& c) { return "+-" + ms(c.noise_ms) + (c.noise_is_floor ? " floor" : " se"); }

class Runner {
 public:
  Runner(const RunOptions& o, YAML::Node base, fs::path dir, std::vector<Dimension> dims)
      : o_(o), base_(std::move(base)), dir_(std::move(dir)), dims_(std::move(dims)) {}

  // The pipeline with candidate c's plugins and micro-batch (and, for probes, a short run).
  YAML::Node pipeline(const Candidate& c, bool probe) const {
    YAML::Node root = YAML::Clone(base_);
    YAML::Node plugins(YAML::NodeType::Sequence);
    if (root["plugins"] && root["plugins"].IsSequence())
      for (const auto& x : root["plugins"]) plugins.push_back(YAML::Clone(x));
    for (size_t d = 0; d < dims_.size(); ++d)
      if (c.pick[d] >= 0) plugins.push_back(YAML::Load(dims_[d].alternatives[static_cast<size_t>(c.pick[d])].yaml));
    root["plugins"] = plugins;
    set_dotted(root, "trainer.micro_batch_size", YAML::Node(c.micro), "plan");
    if (probe) {
      YAML::Node t = root["trainer"];
      for (const char* k : {"epochs", "eval_every", "checkpoint_every", "memory_cap"}) t.remove(k);
      t["max_steps"] = 1 + o_.probe_steps;
      t["progress"] = "off";
      t["log_every"] = 1;  // every step's time: the probe's median and noise
      t["checkpoint_minutes"] = 0;  // no checkpoint written inside the timed steps
      set_dotted(root, "output.plots", YAML::Node(false), "plan");
    }
    return root;
  }

  Cost probe(const Candidate& c, const std::string& label) {
    if (interrupt_requested()) throw Interrupted("the budget planner was interrupted");
    const int n = ++count_;
    const std::string tag = "probe-" + std::to_string(n);
    const fs::path yaml = dir_ / (tag + ".yaml"), run_dir = dir_ / tag, log_file = dir_ / (tag + ".log");
    std::ofstream(yaml) << "# probe " << n << " of tt-run's budget planner: " << label << "\n"
                        << YAML::Dump(pipeline(c, true)) << "\n";
    if (!o_.quiet) {
      std::printf("  probe %2d  %-58s ", n, label.c_str());
      std::fflush(stdout);
    }
    const auto t0 = std::chrono::steady_clock::now();
    fs::remove_all(run_dir);
    const std::string status = child::status_of(child::run(o_.tt_run, yaml, run_dir, log_file));
    if (status == "interrupted") throw Interrupted("the budget planner was interrupted");
    Cost cost;
    if (status == "ok") {
      try {
        const auto m = child::collect(run_dir, 1);
        cost.status = Cost::Status::Ok;
        cost.peak = m.peak;
        cost.parameters = m.params;
        cost.gradients = m.grads;
        cost.optimizer = m.optimizer;
        cost.step_ms = m.step_ms;
        cost.steps = m.step_times_ms;
      } catch (const std::exception& e) {
        cost.reason = std::string("no measurements: ") + e.what();
      }
      fs::remove_all(run_dir / "checkpoints");  // measurements only
    } else {
      cost.status = status == "out of memory" ? Cost::Status::OutOfMemory : Cost::Status::Failed;
      cost.reason = status + ": " + child::last_error_line(log_file) + " (" + log_file.string() + ")";
    }
    if (!o_.quiet) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (cost.ok())
        std::printf("%8.1f ms/step  peak %8s MiB  (%.0f s)\n", cost.step_ms, format_mib(cost.peak).c_str(), s);
      else
        std::printf("%s\n", status.c_str());
      std::fflush(stdout);
    }
    return cost;
  }

 private:
  const RunOptions& o_;
  YAML::Node base_;
  fs::path dir_;
  std::vector<Dimension> dims_;
  int count_ = 0;
};

json cost_json(const Cost& c) {
  json j = {{"status", c.ok() ? "ok" : c.status == Cost::Status::OutOfMemory ? "out of memory" : "failed"}};
  if (c.ok())
    j.update({{"peak_tensor_bytes", c.peak},
              {"parameters_bytes", c.parameters},
              {"gradients_bytes", c.gradients},
              {"optimizer_state_bytes", c.optimizer},
              {"median_step_ms", c.step_ms},
              {"timed_steps", c.steps.size()},
              {"noise_ms", c.noise_ms},
              {"noise_basis", c.noise_is_floor ? "noise floor" : "standard error of the steps"},
              {"probes", c.probes},
              {"probe_medians_ms", c.probe_ms}});
  else
    j["reason"] = c.reason;
  return j;
}

json plan_json(const Plan& p) {
  json j = {{"budget_bytes", p.budget}, {"limit_bytes", p.limit}, {"found", p.found},
            {"why", p.why},             {"probes", p.probes},     {"excluded", p.excluded},
            {"reference", cost_json(p.reference)}};
  if (p.found) {
    j["chosen"] = {{"configuration", p.chosen_label}, {"micro_batch_size", p.chosen.micro}, {"measured", cost_json(p.chosen_cost)}};
    j["fastest_fit"] = {{"configuration", p.fastest_label}, {"measured", cost_json(p.fastest_cost)}};
  }
  else if (p.smallest_peak > 0)
    j["smallest"] = {{"configuration", p.smallest_label}, {"peak_tensor_bytes", p.smallest_peak}, {"over_by_bytes", p.shortfall}};
  for (const auto& r : p.rows) {
    json row = {{"configuration", r.label}, {"estimated_peak_bytes", std::llround(r.est_peak)},
                {"estimated_step_ms", r.est_ms}, {"verdict", r.verdict}};
    if (r.measured) {
      row["measured"] = cost_json(r.cost);
      row["within_noise_of_the_choice"] = r.within_noise;
    }
    j["configurations"].push_back(row);
  }
  return j;
}

template <typename... A>
void appendf(std::string& out, const char* fmt, A... a) {
  const int n = std::snprintf(nullptr, 0, fmt, a...);
  std::string buf(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(buf.data(), buf.size(), fmt, a...);
  out.append(buf.data(), static_cast<size_t>(n));
}

}  // namespace

std::string plan_table(const Plan& p, int max_probes) {
  std::string out;
  appendf(out, "\nplan for a budget of %s (limit %s after the margin):\n", format_bytes(p.budget).c_str(),
              format_bytes(p.limit).c_str());
  // Each column as wide as its widest cell: labels and probe lists grow with the techniques and
  // the probes.
  std::vector<std::vector<std::string>> cells = {
      {"configuration", "est. MiB", "peak MiB", "est. ms", "step ms", "+- noise", "probe medians (ms)", "verdict"}};
  int unmeasured = 0, pruned = 0, slower = 0, capped = 0;
  for (const auto& r : p.rows) {
    if (!r.measured) {
      ++unmeasured;
      pruned += r.verdict == kPruned;
      slower += r.verdict == kEstimatedSlower;
      capped += r.verdict == kBeyondMaxProbes;
      continue;
    }
    std::string medians;
    for (double x : r.cost.probe_ms) medians += (medians.empty() ? "" : " ") + ms(x);
    const bool ok = r.cost.ok();
    cells.push_back({r.label, format_mib(r.est_peak), ok ? format_mib(r.cost.peak) : "-", ms(r.est_ms),
                     ok ? ms(r.cost.step_ms) : "-", ok ? noise(r.cost) : "-", ok ? medians : "-", r.verdict});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : cells) {
    std::string line = "  " + row[0] + std::string(width[0] - row[0].size(), ' ');  // left-aligned
    for (size_t i = 1; i + 2 < row.size(); ++i) line += "  " + std::string(width[i] - row[i].size(), ' ') + row[i];
    const size_t m = row.size() - 2;  // probe medians, left-aligned; the verdict last
    line += "  " + row[m] + std::string(width[m] - row[m].size(), ' ') + "  " + row.back() + "\n";
    out += line;
  }
  if (unmeasured > 0) {
    std::string parts;
    auto part = [&](int n, const std::string& what) {
      if (n > 0) parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    part(pruned, "pruned as estimated over the limit");
    part(slower, "estimated slower than the fastest measured fit");
    part(capped, "not reached: --max-probes (" + std::to_string(max_probes) + ") was spent; raise it to measure them");
    appendf(out, "  (%d more configurations estimated and not measured: %s)\n", unmeasured, parts.c_str());
  }
  appendf(out, "  step ms: the lowest of a configuration's probe medians (a slower probe is taken as load on the machine; "
              "each probe's first step, the warm-up, is left out); +- noise: the standard error of that probe's steps "
              "(se) or, where larger, the noise floor of 2%% of the time (floor); times within noise of each other are "
              "treated as equal, and then the fewer techniques win\n");
  for (const auto& e : p.excluded) appendf(out, "  excluded: %s\n", e.c_str());
  return out;
}

Outcome run(const RunOptions& o) {
  TT_CHECK_AS(ConfigError, o.probe_steps >= 1, "--probe-steps must be at least 1");
  TT_CHECK_AS(ConfigError, o.max_probes >= 1, "--max-probes must be at least 1");
  TT_CHECK_AS(ConfigError, o.margin >= 0 && o.margin < 0.9, "--margin must be in [0, 0.9), e.g. 0.1");
  const Pipeline p = load_pipeline(o.file, o.overrides);
  refuse_cap_beside_budget(p, o.recommend ? "--recommend's budgets" : "--budget");

  // The pipeline as a YAML tree with the overrides applied: probes and the plan start from it.
  YAML::Node base = child::load_yaml(o.file);
  TT_CHECK_AS(ConfigError, base.IsMap(), o.file, ": a pipeline is a YAML map");
  for (const auto& ov : o.overrides) apply_override(base, ov);
  if (base["trainer"] && base["trainer"].IsMap()) base["trainer"].remove("memory_budget");
  base.remove("compare");  // a budget plans the pipeline itself, not its comparison's variants

  fs::path dir = o.out_dir;
  if (dir.empty()) dir = timestamped_dir(p.output.get_string("dir"), p.name + "-plan");
  fs::create_directories(dir);

  std::vector<std::string> notes;
  std::vector<Dimension> dims = offered_dimensions(p, notes);
  Settings settings;
  settings.micro_sizes = micro_sizes(p.trainer.get_int("batch_size"));
  settings.margin = o.margin;
  settings.max_probes = o.max_probes;
  Runner runner(o, base, dir, dims);
  const double load_before = load_average();  // other processes' work: no probe runs yet
  // What the probes' step times were measured beside (as compare says it under its table).
  const auto load_line = [&] {
    const int threads = usable_threads(static_cast<int>(p.trainer.get_int("threads")));
    return load_warning(others_load(load_before, load_average(), threads), "the probes'",
                        threads > 1 ? "plan again on an idle machine, or with trainer.threads=1 (a step waits for its "
                                      "slowest thread, and other processes hold threads up; the peaks hold, the choice "
                                      "of the fastest does not)"
                                    : "plan again on an idle machine (the peaks hold; the choice of the fastest does not)");
  };
  Planner* self = nullptr;
  Planner planner(dims, settings, [&](const Candidate& c) { return runner.probe(c, self->label(c)); });
  self = &planner;
  if (!o.quiet) {
    std::printf("budget planner: %zu technique dimension%s (", dims.size(), dims.size() == 1 ? "" : "s");
    for (size_t d = 0; d < dims.size(); ++d) std::printf("%s%s", d ? ", " : "", dims[d].name.c_str());
    std::printf("), micro-batch");
    for (auto m : settings.micro_sizes) std::printf(" %lld", static_cast<long long>(m));
    std::printf("; probes of %d steps after 1 warm-up step, in %s\n", o.probe_steps, dir.c_str());
    for (const auto& n : notes) std::printf("  %s\n", n.c_str());
  }

  // The planner's own failures (the pipeline does not run) as tt's errors.
  auto explained = [&](auto f) {
    try {
      return f();
    } catch (const std::runtime_error& e) {
      if (dynamic_cast<const Error*>(&e)) throw;
      TT_FAIL_AS(Error, "budget planner: ", e.what());
    }
  };

  if (o.estimates_only) {
    const std::vector<Row> rows = explained([&] { return planner.estimates(); });
    json doc = {{"pipeline", o.file}, {"configurations", json::array()}};
    for (const auto& r : rows) {
      YAML::Emitter plugins;
      YAML::Node list = runner.pipeline(r.candidate, false)["plugins"];
      list.SetStyle(YAML::EmitterStyle::Flow);
      plugins << list;
      json row = {{"configuration", r.label}, {"micro_batch_size", r.candidate.micro}, {"plugins", plugins.c_str()},
                  {"estimated_peak_bytes", std::llround(r.est_peak)}, {"estimated_step_ms", r.est_ms}};
      if (r.measured) row["measured"] = cost_json(r.cost);  // a reference run
      doc["configurations"].push_back(row);
    }
    std::ofstream(dir / "estimates.json") << tt::json_text(doc, 2) << "\n";
    // The estimates, smallest peak first: what fits a budget, and at what time.
    std::vector<const Row*> order;
    for (const auto& r : rows) order.push_back(&r);
    std::stable_sort(order.begin(), order.end(), [](const Row* a, const Row* b) { return a->est_peak < b->est_peak; });
    size_t w = std::string("configuration").size();
    for (const Row* r : order) w = std::max(w, r->label.size());
    std::printf("\n  %-*s  %9s  %9s  %s\n", static_cast<int>(w), "configuration", "est. MiB", "est. ms",
                "measured (a reference probe)");
    for (const Row* r : order) {
      std::string measured;
      if (r->measured)
        measured = "  " + (r->cost.ok() ? format_mib(r->cost.peak) + " MiB, " + ms(r->cost.step_ms) + " ms"
                                        : std::string("did not run"));
      std::printf("  %-*s  %9s  %9s%s\n", static_cast<int>(w), r->label.c_str(), format_mib(r->est_peak).c_str(),
                  ms(r->est_ms).c_str(), measured.c_str());
    }
    std::printf("\n%zu configurations estimated from %d probe runs; %s\n", rows.size(), planner.total_probes(),
                (dir / "estimates.json").c_str());
    return {0, ""};
  }

  if (o.recommend) {
    std::vector<std::pair<int64_t, std::string>> given = o.recommend_budgets;
    if (given.empty())
      for (double g : {0.5, 1.0, 2.0, 4.0, 8.0, 16.0}) {
        char b[32];
        std::snprintf(b, sizeof b, "%g GiB", g);
        given.emplace_back(static_cast<int64_t>(g * (1LL << 30)), b);
      }
    json doc = {{"pipeline", o.file}, {"budgets", json::array()}};
    std::vector<int64_t> budgets;
    for (const auto& g : given) budgets.push_back(g.first);
    const std::vector<Plan> plans = explained([&] { return planner.recommend(budgets); });
    for (const auto& pl : plans) doc["budgets"].push_back(plan_json(pl));
    std::ofstream(dir / "recommend.json") << tt::json_text(doc, 2) << "\n";
    const Cost& ref = plans.front().reference;
    std::printf("\nrecommended settings for %s (measured; as written at micro-batch %lld: peak %s MiB, %s)\n",
                o.file.c_str(), static_cast<long long>(settings.micro_sizes[0]), format_mib(ref.peak).c_str(),
                timing(ref).c_str());
    int label_w = static_cast<int>(std::string("configuration").size());
    for (const auto& pl : plans)
      if (pl.found) label_w = std::max(label_w, static_cast<int>(pl.chosen_label.size()));
    std::printf("  %-8s %-*s %11s %16s %8s  %s\n", "budget", label_w, "configuration", "peak MiB", "step ms", "vs as",
                "note");
    for (size_t i = 0; i < plans.size(); ++i) {
      const Plan& pl = plans[i];
      const char* b = given[i].second.c_str();
      if (pl.found) {
        std::string note;
        if (!(pl.chosen_label == pl.fastest_label))
          note = Planner::within_noise(pl.chosen_cost, pl.fastest_cost)
                     ? "within noise of " + pl.fastest_label + " (" + ms(pl.fastest_cost.step_ms) + " ms): fewer techniques"
                     : "kept from the smaller budget";
        std::printf("  %-8s %-*s %11s %16s %7.2fx  %s\n", b, label_w, pl.chosen_label.c_str(), format_mib(pl.chosen_cost.peak).c_str(),
                    (ms(pl.chosen_cost.step_ms) + " " + noise(pl.chosen_cost)).c_str(),
                    pl.chosen_cost.step_ms / ref.step_ms, note.c_str());
      } else {
        std::printf("  %-8s nothing fits: the smallest measured peak is %s MiB (%s)\n", b,
                    format_mib(pl.smallest_peak).c_str(), pl.smallest_label.c_str());
      }
    }
    std::fputs(load_line().c_str(), stdout);
    // budgets far above the pipeline as written all take it as written: say how to see more
    if (given.front().first >= 4 * ref.peak)
      std::printf("  (the pipeline as written, %s MiB, fits the smallest budget %d times over: --budgets %sMiB,%sMiB,%sMiB "
                  "shows what the techniques buy below it)\n",
                  format_mib(ref.peak).c_str(), static_cast<int>(given.front().first / std::max<int64_t>(ref.peak, 1)),
                  format_mib(0.5 * ref.peak).c_str(), format_mib(0.75 * ref.peak).c_str(),
                  format_mib(ref.peak).c_str());
    std::printf("\n%d probe runs; %s\n", planner.total_probes(), (dir / "recommend.json").c_str());
    return {0, ""};
  }

  const Plan pl = explained([&] { return planner.plan(o.budget); });
  std::ofstream(dir / "plan.json") << tt::json_text(plan_json(pl), 2) << "\n";
  if (!o.quiet) {
    std::fputs(plan_table(pl, o.max_probes).c_str(), stdout);
    std::fputs(load_line().c_str(), stdout);
    std::fflush(stdout);
  }
  if (!pl.found) {
    std::fprintf(stderr, "tt-run: budget planner: %s (%s)\n", pl.why.c_str(), (dir / "plan.json").c_str());
    return {4, ""};
  }
  YAML::Node planned = runner.pipeline(pl.chosen, false);
  set_dotted(planned, "trainer.memory_cap", YAML::Node(std::to_string(o.budget)), "plan");
  bool guard = false;
  for (const auto& x : planned["plugins"])
    guard = guard || (x.IsScalar() ? x.Scalar() : x["name"].as<std::string>("")) == "oom-guard";
  if (!guard && installed("oom-guard")) {
    YAML::Node plugins = planned["plugins"];
    plugins.push_back(YAML::Load("{name: oom-guard}"));
  } else if (!guard) {
    notes.push_back("oom-guard is not installed: the run is capped without a safety net");
  }
  const fs::path out = dir / "planned.yaml";
  std::ofstream(out) << "# tt-run's budget planner chose: " << pl.chosen_label << "\n# " << pl.why << "\n"
                     << YAML::Dump(planned) << "\n";
  if (!o.quiet)
    std::printf("\nchosen: %s\n  why: %s\n  training %s under trainer.memory_cap = %s, with oom-guard\n\n",
                pl.chosen_label.c_str(), pl.why.c_str(), out.c_str(), format_bytes(o.budget).c_str());
  std::fflush(stdout);
  log().info("budget planner: {} ({} probes); plan in {}", pl.chosen_label, planner.total_probes(), dir.string());
  return {0, out.string()};
}

}  // namespace tt::plan
