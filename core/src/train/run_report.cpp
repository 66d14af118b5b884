// RunReport: summary.json, the loss plot and the printed summary.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>

#include "train/callbacks.h"
#include "train/run_dir.h"
#include "tt/checkpoint.h"
#include "tt/compat.h"
#include "tt/extension.h"
#include "tt/json_text.h"
#include "tt/log.h"
#include "tt/registry.h"
#include "tt/report.h"
#include "tt/runtime.h"

namespace fs = std::filesystem;

namespace tt {

using json = nlohmann::json;

namespace {
int64_t count_elements(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}
double seconds_between(const timeval& a, const timeval& b) {
  return static_cast<double>(b.tv_sec - a.tv_sec) + 1e-6 * static_cast<double>(b.tv_usec - a.tv_usec);
}
// The first step (epoch) of a run holds its warm-up (the allocator's first requests, the
// kernels' first calls, a resume's page-ins): left out of the median where there are others
// (compare leaves out its own warmup_steps, from each variant's metrics.jsonl).
double median_after_warm_up(const std::vector<double>& times) {
  return median(std::vector<double>(times.begin() + (times.size() > 1 ? 1 : 0), times.end()));
}
}  // namespace

void RunReport::on(Event event, State&) {
  if (event != Event::FIT_END || !run_.root) return;
  const std::string log_error = run_.log_file_error();
  if (!log_error.empty()) TT_FAIL_AS(WriteError, log_error);
  summary_ = build();
  summary_["status"] = "completed";
  write_plots();
  const fs::path dir = run_.state.run_dir;
  // The files this run wrote: a file left in the directory before it started (a user's notes,
  // an earlier run's predictions.csv) is not one of its outputs. A second of slack: the file
  // system stamps with a coarser clock.
  std::vector<std::string> files{"summary.json"};
  const auto since = run_.record.started_on_disk - std::chrono::seconds(1);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "summary.json" &&
        e.path().filename().string()[0] != '.' &&  // .tt-lock
        e.last_write_time(ec) >= since && !ec)
      files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  const auto ckpts = list_checkpoints(dir / "checkpoints");
  if (!ckpts.empty()) files.push_back("checkpoints/" + ckpts.back().filename().string());
  summary_["outputs"] = files;
  write_file_atomic(dir / "summary.json", json_text(summary_, 2) + "\n");
  if (!run_.config.quiet) print();
}

void RunReport::write_failure(const std::string& status, const std::string& error, int exit_code) noexcept {
  if (!run_.root || run_.state.run_dir.empty()) return;
  try {
    if (run_.log_file) {  // the console shows the error where tt-run reports it
      spdlog::logger file_only("tt", run_.log_file);
      file_only.log(status == "interrupted" ? spdlog::level::warn : spdlog::level::err, "{}", error);  // a stop asked for
      file_only.flush();
    }
    // A resume that ends before a step of its own (refused overrides, no readable checkpoint,
    // Ctrl-C in setup, a failure in its first step) changed nothing: the run's summary stays as
    // it was. (One that was writing the outputs of a run trained to its end reports.)
    if (run_.config.resume && run_.state.step == run_.start_step && !outputs_only_) return;
    summary_ = build();
    summary_["status"] = status;
    summary_["error"] = error;
    summary_["exit_code"] = exit_code;
    write_file_atomic(run_.state.run_dir / "summary.json", json_text(summary_, 2) + "\n");
  } catch (...) {  // reporting a failure must not hide it
  }
}

void RunReport::add_to_summary(const std::string& key, const json& value) {
  if (!run_.root || summary_.is_null()) return;
  summary_[key] = value;
  write_file_atomic(run_.state.run_dir / "summary.json", json_text(summary_, 2) + "\n");
}

void RunReport::finish_only(const json& previous_summary) {
  outputs_only_ = true;
  previous_ = previous_summary.is_object() ? previous_summary : json();
}

json RunReport::build() const {
  const State& s = run_.state;
  const RunRecord& rec = run_.record;
  const MemoryBreakdown& mem = s.memory;
  const int64_t steps_here = s.step - run_.start_step;
  // A run that ends inside the training loop (interrupted, failed) reports its figures so far.
  const bool in_loop = rec.train_started != Clock::time_point{} && rec.train_seconds == 0;
  const double train_seconds = in_loop ? seconds_since(rec.train_started) : rec.train_seconds;
  json sum = {
      {"name", run_.pipeline.name},
      {"pipeline", run_.pipeline.file},
      {"run_dir", s.run_dir.string()},
      {"model", s.model ? s.model->describe() : std::string()},
      {"plugins", json::array()},
      {"steps", s.step},
      {"steps_this_run", steps_here},
      {"skipped_steps", s.skipped_steps},
      {"epochs_completed", s.epoch},
      {"batch_size", s.batch_size},
      {"micro_batch_size", s.micro_batch_size},
      {"parameters", s.model ? count_elements(s.model->parameters()) : 0},
      {"trainable_parameters", count_elements(run_.trainable)},
      {"threads", run_.threads},
      {"machine",
       {{"cpu", cpu_model()},
        {"cores", usable_cores()},
        {"libtorch", TT_TORCH_VERSION_STRING},
        {"tt", tt_version()},
        {"load_average_before", rec.load_before >= 0 ? json(rec.load_before) : json()},
        {"load_average_after", [] {
           const double load = load_average();
           return load >= 0 ? json(load) : json();
         }()}}},
      {"wall_seconds", seconds_since(rec.started)},
      {"started_at", iso_time(static_cast<std::time_t>(std::floor(rec.started_unix)))},
      {"ended_at", iso_time(static_cast<std::time_t>(std::floor(unix_seconds())))},
      {"setup_seconds", rec.setup_seconds},
      {"train_seconds", train_seconds},
      {"median_step_seconds", median_after_warm_up(rec.step_times)},
      {"median_optimizer_seconds", median_after_warm_up(rec.optimizer_times)},
      {"world_size", s.world_size},
      {"global_batch_size", s.batch_size * s.world_size},  // batch_size is each rank's
      {"steps_per_second", train_seconds > 0 ? steps_here / train_seconds : 0.0},
      {"memory",
       {{"peak_tensor_bytes", in_loop ? run_.peak() : mem.peak_tensor},
        {"peak_rss_bytes", in_loop ? run_.rss_peak() : mem.peak_rss},
        {"peak_reserved_bytes", mem.peak_reserved},
        {"peak_prefetch_bytes", run_.meter.background_peak()},
        {"rss_anon_start_bytes", mem.rss_anon_start},
        {"library_pages_released_bytes", rec.library_pages_released},
        {"rss_anon_end_bytes", mem.rss_anon_end},
        {"parameters_bytes", mem.parameters},
        {"gradients_bytes", mem.gradients},
        {"optimizer_state_bytes", mem.optimizer_state},
        {"activations_bytes", mem.activations},
        {"allocation_cache", run_.meter.caching()},
        {"measured_on", s.device.is_cuda() ? "cuda caching allocator" : "cpu tracking allocator"}}},
      {"outputs", json::array()},
  };
  // The last step's loss that is finite: none without a step (max_steps: 0) or where every step
  // was dropped for a loss that is not (on_nan: skip; dropped_batches says how many were).
  const auto last_finite = std::find_if(rec.step_losses.rbegin(), rec.step_losses.rend(),
                                        [](double l) { return std::isfinite(l); });
  if (last_finite != rec.step_losses.rend()) sum["final_loss"] = *last_finite;
  if (rec.dropped_batches > 0) sum["dropped_batches"] = rec.dropped_batches;
  if (!run_.command.empty()) sum["command"] = run_.command;
  // The whole process's high-water mark (set-up, evaluation, checkpoint writes included), beside
  // the training loop's peak_rss_bytes: what a container or a cgroup must allow. Not getrusage's
  // ru_maxrss: the resets that start the loop's and evaluation's own peaks clear that too.
  sum["memory"]["process_peak_rss_bytes"] = Meter::process_rss_peak();
  if (outputs_only_) {  // the training's figures are the stopped run's, where it wrote them; else not measured
    sum["outputs_only"] = true;
    for (const char* k : {"memory", "train_seconds", "final_loss", "median_step_seconds", "median_optimizer_seconds",
                          "steps_per_second"})
      if (previous_.contains(k)) sum[k] = previous_[k];
    if (!previous_.contains("final_loss"))
      for (const char* k : {"final_loss", "median_step_seconds", "median_optimizer_seconds", "steps_per_second"}) sum.erase(k);
  }
  if (run_.eval_peaks.tensor >= 0) {  // measured apart: the figures above are training's
    sum["memory"]["evaluation_peak_tensor_bytes"] = run_.eval_peaks.tensor;
    sum["memory"]["evaluation_peak_rss_bytes"] = run_.eval_peaks.rss;
  }
  for (const auto& pl : run_.host.plugins()) sum["plugins"].push_back(pl->name());
  if (s.model && s.optimizer) sum["memory_estimate"] = memory_estimate();
  sum["process"] = {{"user_cpu_seconds", seconds_between(rec.usage_start.ru_utime, rec.usage_end.ru_utime)},
                    {"system_cpu_seconds", seconds_between(rec.usage_start.ru_stime, rec.usage_end.ru_stime)},
                    {"minor_page_faults", rec.usage_end.ru_minflt - rec.usage_start.ru_minflt},
                    {"major_page_faults", rec.usage_end.ru_majflt - rec.usage_start.ru_majflt}};
  if (!rec.epoch_times.empty()) sum["median_epoch_seconds"] = median_after_warm_up(rec.epoch_times);
  if (!rec.epoch_losses.empty()) {
    // Each epoch ended pushes one loss, up to the last one (s.epoch): a resumed run's list starts
    // at epoch 1 unless its checkpoint predates the saved list, then at the first epoch ended here.
    sum["first_epoch"] = s.epoch - static_cast<int64_t>(rec.epoch_losses.size()) + 1;
    sum["first_epoch_loss"] = rec.epoch_losses.front();
    sum["final_epoch_loss"] = rec.epoch_losses.back();
  }
  if (!rec.validation.empty()) sum["validation"] = rec.validation;
  if (!run_.host.stopped_by().empty()) sum["stopped_early_by"] = run_.host.stopped_by();  // state.stop, before the limit
  if (run_.dist) {
    sum["median_comm_seconds"] = median_after_warm_up(rec.comm_times);
    sum["replica_parameter_hashes"] = rec.replica_hashes;
    // What the launch was (rank 0's lines of it begin log.txt too; local_world_size null where
    // LOCAL_WORLD_SIZE is unset); the memory figures, times and threads above are this rank's (0:
    // the one that writes the run directory).
    const dist::Env& e = run_.dist->env();
    sum["distributed"] = {{"rank", e.rank},
                          {"master", e.master_addr + ":" + std::to_string(e.master_port)},
                          {"local_world_size", e.local_world_size > 0 ? json(e.local_world_size) : json(nullptr)},
                          {"backend", run_.dist->has_nccl() ? "gloo (CPU tensors), nccl (CUDA tensors)" : "gloo"}};
  }
  if (!rec.model_metrics.empty()) sum["model_metrics"] = rec.model_metrics;
  if (run_.resumed) sum["resumed_from"] = run_.resumed_from;
  if (run_.memory_cap > 0) sum["memory"]["cap_bytes"] = run_.memory_cap;  // the training steps' (lifted by now)
  if (mem.teacher > 0) sum["memory"]["teacher_bytes"] = mem.teacher;
  if (!s.held.empty() && !outputs_only_) {  // what plugins report holding (tt::report_held)
    json held = json::array();
    for (const auto& h : s.held)
      held.push_back({{"plugin", h.plugin}, {"what", h.what}, {"bytes", h.bytes},
                      {"where", to_string(static_cast<Held>(h.where))}});
    sum["memory"]["held"] = held;
    sum["memory"]["held_bytes"] = mem.held;  // those in tensors, kept by report_held
  }
  {  // the rest of the figures summary.json holds (for outputs_only, the stopped run's own)
    json& M = sum["memory"];
    MemoryBreakdown shown;
    shown.parameters = M["parameters_bytes"].get<int64_t>();
    shown.gradients = M["gradients_bytes"].get<int64_t>();
    shown.optimizer_state = M["optimizer_state_bytes"].get<int64_t>();
    shown.activations = M["activations_bytes"].get<int64_t>();
    shown.teacher = M.value("teacher_bytes", int64_t{0});
    shown.held = M.value("held_bytes", int64_t{0});
    M["rest_bytes"] = shown.rest(M["peak_tensor_bytes"].get<int64_t>());
  }
  const auto ckpts = list_checkpoints(s.run_dir / "checkpoints");
  if (!ckpts.empty()) sum["checkpoint"] = ckpts.back().string();
  return sum;
}

// What the breakdown should be from the parameters, the optimizer's kind and the model's
// own activation estimate, before measuring: the measured figures are checked against it.
json RunReport::memory_estimate() const {
  const State& s = run_.state;
  int64_t trainable_bytes = 0;
  for (const auto& t : run_.trainable) trainable_bytes += static_cast<int64_t>(t.nbytes());
  json e = {{"parameters_bytes", s.memory.parameters}, {"gradients_bytes", trainable_bytes}};
  // What plugins change (checkpointing's activations, adam8bit's state, offload) is not in it.
  for (const auto& pl : run_.host.plugins()) e["plugins_not_counted"].push_back(pl->name());  // a null becomes a list
  // The pipeline's optimizer's estimate, unless a plugin assigned the run another (adam8bit's
  // 8-bit state, an optimizer of a plugin's own): then there is none.
  const auto& optimizer = Registry::global().optimizer(run_.pipeline.optimizer.name);
  if (optimizer.state_bytes && run_.host.optimizer_assigned_by().empty())
    e["optimizer_state_bytes"] = optimizer.state_bytes(run_.pipeline.optimizer.options, trainable_bytes);
  const int64_t act = s.model->estimate_activation_bytes(s.micro_batch_size);
  if (act >= 0) e["activations_bytes"] = act;
  return e;
}

void RunReport::write_plots() const {
  // steps with a loss (a dropped batch's is NaN); a resumed run's from its start, metrics.jsonl's
  const RunRecord& rec = run_.record;
  std::vector<LoggedLoss> losses = run_.start_step > 0
                                       ? logged_losses(run_.state.run_dir / "metrics.jsonl", run_.start_step)
                                       : std::vector<LoggedLoss>();
  for (size_t i = 0; i < rec.step_losses.size(); ++i)
    if (std::isfinite(rec.step_losses[i]))
      losses.push_back({run_.start_step + static_cast<int64_t>(i) + 1, rec.step_losses[i], rec.step_examples[i]});
  if (!run_.pipeline.output.get_bool("plots") || losses.empty()) return;
  // A loss summed over the batch's examples (the topic model's, as tinytopics') is drawn per
  // example: an epoch's smaller last batch would otherwise dip once an epoch.
  const bool per_example = rec.loss_summed && std::all_of(losses.begin(), losses.end(), [](const LoggedLoss& l) {
                             return l.examples > 0;
                           });
  const fs::path data_file = run_.state.run_dir / "loss.dat";
  {
    std::ostringstream out;
    for (const auto& l : losses) {
      out << l.step << ' ' << l.loss;
      if (per_example) out << ' ' << l.loss / static_cast<double>(l.examples);
      out << '\n';
    }
    write_file_atomic(data_file, out.str());
  }
  // The evaluations' val_loss as points over it (a loss of the same kind: not beside a summed one
  // drawn per example, nor drawn as it is); a resumed run's from its start, as the steps'.
  std::vector<std::pair<int64_t, double>> vals;
  if (!rec.loss_summed) {
    if (run_.start_step > 0) vals = logged_val_losses(run_.state.run_dir / "metrics.jsonl", run_.start_step);
    for (const auto& v : rec.val_losses)
      if (vals.empty() || v.first > vals.back().first) vals.push_back(v);
  }
  const fs::path val_file = run_.state.run_dir / "val_loss.dat";
  if (!vals.empty()) {
    std::ostringstream out;
    for (const auto& [step, v] : vals) out << step << ' ' << v << '\n';
    write_file_atomic(val_file, out.str());
  }
  const bool logy = std::all_of(losses.begin(), losses.end(), [](const LoggedLoss& l) { return l.loss > 0; }) &&
                    std::all_of(vals.begin(), vals.end(), [](const auto& v) { return v.second > 0; });
  plot_png(data_file, run_.state.run_dir / "loss.png",
           run_.pipeline.name + (per_example ? ": training loss per example (a batch's summed loss over its examples)"
                                 : vals.empty() ? ": training loss" : ": training and validation loss"),
           "step", per_example ? "loss / example" : "loss", per_example ? "1:3" : "1:2", logy,
           vals.empty() ? fs::path() : val_file, "training loss", "validation loss (val_loss)");
}

void RunReport::print() const {
  const State& s = run_.state;
  const json& m = summary_["memory"];
  std::string out;
  out += fmt::format("\n== {} finished in {:.1f} s  ({})\n", run_.pipeline.name, summary_["wall_seconds"].get<double>(),
                     s.run_dir.string());
  out += fmt::format("  model      {}\n", s.model->describe());
  out += fmt::format("  plugins    [{}]\n", run_.host.names());
  out += fmt::format("  steps      {} ({} batches of {} per epoch, {} epochs done)", s.step, s.batches_per_epoch,
                     s.world_size > 1 ? fmt::format("{} ({} per rank x {} ranks)", s.batch_size * s.world_size,
                                                    s.batch_size, s.world_size)
                                      : std::to_string(s.batch_size),
                     s.epoch);
  if (summary_.contains("steps_per_second")) {
    // three significant digits at least: a slow run's 0.083 steps/s is not '0.1'
    const double sps = summary_["steps_per_second"].get<double>();
    const int decimals = sps > 0 ? std::clamp(2 - static_cast<int>(std::floor(std::log10(sps))), 1, 6) : 1;
    // a resume's rate is of the steps it took, not the run's
    const std::string here = run_.start_step > 0 ? fmt::format("{} in this process at ", s.step - run_.start_step) : "";
    out += fmt::format(", {}{:.{}f} steps/s, median step {:.2f} ms", here, sps, decimals,
                       1e3 * summary_["median_step_seconds"].get<double>());
  }
  // Other processes' work slows the steps unevenly (two threads on two busy cores ran 25x slower
  // than one): said where it was more than half a core. One process's threads only, and a run of
  // 10 s at least (the 1-minute load average of a shorter one is of what ran before it).
  const json& machine = summary_["machine"];
  const std::string busy =
      outputs_only_ || s.world_size > 1 || summary_.value("train_seconds", 0.0) < 10 ||
              machine["load_average_before"].is_null() ||
              machine["load_average_after"].is_null()
          ? ""
          : load_warning(others_load(machine["load_average_before"].get<double>(),
                                     machine["load_average_after"].get<double>(), run_.threads),
                         "this run's",
                         run_.threads > 1 ? fmt::format("where other work keeps cores busy, fewer trainer.threads "
                                                        "(this run: {}) can be faster", run_.threads)
                                          : std::string("train again on an idle machine for times to compare"));
  if (summary_.contains("stopped_early_by"))
    out += fmt::format("; stopped early by plugin '{}'", summary_["stopped_early_by"].get<std::string>());
  out += outputs_only_ ? "; trained before, this run wrote the outputs\n" : "\n";
  out += busy;
  if (run_.record.epoch_losses.size() > 1)
    out += fmt::format("  loss       epoch {}: {:.6g}  ->  epoch {}: {:.6g}\n", summary_["first_epoch"].get<int64_t>(),
                       summary_["first_epoch_loss"].get<double>(), s.epoch, summary_["final_epoch_loss"].get<double>());
  else if (summary_.contains("final_loss"))
    out += fmt::format("  loss       last step: {:.6g}\n", summary_["final_loss"].get<double>());
  for (const char* section : {"validation", "model_metrics"})
    if (summary_.contains(section))
      for (const auto& [k, v] : summary_[section].items()) out += fmt::format("  {:<10} {:.6g}\n", k, v.get<double>());
  // The parts are each their own largest: gradients are freed before each forward and the
  // optimizer's state is made by the first step, so where the peak comes before they are all
  // live, the rest is negative (said, not hidden).
  const int64_t teacher = m.value("teacher_bytes", int64_t{0}), rest = m["rest_bytes"].get<int64_t>();
  const int64_t held = m.value("held_bytes", int64_t{0});
  out += fmt::format("  memory     {}peak tensors {} = params {} + grads {} + optimizer {} + activations {}{}{} + rest {}; "
                     "peak RSS {}{}\n",
                     s.world_size > 1 ? "rank 0's " : "", format_bytes(m["peak_tensor_bytes"]), format_bytes(m["parameters_bytes"]),
                     format_bytes(m["gradients_bytes"]), format_bytes(m["optimizer_state_bytes"]),
                     format_bytes(m["activations_bytes"]),
                     teacher > 0 ? " + teacher " + format_bytes(teacher) : std::string(),
                     held > 0 ? " + held by plugins " + format_bytes(held) : std::string(), format_bytes(rest),
                     format_bytes(m["peak_rss_bytes"]),
                     m.contains("process_peak_rss_bytes")
                         ? " (training; the process's " + format_bytes(m["process_peak_rss_bytes"]) + ")"
                         : std::string());

  if (rest < 0)
    out += "             (rest < 0: each part is its own largest, and they were not all live at the peak: gradients "
           "are freed before each forward, the optimizer's state is made by the first step)\n";
  if (m.contains("held"))
    for (const auto& h : m["held"])
      out += fmt::format("  held       {}: {} {} {}\n", h["plugin"].get<std::string>(), h["what"].get<std::string>(),
                         format_bytes(h["bytes"].get<int64_t>()), held_place(h["where"].get<std::string>()));
  if (m.contains("evaluation_peak_tensor_bytes"))
    out += fmt::format("  evaluation peak tensors {}; peak RSS {}\n", format_bytes(m["evaluation_peak_tensor_bytes"]),
                       format_bytes(m["evaluation_peak_rss_bytes"]));
  std::string outputs;
  for (const auto& o : summary_["outputs"]) outputs += (outputs.empty() ? "" : ", ") + o.get<std::string>();
  out += fmt::format("  outputs    {}\n", outputs);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace tt
