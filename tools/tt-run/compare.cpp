#include "compare.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "child.h"
#include "tt/compat.h"
#include "tt/error.h"
#include "tt/json_text.h"
#include "tt/log.h"
#include "tt/options.h"
#include "tt/pipeline.h"
#include "tt/report.h"
#include "tt/runtime.h"
#include "tt/temp_dir.h"
#include "tt/yaml_util.h"

namespace tt::compare {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// What a variant's summary.json says of its removed checkpoints, for --resume and --export to
// read (core/src/train/setup.cpp, export.cpp): a comparison keeps measurements, not weights.
// `summary`: the one child::collect read from it.
void mark_weights_not_kept(const fs::path& dir, json summary) {
  if (!summary.is_object()) return;
  summary["checkpoints_removed"] = "a variant of a comparison: its measurements are kept, not its weights";
  write_file_atomic(dir / "summary.json", tt::json_text(summary, 2) + "\n");
}

struct Variant {
  std::string name;
  std::string file;      // the pipeline it starts from
  std::string at;        // where the compare: section names it (FILE:LINE:COL), or the file named
  bool replaces_plugins = false;  // plugins: given: it replaces the pipeline's list
  YAML::Node plugins;
  std::vector<std::pair<std::string, YAML::Node>> set;
};

struct Spec {
  std::vector<Variant> variants;
  std::string baseline;
  int steps = 20, warmup = 3, repeats = 1;
  bool existing = false;  // run directories tabulated as they are (each its own steps), nothing run
};

struct Result : child::Measured {
  std::string status = "not run";  // ok, refused, out of memory, error (exit N), crashed (signal N)
  std::string reason;              // why a variant was refused, or the last error line of a failed run
  bool ok = false;
  // Every run's measurements (repeats); the row is the run whose step time is the median.
  std::vector<child::Measured> runs;
  // One figure of every run, in order: per_run(&child::Measured::rss).
  template <class T>
  std::vector<T> per_run(T child::Measured::*figure) const {
    std::vector<T> v;
    for (const auto& m : runs) v.push_back(m.*figure);
    return v;
  }
  // The process's tensor peak. `peak` is the row's: the same, or where oom-guard retried after
  // running out of memory, the peak since that retry (the micro-batch that fits; the failed
  // attempt's bytes are not what the technique holds).
  int64_t process_peak = 0;
  bool peak_since_retry_shown() const { return peak_since_retry >= 0 && peak_since_retry != process_peak; }
  // The row shows run `m`: its figures, with the peak (and the rest of it) since a retry.
  void show(const child::Measured& m) {
    static_cast<child::Measured&>(*this) = m;
    process_peak = m.peak;
    if (m.peak_since_retry >= 0) {
      peak = m.peak_since_retry;
      rest -= process_peak - peak;
    }
  }
};

int as_int(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<int>();
  } catch (const std::exception&) {
    TT_FAIL_AS(ConfigError, where, " must be an integer, got '", YAML::Dump(n), "'");
  }
}

Spec parse_section(const YAML::Node& c, const std::string& file) {
  Spec spec;
  static const std::set<std::string> keys = {"baseline", "steps", "warmup_steps", "repeats", "variants"};
  for (const auto& kv : c) {
    const std::string k = kv.first.Scalar();
    TT_CHECK_AS(ConfigError, keys.count(k), location(file, kv.first), ": compare: unknown key '", k,
                "' (valid: baseline, steps, warmup_steps, repeats, variants)");
  }
  if (c["steps"]) spec.steps = as_int(c["steps"], file + ": compare.steps");
  if (c["warmup_steps"]) spec.warmup = as_int(c["warmup_steps"], file + ": compare.warmup_steps");
  if (c["repeats"]) spec.repeats = as_int(c["repeats"], file + ": compare.repeats");
  if (c["baseline"]) spec.baseline = c["baseline"].as<std::string>();
  const YAML::Node v = c["variants"];
  TT_CHECK_AS(ConfigError, v && v.IsMap() && v.size() >= 1, file,
              ": compare.variants must be a map of variant name -> {plugins: [...], set: {key: value}}, e.g.\n"
              "  variants:\n    baseline: {}\n    checkpoint: {plugins: [checkpoint]}");
  for (const auto& kv : v) {  // a name twice is a duplicate key, refused when the file is read
    Variant var;
    var.name = kv.first.Scalar();
    var.file = file;
    var.at = location(file, kv.first);
    TT_CHECK_AS(ConfigError, !var.name.empty(), var.at, ": compare.variants: a variant without a name");
    TT_CHECK_AS(ConfigError,
                var.name.find_first_of("/ \t\"") == std::string::npos &&
                    std::none_of(var.name.begin(), var.name.end(),
                                 [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; }),
                var.at, ": compare.variants: '", var.name,
                "': a variant name must not contain '/', spaces, '\"' or control characters (it names files and the "
                "plot's points)");
    const YAML::Node body = kv.second;
    if (body && !body.IsNull()) {
      TT_CHECK_AS(ConfigError, body.IsMap(), var.at, ": compare.variants.", var.name,
                  " must be a map ({plugins: [...], set: {...}})");
      for (const auto& b : body) {
        const std::string k = b.first.Scalar();
        TT_CHECK_AS(ConfigError, k == "plugins" || k == "set", location(file, b.first), ": compare.variants.", var.name,
                    ": unknown key '", k, "' (valid: plugins, set)");
      }
      if (body["plugins"]) {
        TT_CHECK_AS(ConfigError, body["plugins"].IsSequence(), location(file, body["plugins"]), ": compare.variants.", var.name,
                    ".plugins must be a list, e.g. [checkpoint, {name: amp, dtype: bf16}]");
        var.plugins = YAML::Clone(body["plugins"]);
        var.replaces_plugins = true;
      }
      if (body["set"]) {
        TT_CHECK_AS(ConfigError, body["set"].IsMap(), location(file, body["set"]), ": compare.variants.", var.name,
                    ".set must be a map of dotted keys, e.g. {trainer.micro_batch_size: 4}");
        for (const auto& s : body["set"]) var.set.emplace_back(s.first.Scalar(), YAML::Clone(s.second));
      }
    }
    spec.variants.push_back(std::move(var));
  }
  return spec;
}

std::string fixed(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

void pareto_plot(const fs::path& out, const std::vector<Variant>& vs, const std::vector<Result>& rs) {
  std::vector<size_t> ok;
  for (size_t i = 0; i < rs.size(); ++i)
    if (rs[i].ok) ok.push_back(i);
  if (ok.empty()) return;
  {
    std::ofstream d(out / "compare.dat");
    d << "# variant step_ms peak_tensor_MiB\n";
    for (size_t i : ok) d << '"' << vs[i].name << "\" " << rs[i].step_ms << ' ' << rs[i].peak / 1048576.0 << '\n';
    // The Pareto front: by step time, each variant that holds less than every faster one.
    std::vector<size_t> by_time = ok;
    std::sort(by_time.begin(), by_time.end(), [&](size_t a, size_t b) { return rs[a].step_ms < rs[b].step_ms; });
    std::ofstream f(out / "front.dat");
    int64_t best = INT64_MAX;
    for (size_t i : by_time)
      if (rs[i].peak < best) {
        best = rs[i].peak;
        f << rs[i].step_ms << ' ' << rs[i].peak / 1048576.0 << '\n';
      }
  }
  // The ranges and margins are set, not left to gnuplot, so that each point's pixel is known and
  // the labels can be placed apart (two variants a few ms apart at the same peak printed theirs
  // over each other). 900 x 600 pixels, characters of the 10-point font about 7 x 14.
  auto range = [&](auto value, double below, double above) {
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i : ok) lo = std::min(lo, value(i)), hi = std::max(hi, value(i));
    const double span = hi > lo ? hi - lo : std::max(std::fabs(hi) * 0.2, 1e-6);
    return std::pair<double, double>(lo - below * span, hi + above * span);
  };
  const auto xr = range([&](size_t i) { return rs[i].step_ms; }, 0.1, 0.1);
  const auto yr = range([&](size_t i) { return rs[i].peak / 1048576.0; }, 0.1, 0.2);
  const double left = 0.11, right = 0.97, bottom = 0.10, top = 0.92, char_w = 7, char_h = 14;
  const double width = (right - left) * 900, height = (top - bottom) * 600;
  std::vector<LabelPoint> points;
  for (size_t i : ok)
    points.push_back({(rs[i].step_ms - xr.first) / (xr.second - xr.first) * width,
                      (rs[i].peak / 1048576.0 - yr.first) / (yr.second - yr.first) * height, vs[i].name});
  // the key, top right: two lines of about 20 characters
  const auto spots = place_labels(points, width, height, char_w, char_h,
                                  {{width - 22 * char_w, height - 3 * char_h, width, height}});
  std::ostringstream script;
  script << std::setprecision(10) << "set title 'peak tensor memory vs step time (tt meter)'\n"
            "set xlabel 'median step time (ms)'\nset ylabel 'peak tensor memory (MiB)'\nset grid\n"
            "set key top right\n"
         << "set lmargin at screen " << left << "\nset rmargin at screen " << right << "\nset bmargin at screen "
         << bottom << "\nset tmargin at screen " << top << "\nset xrange [" << xr.first << ':' << xr.second
         << "]\nset yrange [" << yr.first << ':' << yr.second << "]\n";
  for (size_t k = 0; k < ok.size(); ++k) {
    script << "set label " << k + 1 << " " << gnuplot_quoted(vs[ok[k]].name) << " at " << rs[ok[k]].step_ms << ',' << rs[ok[k]].peak / 1048576.0
           << ' ' << spots[k].align << " offset " << spots[k].dx << ',' << spots[k].dy << '\n';
  }
  script << "plot " << gnuplot_quoted((out / "compare.dat").string()) << " using 2:3 with points pt 7 ps 1.5 title 'variants', "
         << gnuplot_quoted((out / "front.dat").string()) << " using 1:2 with linespoints lw 2 dt 2 pt 6 title 'Pareto front'\n";
  const fs::path png = out / "compare.png";
  if (gnuplot_png(script.str(), png, "900,600 font ',10'", out / "gnuplot.log")) return;
  log().warn("compare: no plot (gnuplot missing or failed; see {}; apt-get install gnuplot-nox)",
             (out / "gnuplot.log").string());
}

// The table (stdout), compare.csv, compare.json and the Pareto plot of the variants' results: at
// the end of a comparison, or of an interrupted one (the variants not run say so in their rows).
void write_report(const fs::path& out, const Options& o, const Spec& spec, const std::vector<Result>& results,
                  size_t base, double load_before) {
  const size_t n = spec.variants.size();
  // A pipeline that evaluates gets a validation column
  // (val_loss when the model reports it, else the first of its metrics by name): a variant
  // that changes what is trained (EMA weights, LoRA) is judged there, not by the training loss.
  // A plugin that evaluates other weights in place of the trained ones reports the metrics
  // renamed <plugin>_<metric> (the ema example's ema_val_loss, docs/plugins.md): that variant's
  // row shows it, marked with a footnote.
  const Result& b = results[base];
  auto renamed = [](const std::string& key, const std::string& metric) {
    return key.size() > metric.size() + 1 &&
           key.compare(key.size() - metric.size() - 1, std::string::npos, "_" + metric) == 0;
  };
  // Where no variant evaluates, the model's own figures at the end of training (model_metrics:
  // the topic model's corpus_loss, a loss over the whole corpus whatever the batch size, where
  // the last batch's training loss is not comparable across batch sizes) take the column.
  std::string val_key, section = "validation";
  for (const char* sec : {"validation", "model_metrics"}) {
    section = sec;
    for (const auto& r : results) {
      if (!r.ok || !r.summary.contains(section) || !r.summary[section].is_object() || r.summary[section].empty()) continue;
      const json& val = r.summary[section];
      std::string loss;  // val_loss (or a plugin's renamed one); among model_metrics the first *loss
      for (auto it = val.begin(); it != val.end() && loss.empty(); ++it)
        if (section == "validation" ? it.key() == "val_loss" || renamed(it.key(), "val_loss")
                                    : it.key().size() >= 4 && it.key().compare(it.key().size() - 4, 4, "loss") == 0)
          loss = section == "validation" ? "val_loss" : it.key();
      if (!loss.empty()) {
        val_key = loss;
        break;
      }
      if (val_key.empty() && section == "validation") val_key = val.begin().key();  // a figure of another name
    }
    if (!val_key.empty()) break;
  }
  // The key of r's figure under val_key: its own, else the one a plugin renamed (empty: none).
  auto key_of = [&](const Result& r) -> std::string {
    if (val_key.empty() || !r.ok || !r.summary.contains(section) || !r.summary[section].is_object()) return "";
    const json& val = r.summary[section];
    if (val.contains(val_key) && val[val_key].is_number()) return val_key;
    for (auto it = val.begin(); it != val.end(); ++it)
      if (renamed(it.key(), val_key) && it->is_number()) return it.key();
    return "";
  };
  auto val_of = [&](const Result& r) -> const json* {
    const std::string k = key_of(r);
    return k.empty() ? nullptr : &r.summary[section][k];
  };
  // The whole process's peak RSS (set-up and the final writes too), where the row's is training's.
  auto process_rss = [](const Result& r) { return r.summary["memory"].value("process_peak_rss_bytes", int64_t{0}); };
  auto ratio = [](double x, double y) { return y > 0 ? fixed(x / y, 3) + "x" : std::string("-"); };
  auto quoted = [](std::string t) {
    for (size_t p = t.find('"'); p != std::string::npos; p = t.find('"', p + 2)) t.insert(p, 1, '"');
    return '"' + t + '"';
  };
  json doc = {{"pipeline", o.files.size() == 1 ? o.files[0] : std::string()},
              {"baseline", spec.baseline},
              {"steps", spec.existing ? json() : json(spec.steps)},
              {"warmup_steps", spec.warmup},
              {"repeats", spec.repeats},
              {"variants", json::array()}};
  if (!val_key.empty()) doc["validation_metric"] = val_key;
  // What the times were measured on. The machine's 1-minute load average (the host's, in a
  // container) after the runs holds the last variants' own threads: the rest is other processes'
  // work, which slows steps unevenly. -1: unknown.
  const double load_after = load_average();
  const bool load_known = load_before >= 0 && load_after >= 0;
  const int cores = usable_cores();
  int threads = 0;
  // What the variants differ in beyond their settings' intent: threads (a variant may set its own),
  // batch sizes (a loss summed over the batch scales with it), models and data (runs tabulated).
  std::map<std::string, std::vector<std::string>> by_threads, by_batch, by_model;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].ok) {
      const json& summary = results[i].summary;
      const int t = summary.value("threads", 0);
      threads = std::max(threads, t);
      by_threads[std::to_string(t)].push_back(spec.variants[i].name);
      if (summary.contains("batch_size")) by_batch[summary["batch_size"].dump()].push_back(spec.variants[i].name);
      if (summary.contains("model") && summary["model"].is_string())
        by_model[summary["model"].get<std::string>()].push_back(spec.variants[i].name);
    }
  // "256: a, b; 1024: c", leaving out the value `but` (the one the line names already)
  const auto groups = [](const std::map<std::string, std::vector<std::string>>& by, const std::string& but) {
    std::string text;
    for (const auto& [value, names] : by) {
      if (value == but) continue;
      std::string joined;
      for (const auto& n : names) joined += (joined.empty() ? "" : ", ") + n;
      text += (text.empty() ? "" : "; ") + value + ": " + joined;
    }
    return text;
  };
  const auto differ_lines = [&](bool models) {  // models: runs tabulated, not variants of one pipeline
    if (by_batch.size() > 1)
      std::printf("  ! batch sizes differ (%s): a loss summed over the batch, as the topic model's, scales with it\n",
                  groups(by_batch, "").c_str());
    if (models && by_model.size() > 1)
      std::printf("  ! the runs are of different models or data (%s): their ratios set unlike things side by side\n",
                  groups(by_model, "").c_str());
  };
  const double others = others_load(load_before, load_after, threads);
  // Runs tabulated as they are: what their summaries say they ran on (the load then is unknown).
  std::string cpu = cpu_model();
  std::set<std::string> run_cpus;
  if (spec.existing) {
    for (const auto& r : results) {  // a summary from before tt recorded the machine says nothing of it
      const auto m = r.summary.find("machine");
      if (r.ok)
        run_cpus.insert(m != r.summary.end() && m->is_object() && m->contains("cpu") && (*m)["cpu"].is_string()
                            ? (*m)["cpu"].get<std::string>()
                            : std::string("an unrecorded CPU"));
    }
    cpu.clear();
    for (const auto& c : run_cpus) cpu += (cpu.empty() ? "" : " and ") + c;
    if (cpu.empty()) cpu = "(no run has figures)";
    doc["runs"] = o.files;
  }
  doc["machine"] = {{"cpu", cpu},
                    {"cores", cores},
                    {"libtorch", TT_TORCH_VERSION_STRING},
                    {"threads", threads},
                    {"load_average_before", load_known ? json(load_before) : json()},
                    {"load_average_after", load_known ? json(load_after) : json()}};
  std::ofstream csv(out / "compare.csv");
  csv << "variant,status,peak_tensor_bytes,peak_vs_baseline,process_peak_tensor_bytes,peak_rss_bytes,process_peak_rss_bytes,"
         "parameters_bytes,gradients_bytes,"
         "optimizer_state_bytes,activations_bytes,rest_bytes,median_step_ms,step_vs_baseline,samples_per_s,final_loss,"
      << (val_key.empty() ? "" : val_key + ",validation_metric,") << "plugins,reason\n";
  int w = 8;
  for (const auto& v : spec.variants) w = std::max(w, static_cast<int>(v.name.size()));
  // rest: the peak less parameters, gradients, optimizer state, activations, a teacher and what
  // plugins report holding in tensors; what a plugin holds of its own unreported (EMA weights,
  // buffers) and the step's batch (the next one, prefetched, counts once the step takes it)
  std::printf("\n%-*s %-14s %11s %8s %9s %9s %9s %9s %11s %9s %9s %8s %10s %9s", w, "variant", "status", "peak MiB",
              "vs base", "RSS MiB", "params", "grads", "optim", "activations", "rest", "step ms", "vs base",
              "samples/s", "loss");
  if (!val_key.empty()) std::printf(" %*s", std::max(10, static_cast<int>(val_key.size())), val_key.c_str());
  std::printf("\n");
  std::vector<std::string> footnotes, peak_notes, held_notes;
  bool peak_marked = false;  // a row's peak is the one since an out-of-memory retry: marked '+'
  for (const auto& r : results) peak_marked = peak_marked || (r.ok && r.peak_since_retry_shown());
  bool marked = false;  // a row shows a plugin's metric: the others leave room for the mark
  for (size_t i = 0; i < n; ++i) marked = marked || (!key_of(results[i]).empty() && key_of(results[i]) != val_key);
  for (size_t i = 0; i < n; ++i) {
    const Result& r = results[i];
    const auto& v = spec.variants[i];
    std::string plugins;
    if (r.ok)
      for (const auto& pn : r.summary["plugins"]) plugins += (plugins.empty() ? "" : " ") + pn.get<std::string>();
    json j = {{"name", v.name}, {"status", r.status}, {"ok", r.ok}};
    if (!r.ok) {
      j["reason"] = r.reason;
      std::printf("%-*s %-14s %s\n", w, v.name.c_str(), r.status.c_str(), first_line(r.reason).c_str());
      csv << v.name << ',' << quoted(r.status) << ",,,,,,,,,,,,,,," << (val_key.empty() ? "" : ",,") << ','
          << quoted(first_line(r.reason)) << '\n';
    } else {
      const bool with_base = b.ok;
      const int64_t rest = r.rest;
      if (r.teacher > 0)
        held_notes.push_back(v.name + ": a teacher of " + format_mib(r.teacher) + " MiB (a frozen second model) is "
                                "part of the peak, not of its rest");
      for (const auto& h : r.summary["memory"].value("held", json::array()))  // tt::report_held
        held_notes.push_back(v.name + ": " + h.value("plugin", std::string()) + " holds " +
                                h.value("what", std::string()) + " of " + format_mib(h.value("bytes", int64_t{0})) +
                                " MiB " + held_place(h.value("where", std::string())));
      std::string peak_cell = format_mib(r.peak);
      if (r.peak_since_retry_shown()) {
        peak_cell += "+";
        peak_notes.push_back(v.name + ": peak since its out-of-memory retry, at micro-batch " +
                             r.summary.value("micro_batch_size", json()).dump() + "; the process's peak, the attempt "
                             "that ran out included, was " + format_mib(r.process_peak) + " MiB");
      } else if (peak_marked) {
        peak_cell += " ";
      }
      std::printf("%-*s %-14s %11s %8s %9s %9s %9s %9s %11s %9s %9.1f %8s %10.2f %9.4f", w, v.name.c_str(), "ok",
                  peak_cell.c_str(), with_base ? ratio(r.peak, b.peak).c_str() : "-", format_mib(r.rss).c_str(),
                  format_mib(r.params).c_str(), format_mib(r.grads).c_str(), format_mib(r.optimizer).c_str(), format_mib(r.activations).c_str(),
                  format_mib(rest).c_str(), r.step_ms, with_base ? ratio(r.step_ms, b.step_ms).c_str() : "-", r.samples_per_s,
                  r.loss);
      const json* val = val_of(r);
      const std::string used = key_of(r);
      if (!val_key.empty()) {
        std::string cell = val ? fixed(val->get<double>(), 4) : "-";
        if (marked && !(val && used != val_key)) cell += " ";
        if (val && used != val_key) {
          cell += "*";
          footnotes.push_back(v.name + ": " + used + ", the validation of the weights its plugin evaluates in place of the trained ones");
        }
        std::printf(" %*s", std::max(10, static_cast<int>(val_key.size())), cell.c_str());
      }
      std::printf("\n");
      if (!used.empty()) j["validation_metric"] = used;
      j.update({{"peak_tensor_bytes", r.peak},
                {"process_peak_tensor_bytes", r.process_peak},
                {"peak_since_oom_retry", r.peak_since_retry_shown()},
                {"peak_rss_bytes", r.rss},
                {"process_peak_rss_bytes", process_rss(r)},
                {"parameters_bytes", r.params},
                {"gradients_bytes", r.grads},
                {"optimizer_state_bytes", r.optimizer},
                {"activations_bytes", r.activations},
                {"rest_bytes", rest},
                {"teacher_bytes", r.teacher},
                {"held", r.summary["memory"].value("held", json::array())},
                {"median_step_ms", r.step_ms},
                {"timed_steps", r.step_times_ms.size()},
                {"step_ms_per_run", r.per_run(&child::Measured::step_ms)},
                {"peak_rss_bytes_per_run", r.per_run(&child::Measured::rss)},
                {"samples_per_s", r.samples_per_s},
                {"final_loss", r.loss},
                {"plugins", r.summary["plugins"]},
                {"micro_batch_size", r.summary["micro_batch_size"]}});
      if (r.summary.contains("validation")) j["validation"] = r.summary["validation"];
      if (with_base) {
        j["peak_vs_baseline"] = static_cast<double>(r.peak) / static_cast<double>(b.peak);
        j["step_vs_baseline"] = r.step_ms / b.step_ms;
      }
      csv << v.name << ",ok," << r.peak << ',' << (with_base ? fixed(double(r.peak) / b.peak, 4) : "") << ','
          << r.process_peak << ',' << r.rss << ',' << process_rss(r)
          << ',' << r.params << ',' << r.grads << ',' << r.optimizer << ',' << r.activations << ',' << rest << ','
          << fixed(r.step_ms, 3) << ',' << (with_base ? fixed(r.step_ms / b.step_ms, 4) : "") << ','
          << fixed(r.samples_per_s, 3) << ',' << fixed(r.loss, 6) << ',';
      if (!val_key.empty()) csv << (val ? fixed(val->get<double>(), 6) : "") << ',' << used << ',';
      csv << quoted(plugins) << ",\n";
    }
    doc["variants"].push_back(j);
  }
  for (const auto& f : peak_notes) std::printf("  + %s\n", f.c_str());
  for (const auto& f : held_notes) std::printf("  %s\n", f.c_str());
  // A figure that moved by more than 10% between a variant's runs (repeats): its lowest and highest.
  auto spread = [](const auto& runs) -> std::optional<std::pair<double, double>> {
    if (runs.size() < 2) return std::nullopt;
    const auto [lo, hi] = std::minmax_element(runs.begin(), runs.end());
    if (!(*hi > *lo * 1.1)) return std::nullopt;
    return std::make_pair(static_cast<double>(*lo), static_cast<double>(*hi));
  };
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok) continue;
    const char* name = spec.variants[i].name.c_str();
    const size_t runs = results[i].runs.size();
    if (const auto rss = spread(results[i].per_run(&child::Measured::rss)))  // it depends on what other processes map
      std::printf("  ~ %s: peak RSS ranged %s..%s MiB over its %zu runs (pages of shared libraries that another "
                  "process maps too stay resident); the row is the median run's\n",
                  name, format_mib(rss->first).c_str(), format_mib(rss->second).c_str(), runs);
    if (const auto t = spread(results[i].per_run(&child::Measured::step_ms)))
      std::printf("  ~ %s: step time ranged %.1f..%.1f ms over its %zu runs; the row is the median\n", name, t->first,
                  t->second, runs);
  }
  for (const auto& f : footnotes) std::printf("  * %s\n", f.c_str());
  std::printf("  MiB of tensors (tt's allocator): peak, the most live at once, and its parts params..rest (rest: "
              "backward's working memory, e.g. the blocks checkpointing re-runs, and what plugins hold unreported); "
              "RSS: the training loop's peak resident set (the whole process's is process_peak_rss_bytes in "
              "compare.json); step ms: the median step after the warm-up; vs base: the ratio to %s\n", spec.baseline.c_str());
  const std::string validation =
      val_key.empty() ? ""
                      : fmt::format(" and {} the {}", val_key,
                                    section == "model_metrics" ? "model's figure at the end" : "end's evaluation");
  if (spec.existing) {
    std::printf("  loss: the last finite step's training loss%s, after each run's own steps; step ms leaves each "
                "run's first %d steps out (--warmup N) and is the median of its logged steps\n",
                validation.c_str(), spec.warmup);
    std::printf("  runs measured on %s%s\n", cpu.c_str(),
                run_cpus.size() > 1 ? ": their times are of different machines, not comparable as ratios" : "");
    differ_lines(true);
  } else {
    std::printf("  loss: the last finite step's training loss%s, after %d steps (trainer.max_steps: a schedule runs "
                "compressed into them): a check that the variants train alike, not a measure of what a full run "
                "reaches\n",
                validation.c_str(), spec.warmup + spec.steps);
    differ_lines(false);
    // "2 threads per variant", or where variants differ, "2 threads per variant (1: t1, one-thread)"
    std::string per_variant = std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") + " per variant";
    if (by_threads.size() > 1) per_variant += " (" + groups(by_threads, std::to_string(threads)) + ")";
    std::printf("  on %s (%d cores), LibTorch %s, %s; %s\n", cpu.c_str(), cores, TT_TORCH_VERSION_STRING,
                per_variant.c_str(),
                load_known ? fmt::format("the machine's load average {:.2f} before, {:.2f} after", load_before,
                                         load_after).c_str()
                           : "the machine's load average unknown");
    // A step waits for its slowest thread: with other processes on the cores, more than one thread
    // per run makes the times uneven (a run on 2 busy cores of 2 took 15-70x a 1-thread run's steps).
    std::fputs(load_warning(others, "this comparison's",
                            threads > 1 ? "compare again on an idle machine, or with trainer.threads=1 (a step waits "
                                          "for its slowest thread, and other processes hold threads up)"
                                        : "compare again on an idle machine (--repeats N runs the variants in turn)")
                   .c_str(),
               stdout);
  }
  std::ofstream(out / "compare.json") << tt::json_text(doc, 2) << "\n";
  pareto_plot(out, spec.variants, results);
}

// A repeated variant's row: the median run's step time, memory, loss and validation, and the
// throughput at that step time (not the last run's). With an even count it is the faster of the
// middle two, so that the row is one run's figures (their mean would be no run's).
void fold_runs(Result& r) {
  if (r.runs.empty()) return;
  std::vector<size_t> order(r.runs.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.runs[a].step_ms < r.runs[b].step_ms; });
  r.show(r.runs[order[(order.size() - 1) / 2]]);
  r.samples_per_s = child::samples_per_s(r.examples_per_step, r.step_ms);
}

// The results folder's name for variants named on the command line: <A>-vs-<B>-vs-<C>, then
// "-and-N-more".
std::string folder_name(const std::vector<Variant>& variants) {
  std::string name;
  for (size_t i = 0; i < variants.size() && i < 3; ++i) name += (i ? "-vs-" : "") + variants[i].name;
  if (variants.size() > 3) name += "-and-" + std::to_string(variants.size() - 3) + "-more";
  return name;
}

// tt-run --compare RUN_DIR RUN_DIR ...: the table of runs that exist, from their summary.json
// and metrics.jsonl, as a comparison's variants are tabulated; nothing runs. Each row is a run as
// it ran (its own steps, batch, plugins), the first the baseline.
int tabulate(const Options& o) {
  TT_CHECK_AS(ConfigError, o.files.size() >= 2, "--compare: ", o.files[0], " is a run directory: name two or more "
              "run directories to tabulate them, or pipelines to compare");
  TT_CHECK_AS(ConfigError, o.overrides.empty() && o.steps < 0 && o.repeats < 0 && !o.dry_run,
              "--compare with run directories tabulates what they measured and runs nothing: overrides, --steps, "
              "--repeats and --dry-run are for pipelines (--warmup N sets the steps left out of the step time)");
  Spec spec;
  spec.existing = true;
  spec.warmup = o.warmup >= 0 ? o.warmup : spec.warmup;
  std::vector<Result> results;
  std::set<std::string> seen;
  for (const auto& f : o.files) {
    const fs::path dir = fs::path(f).lexically_normal();
    TT_CHECK_AS(ConfigError, fs::is_directory(dir), "--compare: ", f, fs::exists(f) ? " is not a directory" : ": no such "
                "directory", ": name run directories only (their table), or pipeline files only (a comparison)");
    TT_CHECK_AS(ConfigError, fs::is_regular_file(dir / "summary.json"), "--compare: ", f, " has no summary.json: not a "
                "tt run directory, or a run that ended before writing it");
    Variant v;
    v.file = v.at = f;
    v.name = (dir.filename().empty() ? dir.parent_path() : dir).filename().string();
    TT_CHECK_AS(ConfigError, seen.insert(v.name).second, "--compare: two runs are named '", v.name, "' (", f,
                "): rows are named by directory name; copy or link one under another name");
    spec.variants.push_back(v);
    Result r;
    // A variant of a repeated comparison (its folder beside compare.json): its repeats are the
    // folders NAME-r2, NAME-r3, ... beside it, and its row their median, as the comparison's was.
    const fs::path variant = dir.filename().empty() ? dir.parent_path() : dir;
    std::vector<fs::path> repeats = {dir};
    const auto repeat = [&](int k) { return variant.parent_path() / (v.name + "-r" + std::to_string(k)); };
    if (fs::is_regular_file(variant.parent_path() / "compare.json"))
      for (int k = 2; fs::is_regular_file(repeat(k) / "summary.json"); ++k) repeats.push_back(repeat(k));
    try {
      for (const auto& run : repeats) {
        const child::Measured measured = child::collect(run, spec.warmup);
        r.runs.push_back(measured);
        r.show(measured);
        r.ok = !measured.step_times_ms.empty();
        if (!r.ok) break;
      }
      if (r.ok) fold_runs(r);
      if (r.ok && repeats.size() > 1)
        std::printf("%s: the median of %zu runs of a repeated comparison (%s and its -r2..-r%zu beside it), as "
                    "the comparison's row was\n",
                    v.name.c_str(), repeats.size(), f.c_str(), repeats.size());
      r.status = r.ok ? "ok" : "no timed step";
      if (!r.ok)
        r.reason = "it logged no step after its first " + std::to_string(spec.warmup) +
                   " (metrics.jsonl; --warmup N leaves fewer out)";
    } catch (const std::exception& e) {  // a summary of a run that failed has no memory figures
      r.status = "unreadable";
      r.reason = "no figures: a run that failed before training writes none (" + (dir / "summary.json").string() +
                 ": " + first_line(e.what()) + ")";
    }
    results.push_back(std::move(r));
  }
  const std::string name = folder_name(spec.variants);
  spec.baseline = spec.variants.front().name;
  const fs::path first = fs::path(o.files[0]).lexically_normal();
  const fs::path out = !o.out_dir.empty() ? fs::path(o.out_dir)
                                          : timestamped_dir((first.filename().empty() ? first.parent_path() : first)
                                                                .parent_path().string(), name + "-compare");
  fs::create_directories(out);
  write_report(out, o, spec, results, 0, -1);
  std::printf("\n%s: compare.csv, compare.json%s\n", out.c_str(),
              fs::exists(out / "compare.png") ? ", compare.png (Pareto plot)" : "");
  std::fflush(stdout);
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string status = results[i].ok ? results[i].summary.value("status", std::string("completed")) : "";
    if (!status.empty() && status != "completed")
      std::fprintf(stderr, "tt-run: note: %s's status is %s: its figures are of the steps it took\n",
                   spec.variants[i].name.c_str(), status.c_str());
  }
  const auto failed = std::count_if(results.begin(), results.end(), [](const Result& r) { return !r.ok; });
  if (failed > 0)
    std::fprintf(stderr, "tt-run: %td of %zu runs have no figures; their rows say why (exit %d)\n", failed,
                 results.size(), kSomeVariantsFailed);
  return failed > 0 ? kSomeVariantsFailed : 0;
}

}  // namespace

int run(const Options& o) {
  TT_CHECK_AS(ConfigError, !o.files.empty(), "compare: name a pipeline with a compare: section, or two or more pipelines");
  // compare.* overrides (compare.steps=10) change the comparison itself; the others each variant.
  std::vector<std::string> compare_overrides, overrides;
  for (const auto& ov : o.overrides) (ov.rfind("compare.", 0) == 0 ? compare_overrides : overrides).push_back(ov);
  if (std::any_of(o.files.begin(), o.files.end(), [](const std::string& f) { return fs::is_directory(f); }))
    return tabulate(o);
  Spec spec;
  std::string name;
  if (o.files.size() == 1) {
    YAML::Node root = child::load_yaml(o.files[0]);
    for (const auto& ov : compare_overrides) apply_override(root, ov);
    TT_CHECK_AS(ConfigError, root.IsMap() && root["compare"] && root["compare"].IsMap(), o.files[0],
                ": has no compare: section; add one (compare: {variants: {baseline: {}, checkpoint: {plugins: "
                "[checkpoint]}}}) or name two or more pipelines with --compare");
    spec = parse_section(root["compare"], o.files[0]);
    name = root["name"] && root["name"].IsScalar() ? root["name"].Scalar() : fs::path(o.files[0]).stem().string();
    TT_CHECK_AS(ConfigError, name.find('/') == std::string::npos, o.files[0], ": name '", name,
                "' is not a file name (it begins the comparison's folder name inside output.dir): leave out '/'");
  } else {
    std::set<std::string> seen;
    for (const auto& f : o.files) {
      TT_CHECK_AS(ConfigError, fs::is_regular_file(f), "--compare: ", f,
                  fs::exists(f) ? " is not a file" : ": no such file", " (each pipeline compared is a YAML file)");
      Variant v;
      v.file = v.at = f;
      v.name = fs::path(f).stem().string();
      TT_CHECK_AS(ConfigError, seen.insert(v.name).second, "compare: two pipelines are named '", v.name,
                  "' (", f, "): variants are named by file name; rename one");
      spec.variants.push_back(v);
    }
    // the results folder <A>-vs-<B>-compare-<time> (up to three names, then how many more)
    name = folder_name(spec.variants);
    TT_CHECK_AS(ConfigError, compare_overrides.empty(), "compare: '", compare_overrides.empty() ? "" : compare_overrides[0],
                "' changes a compare: section, and pipelines named on the command line have none; use --steps, "
                "--warmup or --repeats");
  }
  if (o.steps >= 0) spec.steps = o.steps;
  if (o.warmup >= 0) spec.warmup = o.warmup;
  if (o.repeats >= 0) spec.repeats = o.repeats;
  TT_CHECK_AS(ConfigError, spec.steps >= 1, "compare: steps must be at least 1");
  TT_CHECK_AS(ConfigError, spec.warmup >= 0, "compare: warmup_steps must be 0 or more");
  TT_CHECK_AS(ConfigError, spec.repeats >= 1, "compare: repeats must be at least 1");
  if (spec.baseline.empty()) spec.baseline = spec.variants.front().name;
  // Each variant runs warmup + steps steps whatever its trainer.max_steps: one set on the command
  // line changes nothing but whether an evaluation-only pipeline trains.
  for (const auto& ov : overrides)
    if (ov.rfind("trainer.max_steps=", 0) == 0 && ov != "trainer.max_steps=0")
      log().warn("compare: {} does not set how long the variants run: each runs {} warm-up + {} timed steps "
                 "(--warmup N and --steps N set them)", ov, spec.warmup, spec.steps);
  size_t base = spec.variants.size();
  for (size_t i = 0; i < spec.variants.size(); ++i)
    if (spec.variants[i].name == spec.baseline) base = i;
  TT_CHECK_AS(ConfigError, base < spec.variants.size(), "compare: baseline '", spec.baseline, "' is not a variant");

  // Where the comparison goes (a dry run's variant pipelines: a temporary folder).
  fs::path out = o.out_dir;
  std::optional<TempDir> dry_dir;
  if (o.dry_run) {
    dry_dir.emplace("tt-compare-check", "compare");
    out = dry_dir->path();
  } else if (out.empty()) {
    const Pipeline first = load_pipeline(spec.variants.front().file, overrides);
    out = timestamped_dir(first.output.get_string("dir"), name + "-compare");
  }
  fs::create_directories(out);

  // Each variant's pipeline, written out and validated before anything runs. A variant whose
  // pipeline is refused is reported in its row; the others still run.
  const size_t n = spec.variants.size();
  std::vector<fs::path> yamls;
  std::vector<Result> results(n);
  auto refuse = [](Result& r, const std::string& why) {
    r.status = "refused";
    r.reason = why;
  };
  for (size_t i = 0; i < n; ++i) {
    const Variant& v = spec.variants[i];
    const fs::path y = out / (v.name + ".yaml");
    yamls.push_back(y);
    try {
      YAML::Node root = child::load_yaml(v.file);
      TT_CHECK_AS(ConfigError, root.IsMap(), v.file, ": a pipeline is a YAML map");
      root.remove("compare");
      const std::string where = v.at + (o.files.size() == 1 ? ": compare.variants." + v.name : std::string());
      if (v.replaces_plugins) root["plugins"] = YAML::Clone(v.plugins);
      for (const auto& ov : overrides) apply_override(root, ov);
      for (const auto& [k, val] : v.set) set_dotted(root, k, val, where + ".set '" + k + "'");
      // an evaluation-only pipeline would be trained here, and its row show training's figures
      const YAML::Node steps = root["trainer"].IsMap() ? root["trainer"]["max_steps"] : YAML::Node();
      TT_CHECK_AS(ConfigError, !(steps.IsScalar() && steps.Scalar() == "0"), where, ": ", child::trains_no_steps(v.file),
                  " and a comparison times training steps; to compare fine-tuning it, give the override "
                  "trainer.max_steps=N (an evaluation's peak is its summary.json's evaluation_peak_tensor_bytes)");
      set_dotted(root, "trainer.max_steps", YAML::Node(spec.warmup + spec.steps), where);
      if (root["trainer"]["epochs"]) root["trainer"].remove("epochs");
      set_dotted(root, "trainer.progress", YAML::Node("off"), where);
      set_dotted(root, "trainer.log_every", YAML::Node(1), where);  // every step's time, for the median
      set_dotted(root, "trainer.checkpoint_minutes", YAML::Node(0), where);  // no write inside the timed steps
      set_dotted(root, "output.plots", YAML::Node(false), where);
      std::ofstream(y) << "# variant '" << v.name << "' of a tt-run comparison, from " << v.file << "\n"
                       << YAML::Dump(root) << "\n";
      // A refusal is said of the user's file: the pipeline's own error where it has one (its line
      // numbers), else the variant named (the written-out pipeline's lines are its own).
      auto said_of_the_variant = [&](const Error& e) {
        load_pipeline(v.file, overrides);
        std::string what = e.what(), at = y.string();
        if (what.rfind(at + ":", 0) == 0) {  // "Y:LINE:COL: message"
          const size_t colon = what.find(": ", at.size());
          if (colon != std::string::npos) {
            at = what.substr(0, colon);
            what = what.substr(colon + 2);
          }
        }
        return where + ": " + what + (o.dry_run ? "" : " (at " + at + ", the variant's pipeline)");
      };
      try {
        load_pipeline(y.string());
      } catch (const ConfigError& e) {
        refuse(results[i], said_of_the_variant(e));
      } catch (const ModuleError& e) {  // a plugin that does not load
        refuse(results[i], said_of_the_variant(e));
      }
    } catch (const ConfigError& e) {
      refuse(results[i], e.what());
    } catch (const ModuleError& e) {
      refuse(results[i], e.what());
    }
  }
  if (o.dry_run) {
    size_t refused = 0;
    for (size_t i = 0; i < n; ++i) {
      if (results[i].status == "refused") ++refused;
      std::fprintf(stderr, "compare: variant '%s': %s\n", spec.variants[i].name.c_str(),
                   results[i].status == "refused" ? ("refused: " + results[i].reason).c_str() : "valid");
    }
    std::fprintf(stderr, "compare: %zu of %zu variants valid (%d steps each after %d warm-up steps, %d run%s each)\n",
                 n - refused, n, spec.steps, spec.warmup, spec.repeats, spec.repeats > 1 ? "s" : "");
    return refused == 0 ? 0 : 2;
  }
  if (std::all_of(results.begin(), results.end(), [](const Result& r) { return r.status == "refused"; })) {
    std::string msg = "compare: no variant can run:";
    for (size_t i = 0; i < n; ++i)
      msg += "\n  variant '" + spec.variants[i].name + "': " + results[i].reason;
    throw ConfigError(msg);
  }

  const double load_before = load_average();  // other processes' work: nothing of ours runs yet
  if (!o.quiet)
    std::printf("comparing %zu variants, %d steps each after %d warm-up steps, %d run%s each, in %s\n", n, spec.steps,
                spec.warmup, spec.repeats, spec.repeats > 1 ? "s" : "", out.c_str());
  // With repeats, the variants run round-robin (every variant once, then again): a slow spell of
  // a shared machine then falls on all of them alike instead of on one variant's runs.
  bool interrupted = false;
  for (int k = 0; k < spec.repeats && !interrupted; ++k) {
    for (size_t i = 0; i < n && !interrupted; ++i) {
      Result& r = results[i];
      if (k > 0 && !r.ok) continue;  // failed in an earlier round: reported once
      if (r.status == "refused") {
        if (!o.quiet) std::printf("[%zu/%zu] %s ... refused: %s\n", i + 1, n, spec.variants[i].name.c_str(),
                                  first_line(r.reason).c_str());
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      const fs::path dir = out / (k == 0 ? spec.variants[i].name : spec.variants[i].name + "-r" + std::to_string(k + 1));
      if (interrupt_requested()) {  // between two variants
        if (!o.quiet) std::printf("interrupted before %s\n", spec.variants[i].name.c_str());
        interrupted = true;
        break;
      }
      fs::remove_all(dir);
      if (!o.quiet) {
        std::printf("[%zu/%zu] %s%s ... ", i + 1, n, spec.variants[i].name.c_str(),
                    spec.repeats > 1 ? (" (run " + std::to_string(k + 1) + " of " + std::to_string(spec.repeats) + ")").c_str() : "");
        std::fflush(stdout);
      }
      const fs::path log_file = out / (spec.variants[i].name + (k == 0 ? "" : "-r" + std::to_string(k + 1)) + ".log");
      r.status = child::status_of(child::run(o.tt_run, yamls[i], dir, log_file));
      if (r.status == "interrupted") {
        if (!o.quiet) std::printf("interrupted\n");
        interrupted = true;
        if (!r.runs.empty()) {  // measured in an earlier round: those runs stand
          r.status = "ok";
          break;
        }
        r.reason = "the comparison was interrupted while this variant ran";
        break;
      }
      if (r.status != "ok") {
        r.ok = false;
        r.reason = child::last_error_line(log_file);
        if (!o.quiet) std::printf("%s: %s\n", r.status.c_str(), r.reason.c_str());
        continue;
      }
      try {
        const child::Measured measured = child::collect(dir, spec.warmup);
        r.runs.push_back(measured);  // as measured: `peak` the process's
        r.show(measured);
        r.ok = true;
        fs::remove_all(dir / "checkpoints");  // measurements only: the weights are not kept
        mark_weights_not_kept(dir, measured.summary);
      } catch (const std::exception& e) {
        r.ok = false;
        r.status = "error (no summary)";
        r.reason = e.what();
        continue;
      }
      if (!o.quiet)
        std::printf("%.1f ms/step, peak %s MiB (%.0f s)\n", r.step_ms, format_mib(r.peak).c_str(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  for (auto& r : results) {
    if (r.ok) fold_runs(r);
    if (interrupted && r.status == "not run") r.reason = "the comparison was interrupted before this variant";
  }

  write_report(out, o, spec, results, base, load_before);
  std::printf("\n%s: compare.csv, compare.json%s, one folder and log per variant\n", out.c_str(),
              fs::exists(out / "compare.png") ? ", compare.png (Pareto plot)" : "");
  std::fflush(stdout);  // the table before what follows on stderr, also when both go to one pipe
  if (interrupted) {
    std::fprintf(stderr, "tt-run: the comparison was interrupted; the table holds the variants that finished (a "
                 "comparison is not resumed: run it again to measure them all)\n");
    return 130;
  }
  std::string failed;
  size_t n_failed = 0;
  for (size_t i = 0; i < n; ++i)
    if (!results[i].ok) {
      failed += (failed.empty() ? "" : ", ") + spec.variants[i].name + " (" + results[i].status + ")";
      ++n_failed;
    }
  if (!results[base].ok)
    std::fprintf(stderr, "tt-run: the baseline variant '%s' did not run (%s): no ratios\n", spec.baseline.c_str(),
                 results[base].status.c_str());
  if (n_failed > 0) {
    std::fprintf(stderr, "tt-run: %zu of %zu variants did not run: %s; their rows say why (exit %d)\n", n_failed, n,
                 failed.c_str(), kSomeVariantsFailed);
    return kSomeVariantsFailed;
  }
  return 0;
}

}  // namespace tt::compare
