// MetricsLog, ProgressDisplay and CheckpointSaver (RunReport: run_report.cpp).
#include <nlohmann/json.hpp>

#include "train/callbacks.h"
#include "train/checkpoints.h"
#include "tt/json_text.h"
#include "tt/log.h"
#include "tt/report.h"

namespace tt {

using json = nlohmann::json;

void MetricsLog::on(Event event, State& s) {
  if (event == Event::FIT_START) {
    log_every_ = run_.pipeline.trainer.get_int("log_every");
    // A resumed run drops the lines written after the checkpoint it resumed from.
    if (run_.root)
      file_.open(s.run_dir / "metrics.jsonl", run_.resumed ? s.step : (run_.config.resume ? 0 : -1));
    if (run_.resumed) file_.write(json{{"step", s.step}, {"resumed", true}, {"time", unix_seconds()}}.dump());
  }
  if (event == Event::BATCH_END && (s.step % log_every_ == 0 || s.step == s.total_steps)) {
    const StepReport& r = s.last_step;
    json line{{"step", s.step},
              {"epoch", static_cast<double>(s.epoch) + static_cast<double>(s.batch_in_epoch + 1) / s.batches_per_epoch},
              {"loss", s.batch_loss},
              {"step_seconds", r.seconds},
              {"examples", r.examples},
              {"samples_per_s", r.seconds > 0 ? static_cast<double>(r.examples) / r.seconds : 0.0},
              {"tensor_bytes", run_.live()},
              {"tensor_peak", run_.peak()},
              {"rss", Meter::rss()},
              {"lr", r.lr},
              {"time", unix_seconds()}};
    // The model's items (ModelOutput::items: tokens for the LM) a second, over all ranks (this
    // rank's in the share of the examples it had)
    if (run_.step_items > 0 && r.seconds > 0 && s.batch.size > 0)
      line["items_per_s"] = static_cast<double>(run_.step_items) * static_cast<double>(r.examples) /
                            static_cast<double>(s.batch.size) / r.seconds;
    if (r.grad_norm) line["grad_norm"] = *r.grad_norm;
    if (r.optimizer_seconds) line["optimizer_seconds"] = *r.optimizer_seconds;
    if (r.comm_seconds) line["comm_seconds"] = *r.comm_seconds;
    if (r.skipped) line["skipped"] = true;
    if (r.dropped) line["dropped"] = true;  // its loss, not finite, is written null
    add_metrics(line, s);
    file_.write(json_text(line));
  }
  if (event == Event::AFTER_EVAL && !s.metrics.empty()) {  // empty: an evaluation abandoned on an interrupt
    json line{{"step", s.step}, {"time", unix_seconds()}};
    add_metrics(line, s);
    file_.write(json_text(line));
  }
  if (event == Event::EPOCH_END) {
    file_.write(json{{"step", s.step},
                     {"epoch_end", s.epoch + 1},
                     {"epoch_loss", run_.record.epoch_losses.back()},
                     {"epoch_seconds", run_.record.epoch_times.back()},
                     {"rss", Meter::rss()},
                     {"rss_anon", Meter::rss_anon()},
                     {"time", unix_seconds()}}
                    .dump());  // numbers only
  }
}

void MetricsLog::add_metrics(json& line, const State& s) {
  for (const auto& [k, v] : s.metrics) {
    if (!line.contains(k)) {
      line[k] = v;
    } else if (warned_.insert(k).second) {
      log().warn("a plugin or the model set state.metrics[\"{}\"], a field of the trainer's own in metrics.jsonl: the "
                 "trainer's is kept; give the metric a name of its own (e.g. prefixed with the plugin's)", k);
    }
  }
}

void ProgressDisplay::on(Event event, State& s) {
  if (event == Event::FIT_START) {
    const auto mode = run_.config.quiet ? Progress::Mode::Off
                                        : Progress::parse_mode(run_.pipeline.trainer.get_string("progress"));
    progress_ = std::make_unique<Progress>(mode, s.total_steps, s.step);
  }
  if (event == Event::BATCH_END && progress_) progress_->update(s.step, s.batch_loss, run_.live(), Meter::rss());
  if (event == Event::BEFORE_EVAL || event == Event::FIT_END) finish();  // evaluation logs its metrics
}

void ProgressDisplay::finish() {
  if (progress_) progress_->finish();
}

void CheckpointSaver::on(Event event, State&) {
  if (event == Event::CHECKPOINT) save_checkpoint(run_);
}

}  // namespace tt
