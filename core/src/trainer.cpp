// The training loop, in event order. What happens inside a step is train/step.cpp; setup,
// gradient sync, checkpoints and the run's outputs have their own files (train/), and the
// outputs are written by the built-in callbacks (train/callbacks.h) on the same events plugins
// get (tt/event.h).
#include "tt/json_text.h"
#include "tt/trainer.h"

#include <torch/torch.h>

#include <fstream>
#include <limits>
#include <optional>

#include "train/callbacks.h"
#include "train/checkpoints.h"
#include "train/grad_sync.h"
#include "train/run_dir.h"
#include "train/run.h"
#include "train/setup.h"
#include "train/step.h"
#include "tt/data_loader.h"
#include "tt/dist.h"
#include "tt/log.h"
#include "tt/runtime.h"
#include "tt/weights.h"

namespace fs = std::filesystem;

namespace tt {

struct Trainer::Impl {
  Run run;
  std::vector<std::unique_ptr<Plugin>> extra_plugins;  // add_plugin, before fit()
  ProgressDisplay* progress = nullptr;                  // the built-in callbacks, owned by run.host
  RunReport* report = nullptr;

  Impl(Pipeline p, TrainerConfig c) : run(std::move(p), std::move(c)) {}

  void add_callbacks() {
    run.host.add_callback(std::make_unique<MetricsLog>(run));
    auto progress_display = std::make_unique<ProgressDisplay>(run);
    progress = progress_display.get();
    run.host.add_callback(std::move(progress_display));
    run.host.add_callback(std::make_unique<CheckpointSaver>(run));
    auto run_report = std::make_unique<RunReport>(run);
    report = run_report.get();
    run.host.add_callback(std::move(run_report));
  }

  void fire(Event e) { run.host.fire(e, run.state); }

  // BEFORE_EVAL, the model's validation metrics (into state.metrics), EVAL, AFTER_EVAL (the
  // metrics line is written after it). Once per step: the final evaluation right after a
  // periodic one at the same step reuses it. A periodic one is skipped once an interrupt is
  // requested, and abandoned (AFTER_EVAL still fires) where the model's loop stops on one
  // (tt::stop_if_interrupted): the loop then writes its checkpoint.
  void evaluate(bool periodic = false) {
    State& s = run.state;
    if (!run.data.validation || run.last_eval_step == s.step) return;
    if (periodic && !run.dist && interrupted()) return;
    const Options& T = run.pipeline.trainer;
    const int64_t batch_size = T.is_set("eval_batch_size") ? T.get_int("eval_batch_size") : s.batch_size;
    run.flush_optimizer();
    fire(Event::BEFORE_EVAL);
    PhaseScope phase("evaluating");
    // In eval mode (dropout off) and without autograd, as a model's own evaluate() may not set
    // either; every module's mode (a part the model keeps in eval mode too) comes back after.
    bool abandoned = false;
    const Run::Peaks own = run.measure_apart([&] {
      const torch::NoGradGuard no_grad;
      const EvalMode eval_mode(*s.model);
      std::optional<AbandonableScope> abandonable;
      if (periodic && !run.dist) abandonable.emplace();  // ranks evaluate together: none abandons alone
      try {
        s.metrics = s.model->evaluate(*run.data.validation, batch_size);
      } catch (const Interrupted&) {
        if (!abandonable) throw;
        abandoned = true;
        s.metrics.clear();
      } catch (const c10::OutOfMemoryError& e) {
        const std::string what = e.what();
        TT_FAIL_AS(OutOfMemory, "out of memory in the evaluation after step ", s.step, " (evaluation batch ", batch_size,
                   "): ", first_line(what), ". Lower trainer.eval_batch_size.");
      }
    });
    if (run.memory_cap > 0 && own.tensor > run.memory_cap && run.eval_peaks.tensor <= run.memory_cap)
      log().warn("evaluation at step {} peaked at {} of tensors, above the training steps' memory cap of {}: it is "
                 "measured apart (evaluation_peak_tensor_bytes) and not capped, but a device of that size would run "
                 "out of memory; lower trainer.eval_batch_size (now {})",
                 s.step, format_bytes(own.tensor), format_bytes(run.memory_cap), batch_size);
    if (abandoned) {
      log().warn("the evaluation after step {} was abandoned: interrupted", s.step);
      fire(Event::AFTER_EVAL);  // what BEFORE_EVAL swapped in goes back before the checkpoint
      return;
    }
    run.eval_peaks = {std::max(run.eval_peaks.tensor, own.tensor), std::max(run.eval_peaks.rss, own.rss)};
    fire(Event::EVAL);
    fire(Event::AFTER_EVAL);
    run.record.add_validation(s.step, s.metrics);
    run.last_eval_step = s.step;
    std::string text;
    for (const auto& [k, v] : s.metrics) text += fmt::format(" {} {:.6g}", k, v);
    log().info("step {}:{}", s.step, text);
  }

  void checkpoint() {
    PhaseScope phase("writing a checkpoint");
    fire(Event::CHECKPOINT);  // the built-in CheckpointSaver writes it, after the plugins
    run.last_checkpoint_time = Clock::now();  // checkpoint_minutes counts from its end (written or not: on_nan)
  }

  bool interrupted() const { return run.sync ? run.sync->interrupted() : interrupt_requested(); }

  // The epochs and batches; returns when the step limit, the epoch limit or state.stop is reached.
  void train_loop() {
    State& s = run.state;
    const Options& T = run.pipeline.trainer;
    const int64_t eval_every = T.is_set("eval_every") ? T.get_int("eval_every") : 0;
    int64_t first_batch = run.next_batch;
    agree_on_stop();  // FIT_START's; and after each event below that may stop the fit
    for (s.epoch = run.next_epoch; !run.done(); ++s.epoch, first_batch = 0) {
      if (first_batch == 0) {
        run.epoch_loss_sum = 0;
        run.epoch_batches = 0;
        fire(Event::EPOCH_START);
        agree_on_stop();
      }
      run.record.epoch_started = Clock::now();
      for (int64_t b = first_batch; b < s.batches_per_epoch && !run.done(); ++b) {
        s.batch_in_epoch = b;
        const auto t0 = Clock::now();
        Batch batch = run.loader->get(s.epoch, b);
        if (!s.device.is_cpu()) batch = batch.to(s.device);
        train_step(run, std::move(batch), t0);  // BATCH_START .. BATCH_END
        if (eval_every > 0 && s.step % eval_every == 0) evaluate(/*periodic=*/true);
        agree_on_stop();
        if (run.checkpoint_due() && !run.done()) {
          checkpoint();
          agree_on_stop();
        }
        if (interrupted()) {
          progress->finish();
          if (run.last_checkpoint_step != s.step) checkpoint();  // not twice where one was due at this step
          throw Interrupted(detail::cat("interrupted at step ", s.step, "; checkpoint written. ", how_to_continue(run)));
        }
      }
      if (run.done() && s.batch_in_epoch + 1 < s.batches_per_epoch) break;  // stopped mid-epoch
      run.record.epoch_losses.push_back(run.epoch_batches ? run.epoch_loss_sum / run.epoch_batches
                                                          : std::numeric_limits<double>::quiet_NaN());
      run.record.epoch_times.push_back(seconds_since(run.record.epoch_started));
      run.flush_optimizer();
      fire(Event::EPOCH_END);
      agree_on_stop();
      s.batch_in_epoch = -1;
      if (run.max_epochs > 0 && s.epoch + 1 >= run.max_epochs) {
        ++s.epoch;
        break;
      }
    }
  }

  // Called wherever the loop next tests run.done() (grad_sync.h).
  void agree_on_stop() {
    if (run.sync) run.sync->agree_on_stop();
  }

  void fit() {
    State& s = run.state;
    RunRecord& rec = run.record;
    rec.start();
    set_phase("in setup");
    add_callbacks();
    setup_run(run, std::move(extra_plugins));
    if (run.from_checkpoint) {
      load_checkpoint(run);
      run.start_step = s.step;  // what this process trains starts here (a failure before: nothing)
    } else if (run.config.resume) {
      log().info("{} holds no checkpoint (the run stopped before its first, or trains no steps): it starts "
                 "from step 0", s.run_dir.string());
    }
    if (run.sync) run.sync->broadcast_model();
    set_up = true;  // the model built, its data read and any checkpoint loaded
    if (interrupted())
      throw Interrupted(detail::cat("interrupted during setup, before the first step: nothing was trained",
                                    run.config.resume ? "; the run's checkpoints are as they were" : ""));
    // A resume of a run at its end (e.g. tt-run --resume RUN --sample PROMPT on a finished run).
    const bool at_end = run.config.resume && s.step >= s.total_steps;
    const nlohmann::json previous = at_end && run.root ? read_summary(s.run_dir / "summary.json") : nlohmann::json();
    std::string status = summary_status(previous);
    if (at_end && run.dist) status = run.dist->broadcast_string(status);
    check_resume_length(run, status);
    if (at_end && status == "completed") {
      log().info("{}: the run in {} is complete at step {} (of {}); nothing to train, outputs kept as they are",
                 run.pipeline.name, s.run_dir.string(), s.step, s.total_steps);
      if (!run.pipeline.overrides.empty()) {
        std::string given;
        for (const auto& o : run.pipeline.overrides) given += (given.empty() ? "" : " ") + o;
        log().warn("the overrides {} train nothing: the run is complete (an override of trainer.max_steps or "
                   "trainer.epochs past its end trains it further); a --predict or --sample now uses them", given);
      }
      if (report) report->keep(previous);  // a prediction adds its figures to it
      return;
    }
    // A run that trains no steps and stopped before its end, with no checkpoint, runs as it did
    // the first time (below).
    if (at_end && run.from_checkpoint) {
      // Trained to the end but stopped before its outputs were written (Ctrl-C or a kill while
      // evaluating or sampling at the end): this process writes them.
      log().info("{}: the run in {} was trained to step {} (of {}) but its outputs were not all written "
                 "(summary.json {}); writing them now",
                 run.pipeline.name, s.run_dir.string(), s.step, s.total_steps,
                 !status.empty()                            ? "says " + status
                 : !fs::exists(s.run_dir / "summary.json") ? std::string("missing")
                 : previous.is_null()                       ? std::string("unreadable")
                                                            : std::string("without a status"));
      rec.setup_seconds = seconds_since(rec.started);
      // No training here: the training's figures are the stopped run's where its summary has them
      // (the memory figures else what this process held).
      if (report) report->finish_only(previous);
      s.memory.peak_tensor = run.peak();
      s.memory.peak_rss = run.rss_peak();
      write_pipeline_file(run);  // the overrides it was resumed with
      fire(Event::FIT_START);    // FIT_START .. FIT_END as in any fit (metrics.jsonl takes the evaluation)
      set_phase("evaluating");
      finish();
      return;
    }
    run.start_step = s.step;
    rec.setup_seconds = seconds_since(rec.started);
    warn_of_unused_settings(run);  // not where nothing trains (the returns above)
    const std::string& assigned_by = run.host.optimizer_assigned_by();
    // An evaluation-only run (no step to take) names no optimizer or schedule it does not use.
    const std::string training = s.total_steps == 0 ? std::string("no training step (evaluation only)")
                                                    : run.pipeline.optimizer.name + " optimizer" +
                                                          (assigned_by.empty() ? "" : " as replaced or wrapped by " + assigned_by) +
                                                          ", " + run.pipeline.schedule.name + " schedule";
    log().info("{}: {} | data {} | {} | plugins [{}] | {} threads | run dir {}", run.pipeline.name,
               s.model->describe(), run.data.train->describe(), training, run.host.names(), run.threads,
               s.run_dir.string());
    std::string changed;  // on the command line: pipeline.yaml now holds it, log.txt keeps what it was
    for (const auto& o : run.pipeline.overrides) changed += " " + o;
    if (run.resumed) log().info("resumed from {} at step {}{}", run.resumed_from, s.step, changed.empty() ? "" : " with" + changed);
    if (run.config.resume) write_pipeline_file(run);  // the overrides it was resumed with, now that they fit and it trains

    fire(Event::FIT_START);
    run.gradient_ready.install();
    struct CapGuard {  // the cap never outlives the training loop, whatever ends it
      ~CapGuard() {
        Meter::global().set_cap(0);
        Meter::set_device_cap(0);
      }
    } cap_guard;
    cap_memory(run);
    run.meter.release_cache();  // temporaries of data generation and model set-up are not training's
    if (run.pipeline.trainer.get_bool("release_library_pages")) {
      rec.library_pages_released = Meter::release_library_pages();
      log().debug("released {:.1f} MiB of library pages", static_cast<double>(rec.library_pages_released) / (1 << 20));
    }
    Meter::reset_rss_peak();    // so peak RSS is the training loop's high-water mark
    run.rss_peak_floor = 0;
    s.memory.rss_anon_start = Meter::rss_anon();
    run.reset_peak();
    rec.train_started = run.last_checkpoint_time = Clock::now();
    getrusage(RUSAGE_SELF, &rec.usage_start);
    set_phase("training");
    try {
      train_loop();
    } catch (const c10::OutOfMemoryError& e) {
      const std::string what = e.what();
      TT_FAIL_AS(OutOfMemory, "out of memory at step ", s.step + 1, " (epoch ", s.epoch, ", batch ", s.batch_in_epoch,
                 ", outside forward/backward: loading the batch or the optimizer step): ",
                 first_line(what),
                 run.host.plugins().empty() ? "" : " (a plugin that retries out-of-memory errors, as oom-guard does, "
                                                   "acts in forward and backward only)",
                 held_by_plugins(s), ". Raise trainer.memory_cap or lower trainer.batch_size.");
    }
    progress->finish();
    run.set_capping(false);
    end_training_measurements();
    check_trained_numbers(run, s.step - run.start_step);
    finish();
  }

  // The training loop's time, CPU use, page faults and peaks, taken once where it ends: after
  // its last step, or where a failure or an interrupt stopped it (its summary reports them up to
  // there). Evaluation and outputs come after.
  bool training_measured = false;
  void end_training_measurements() {
    RunRecord& rec = run.record;
    if (training_measured || rec.train_started == Clock::time_point{}) return;
    training_measured = true;
    State& s = run.state;
    rec.train_seconds = seconds_since(rec.train_started);
    getrusage(RUSAGE_SELF, &rec.usage_end);
    s.memory.peak_tensor = run.peak();
    s.memory.peak_rss = run.rss_peak();
    s.memory.peak_reserved = run.meter.reserved_peak();
    s.memory.rss_anon_end = Meter::rss_anon();
  }

  // After the training loop: the final evaluation and checkpoint, the model's outputs, exports,
  // FIT_END (summary.json and the plots).
  void finish() {
    State& s = run.state;
    RunRecord& rec = run.record;
    run.flush_optimizer();  // outputs read the parameters whole, even without evaluation or a checkpoint
    evaluate();
    if (run.last_checkpoint_step != s.step && s.step > run.start_step) checkpoint();
    if (run.sync) run.sync->gather_replica_hashes();
    s.metrics.clear();
    const std::vector<std::string> exports = run.pipeline.output.get_list("export");
    stop_if_asked("its outputs", true);
    set_phase("writing outputs");
    if (run.root)
      with_context("model (" + run.pipeline.model.name + ") writing outputs", [&] {
        s.model->write_outputs(s.run_dir, s);
        return 0;
      });
    stop_if_asked(exports.empty() ? "summary.json" : "its weights export and summary.json");
    if (run.root)  // output.export: the weights for other tools
      for (const auto& name : exports) {
        const WeightsFormat format = weights_format(name);
        const fs::path file = s.run_dir / weights_file_name(format);
        write_weights(file, format, module_tensors(*s.model), model_record(s));
        log().info("weights exported to {}", file.string());
      }
    rec.model_metrics = s.metrics;
    stop_if_asked("summary.json");
    fire(Event::FIT_END);  // the RunReport callback writes summary.json and the plots
  }

  // Ctrl-C after the last step stops between the outputs: those written are kept, and a resume of
  // a run trained to its end writes the rest. Before them every rank stops where rank 0 does (it
  // decides for all); between them, rank 0 alone: the others write none, and are not kept waiting.
  void stop_if_asked(const char* before, bool all_ranks = false) {
    const bool asked = run.root && interrupt_requested();
    if (!(all_ranks && run.dist ? run.dist->broadcast_string(asked ? "1" : "") == "1" : asked)) return;
    const State& s = run.state;
    throw Interrupted(detail::cat("interrupted after the last step (", s.step, run.last_checkpoint_step == s.step
                                  ? ", checkpoint written" : "", "), before ", before, ". ", how_to_continue(run),
                                  " to write them"));
  }

  // Whatever ends the fit early is in log.txt and summary.json (status failed or interrupted).
  bool set_up = false;
  void fit_reporting_failures() {
    try {
      fit();
    } catch (const Interrupted& e) {
      report_failure("interrupted", e.what(), e.exit_code());
      throw;
    } catch (const Error& e) {
      report_failure("failed", e.what(), e.exit_code());
      throw;
    } catch (const c10::Error& e) {
      // out of memory outside the steps, which say it their way (a model built too large): the
      // meter's pool's error, or LibTorch's own allocator's without the meter's cache
      const std::string what = e.what_without_backtrace();
      if (dynamic_cast<const c10::OutOfMemoryError*>(&e) || what.find("not enough memory") != std::string::npos) {
        const bool setup = !set_up;  // the batch size plays no part yet
        OutOfMemory oom(detail::cat("out of memory ", setup ? "in setup, building the model or reading the data: "
                                    : "outside the training steps: ", first_line(what), setup ?
                                    " (a smaller model: its size options, such as model.k or model.d_model; or less data in memory)"
                                    : " (a smaller model, trainer.batch_size or trainer.eval_batch_size)"));
        report_failure("failed", oom.what(), oom.exit_code());
        throw oom;
      }
      report_failure("failed", what, 1);
      throw;
    } catch (const std::exception& e) {
      report_failure("failed", e.what(), 1);
      throw;
    }
  }

  void report_failure(const char* status, const std::string& what, int exit_code) {
    if (progress) progress->finish();
    try {
      end_training_measurements();
    } catch (...) {  // the failure is reported without them
    }
    if (report) report->write_failure(status, what, exit_code);
  }
};

Trainer::Trainer(Pipeline pipeline, TrainerConfig config)
    : impl_(std::make_unique<Impl>(std::move(pipeline), std::move(config))) {}
Trainer::~Trainer() = default;
void Trainer::add_plugin(std::unique_ptr<Plugin> plugin) {
  if (plugin->name().empty()) plugin->set_name("embedded");
  impl_->extra_plugins.push_back(std::move(plugin));
}
void Trainer::will_predict(const fs::path& input) { impl_->run.predict_input = input; }
void Trainer::set_command(std::vector<std::string> argv) { impl_->run.command = std::move(argv); }
void Trainer::fit() { impl_->fit_reporting_failures(); }
State& Trainer::state() { return impl_->run.state; }
const Pipeline& Trainer::pipeline() const { return impl_->run.pipeline; }
const fs::path& Trainer::run_dir() const { return impl_->run.state.run_dir; }
const std::vector<double>& Trainer::step_losses() const { return impl_->run.record.step_losses; }
const MemoryBreakdown& Trainer::memory() const { return impl_->run.state.memory; }
std::string Trainer::summary_json() const { return impl_->report ? json_text(impl_->report->summary(), 2) : "null"; }

std::string Trainer::generate(const std::string& prompt, const GenerateOptions& options) {
  Model& model = *impl_->run.state.model;
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::string text = model.generate(prompt, options);
  model.train(was_training);
  std::ofstream out(impl_->run.state.run_dir / "samples.txt", std::ios::app);
  out << "--- prompt: " << prompt << " (tokens " << options.tokens << ", temperature " << options.temperature
      << ", top_k " << options.top_k << ", seed " << options.seed << ")\n"
      << text << "\n";
  return text;
}

Trainer::Prediction Trainer::predict(const fs::path& input, const fs::path& output) {
  Run& run = impl_->run;
  Model& model = *run.state.model;
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const auto t0 = Clock::now();
  const Run::Peaks own = run.measure_apart([&] {
    PhaseScope phase("predicting");
    model.predict(input, output);
  });
  Prediction p;
  p.seconds = seconds_since(t0);
  p.peak_tensor_bytes = own.tensor;
  p.peak_rss_bytes = own.rss;
  model.train(was_training);
  if (impl_->report)
    impl_->report->add_to_summary("prediction", {{"input", input.string()},
                                                 {"output", output.string()},
                                                 {"seconds", p.seconds},
                                                 {"peak_tensor_bytes", p.peak_tensor_bytes},
                                                 {"peak_rss_bytes", p.peak_rss_bytes}});
  return p;
}

Pipeline Trainer::pipeline_of_run(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  const fs::path file = run_dir / "pipeline.yaml";
  check_run_directory(run_dir);
  return load_pipeline(file.string(), overrides);
}

}  // namespace tt
