// ema: an exponential moving average of the weights (the worked example of docs/plugins.md).
//
// It keeps a shadow copy of every trainable parameter and, after each optimizer step, moves it
// toward the weights: shadow = decay * shadow + (1 - decay) * weights. The shadow is saved in
// every checkpoint (a resumed run continues the same average), its distance from the weights
// is logged (column ema_distance in metrics.jsonl), evaluations run on the averaged weights
// (their metrics named ema_<metric>), and at the end of the fit the averaged weights are written
// as RUN_DIR/ema.pt, a checkpoint-shaped archive that model.init_from reads.
//
// Events used:
//   FIT_START    after INIT's model surgery and after a resume restored every plugin's state:
//                take the trainable parameters, start the shadow from them (or keep the restored one)
//   AFTER_STEP   the optimizer has stepped (unless a plugin vetoed the step): update the shadow
//   BEFORE_EVAL  swap the average in (the trainer has flushed deferred updates already)
//   EVAL         the metrics are the average's: rename them ema_<metric>
//   AFTER_EVAL   swap the weights back (before any checkpoint is written)
//   FIT_END      the final evaluation and checkpoint are done: write ema.pt (rank 0)
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/extension.h"
#include "tt/fused_adamw.h"
#include "tt/log.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

class Ema final : public tt::Plugin {
 public:
  Ema(double decay, int64_t start_step, bool evaluate, bool save)
      : decay_(decay), start_step_(start_step), evaluate_(evaluate), save_(save) {}

  void on(tt::Event event, tt::State& s) override {
    switch (event) {
      case tt::Event::FIT_START: start(s); break;
      case tt::Event::AFTER_STEP: update(s); break;
      case tt::Event::BEFORE_EVAL: swap_in(); break;
      case tt::Event::EVAL: rename_metrics(s); break;
      case tt::Event::AFTER_EVAL: swap_out(); break;
      case tt::Event::FIT_END: write(s); break;
      default: break;
    }
  }

  void save_state(torch::serialize::OutputArchive& ar) const override {
    ar.write("count", c10::IValue(static_cast<int64_t>(shadow_.size())));
    for (size_t i = 0; i < shadow_.size(); ++i) {
      ar.write("name_" + std::to_string(i), c10::IValue(names_[i]));
      ar.write("shadow_" + std::to_string(i), shadow_[i], /*is_buffer=*/true);
    }
  }

  // Called on resume, before FIT_START: the tensors are kept until start() matches them to the
  // parameters.
  void load_state(torch::serialize::InputArchive& ar) override {
    c10::IValue count;
    ar.read("count", count);
    loaded_names_.clear();
    loaded_.clear();
    for (int64_t i = 0; i < count.toInt(); ++i) {
      c10::IValue name;
      ar.read("name_" + std::to_string(i), name);
      loaded_names_.push_back(name.toStringRef());
      at::Tensor t;
      ar.read("shadow_" + std::to_string(i), t, /*is_buffer=*/true);
      loaded_.push_back(t);
    }
  }

 private:
  void start(tt::State& s) {
    params_.clear();
    names_.clear();
    for (const auto& item : s.model->named_parameters()) {
      if (!item.value().requires_grad()) continue;  // frozen weights never move: nothing to average
      names_.push_back(item.key());
      params_.push_back(item.value());
    }
    torch::NoGradGuard no_grad;
    if (!loaded_.empty()) {  // resumed: continue the average the checkpoint holds
      TT_CHECK(loaded_.size() == params_.size(), "plugins.ema: the checkpoint holds ", loaded_.size(),
               " averaged parameters but the model has ", params_.size(),
               " trainable ones: resume with the pipeline the run was started with");
      for (size_t i = 0; i < params_.size(); ++i) {
        TT_CHECK(loaded_names_[i] == names_[i] && loaded_[i].sizes() == params_[i].sizes(),
                 "plugins.ema: the checkpoint's average of '", loaded_names_[i], "' ", loaded_[i].sizes(),
                 " does not fit the model's '", names_[i], "' ", params_[i].sizes(),
                 ": resume with the pipeline the run was started with");
      }
      shadow_.clear();
      for (size_t i = 0; i < params_.size(); ++i) shadow_.push_back(loaded_[i].to(params_[i].device()));
      loaded_.clear();
      loaded_names_.clear();
    } else {
      shadow_.clear();
      for (const auto& p : params_) shadow_.push_back(p.detach().clone());
      tt::log().info("ema: averaging {} trainable tensors with decay {}", params_.size(), decay_);
    }
    // The average's bytes are named in the summary and compare's table instead of hiding in the
    // peak's rest (tt/extension.h, 12).
    int64_t bytes = 0;
    for (const auto& t : shadow_) bytes += static_cast<int64_t>(t.nbytes());
    tt::report_held(s, "the weights' average", bytes, tt::Held::Tensors);
  }

  void update(tt::State& s) {
    if (s.skip_step) return;  // the weights did not move
    // An optimizer that defers updates (the topic model's FusedAdamW::defer_rows) leaves rows
    // out of date until it is flushed; the average must see every row as it is.
    if (auto* fused = dynamic_cast<tt::FusedAdamW*>(s.optimizer.get())) fused->flush();
    torch::NoGradGuard no_grad;
    double diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor w = params_[i].detach();
      if (s.step <= start_step_) shadow_[i].copy_(w);
      else shadow_[i].lerp_(w, 1.0 - decay_);
      diff2 += (w - shadow_[i]).pow(2).sum().item<double>();
      norm2 += w.pow(2).sum().item<double>();
    }
    s.metrics["ema_distance"] = norm2 > 0 ? std::sqrt(diff2 / norm2) : 0.0;  // |w - shadow| / |w|
  }

  void swap_in() {
    if (!evaluate_ || shadow_.empty()) return;
    torch::NoGradGuard no_grad;
    held_.clear();
    for (size_t i = 0; i < params_.size(); ++i) {
      held_.push_back(params_[i].detach().clone());
      params_[i].detach().copy_(shadow_[i]);
    }
  }

  void rename_metrics(tt::State& s) {
    if (held_.empty()) return;
    std::map<std::string, double> renamed;
    for (const auto& [k, v] : s.metrics) renamed["ema_" + k] = v;
    s.metrics = std::move(renamed);
  }

  void swap_out() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < held_.size(); ++i) params_[i].detach().copy_(held_[i]);
    held_.clear();
  }

  void write(tt::State& s) {
    if (!save_ || s.rank != 0 || shadow_.empty()) return;  // rank 0 writes the run directory
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> weights;
    for (size_t i = 0; i < params_.size(); ++i) {
      weights.push_back(params_[i].detach().clone());
      params_[i].detach().copy_(shadow_[i]);
    }
    torch::serialize::OutputArchive ar, model_ar;
    s.model->save(model_ar);
    for (size_t i = 0; i < params_.size(); ++i) params_[i].detach().copy_(weights[i]);  // outputs see the weights
    ar.write("model", model_ar);
    const auto path = s.run_dir / "ema.pt";
    tt::save_archive_atomic(ar, path);
    tt::log().info("ema: averaged weights written to {} (evaluate them with model.init_from={})", path.string(),
                   path.string());
  }

  double decay_;
  int64_t start_step_;
  bool evaluate_, save_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_, shadow_;
  std::vector<at::Tensor> held_;  // the trained weights while an evaluation runs on the average
  std::vector<std::string> loaded_names_;
  std::vector<at::Tensor> loaded_;
};

struct EmaOptions {
  double decay;
  int64_t start_step;
  bool evaluate, save;
};

void register_ema(tt::Registry& r) {
  r.add_plugin(
      "ema", "an exponential moving average of the trainable weights, kept in checkpoints and written to ema.pt",
      tt::Schema()
          .field("decay", &EmaOptions::decay, 0.999,
                 "shadow = decay * shadow + (1 - decay) * weights after every step; the average spans about "
                 "1/(1 - decay) steps: 0.99 for 100, 0.999 for 1000")
          .range(tt::gt(0), tt::lt(1))
          .field("start_step", &EmaOptions::start_step, 0, "until this step the shadow copies the weights")
          .range(tt::ge(0))
          .field("evaluate", &EmaOptions::evaluate, true,
                 "evaluations run on the averaged weights; their metrics are named ema_<metric>")
          .field("save", &EmaOptions::save, true, "write the averaged weights to RUN_DIR/ema.pt at the end"),
      [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
        const auto e = o.to<EmaOptions>();
        return std::make_unique<Ema>(e.decay, e.start_step, e.evaluate, e.save);
      });
}

}  // namespace

TT_MODULE("plugin", "ema", "an exponential moving average of the weights (docs/plugins.md)", register_ema)
