// lora: low-rank adapters on the model's Linear layers, every other parameter frozen (no
// gradients, no optimizer state). Writes the adapters alone to RUN_DIR/adapters.pt at the end
// (load: applies such a file), and with export_merged the model with the adapters folded in to
// RUN_DIR/merged.pt (a checkpoint model.init_from can start from).
#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "lora.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/model.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

class LoraPlugin final : public tt::Plugin {
 public:
  LoraPlugin(tt::lora::Config c, std::string load, bool save, bool export_merged)
      : config_(std::move(c)), load_(std::move(load)), save_(save), export_merged_(export_merged) {}

  void on(tt::Event event, tt::State& s) override {
    if (event == tt::Event::INIT) attach(s);
    if (event == tt::Event::FIT_END) finish(s);
  }

 private:
  void attach(tt::State& s) {
    lora_ = std::make_unique<tt::lora::Lora>(*s.model, config_);
    if (!load_.empty()) {
      lora_->load(load_);
      tt::log().info("lora: adapters loaded from {}", load_);
    }
    int64_t total = 0, trainable = 0;
    for (const auto& p : s.model->parameters()) {
      total += p.numel();
      if (p.requires_grad()) trainable += p.numel();
    }
    std::string names;
    for (size_t i = 0; i < lora_->layers().size() && i < 6; ++i) names += (i ? ", " : "") + lora_->layers()[i].name;
    if (lora_->layers().size() > 6) names += ", ...";
    tt::log().info("lora: r={} alpha={} on {} Linear layers ({}); trainable {} of {} parameters ({:.2f}%)", config_.r,
                   config_.alpha, lora_->layers().size(), names, trainable, total,
                   100.0 * static_cast<double>(trainable) / static_cast<double>(total));
  }

  void finish(tt::State& s) {
    if (!lora_) return;
    if (save_) {
      const auto file = s.run_dir / "adapters.pt";
      lora_->save(file);
      tt::log().info("lora: adapters written to {} ({} parameters, {} bytes on disk)", file.string(),
                     lora_->adapter_parameters(), std::filesystem::file_size(file));
    }
    if (export_merged_) {
      const auto file = s.run_dir / "merged.pt";
      lora_->export_merged(*s.model, file, &s);
      tt::log().info("lora: model with the adapters merged written to {} (start from it with model.init_from, or load it as a teacher)",
                     file.string());
    }
  }

  tt::lora::Config config_;
  std::string load_;
  bool save_, export_merged_;
  std::unique_ptr<tt::lora::Lora> lora_;
};

struct LoraOptions {
  std::optional<std::string> load;
  bool save, export_merged;
};

void register_lora(tt::Registry& r) {
  using C = tt::lora::Config;
  const C d{};
  r.add_plugin(
      "lora",
      "low-rank adapters (LoRA) on Linear layers chosen by name; the base weights are frozen, only the adapters "
      "train (gradients and optimizer state for them alone); adapters saved alone, merge for inference",
      tt::Schema()
          .field("targets", &C::targets, d.targets,
                 "Linear layers to adapt: name patterns (qkv, proj, fc1, fc2, blocks.0.attn.*) or [all-linear] (every one at least r wide)")
          .field("r", &C::r, d.r, "rank of the adapters")
          .range(tt::ge(1))
          .field("alpha", &C::alpha, d.alpha, "scaling: the adapter's output is multiplied by alpha / r")
          .range(tt::gt(0))
          .field("dropout", &C::dropout, d.dropout, "dropout on the adapter's input (training only)")
          .range(tt::ge(0), tt::lt(1))
          .field("train", &C::train, d.train, "more modules/parameters to keep trainable (name patterns, e.g. ln_f)")
          .field("load", &LoraOptions::load, std::nullopt,
                 "start the adapters from this adapters.pt (same targets, r, alpha)")
          .field("save", &LoraOptions::save, true, "write the adapters alone to RUN_DIR/adapters.pt at the end")
          .field("export_merged", &LoraOptions::export_merged, false,
                 "also write the model with the adapters folded in to RUN_DIR/merged.pt (for model.init_from)"),
      [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
        auto c = o.to<C>();
        const auto l = o.to<LoraOptions>();
        o.check(!c.targets.empty(), "targets", "is empty: name layers, e.g. [qkv, proj, fc1, fc2], or [all-linear]");
        o.check(c.targets.size() == 1 || std::find(c.targets.begin(), c.targets.end(), "all-linear") == c.targets.end(),
                "targets", "all-linear stands alone (targets: [all-linear])");
        return std::make_unique<LoraPlugin>(std::move(c), l.load.value_or(""), l.save, l.export_merged);
      },
      tt::PlannerOffer{}, tt::Repeats::Once, {"linear"});
}

}  // namespace

TT_MODULE("plugin", "lora", "LoRA: low-rank adapters on Linear layers, base weights frozen", register_lora)
