// amp: automatic mixed precision. Autocast around the forward pass on the model's device
// (bf16 on CPU and CUDA, fp16 on CUDA only), a GradScaler (on for fp16, optional for bf16),
// and keep_fp32 for layers that must stay in float32.

#include <torch/torch.h>

#include <optional>

#include "grad_scaler.h"
#include "tt/autocast.h"
#include "tt/error.h"
#include "tt/extension.h"
#include "tt/log.h"
#include "tt/model.h"
#include "tt/module.h"
#include "tt/nn.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/runtime.h"
#include "tt/state.h"

namespace {

class AmpScope final : public tt::Scope {
 public:
  explicit AmpScope(const tt::amp::AutocastState& s) : scope_(s) {}

 private:
  tt::amp::AutocastScope scope_;
};

class AmpPlugin final : public tt::Plugin {
 public:
  AmpPlugin(tt::Options options, c10::ScalarType dtype, bool scaler, tt::amp::GradScaler::Options so,
            std::vector<std::string> keep)
      : options_(std::move(options)), dtype_(dtype), keep_(std::move(keep)) {
    if (dtype_ == c10::ScalarType::Half)
      runs_only_on("cuda", "dtype fp16: tt's amp autocasts fp16 on CUDA only; on the CPU use dtype: bf16");
    if (!scaler) return;
    scaler_ = std::make_unique<tt::amp::GradScaler>(so);
    may_skip_steps("its GradScaler unscales the gradients before the step and skips a step whose gradients overflowed; "
                   "bf16 runs without one: grad_scaler: off");
  }

  void on(tt::Event event, tt::State& s) override {
    switch (event) {
      case tt::Event::INIT: init(s); break;
      case tt::Event::AFTER_LOSS:
        if (scaler_ && s.loss.defined()) s.loss = scaler_->scale_loss(s.loss);
        break;
      case tt::Event::BEFORE_STEP: before_step(s); break;
      default: break;
    }
  }

  std::unique_ptr<tt::Scope> forward_scope(tt::State&) override { return std::make_unique<AmpScope>(autocast_); }

  void save_state(torch::serialize::OutputArchive& ar) const override {
    if (scaler_) scaler_->save(ar);
  }
  void load_state(torch::serialize::InputArchive& ar) override {
    if (scaler_) scaler_->load(ar);
  }

 private:
  void init(tt::State& s) {
    if (s.device.is_cuda()) {  // fp16 declared it runs only on CUDA
      autocast_.cuda = true;
      autocast_.cuda_dtype = dtype_;
    } else {
      autocast_.cpu = true;
      autocast_.cpu_dtype = dtype_;
    }
    std::string kept;
    int64_t n_kept = 0;
    for (const auto& pattern : keep_) {
      int64_t hits = 0;
      for (const auto& item : s.model->named_modules("", /*include_self=*/false)) {
        if (!tt::nn::name_matches(pattern, item.key())) continue;
        bool* flag = tt::nn::keep_fp32_switch(*item.value());
        if (!flag) continue;  // a container: its layers match through the subtree rule
        *flag = true;
        ++hits;
      }
      if (hits == 0) {
        std::string some;
        int shown = 0;
        for (const auto& item : s.model->named_modules("", false)) {
          if (!tt::nn::keep_fp32_switch(*item.value())) continue;
          if (shown++ < 8) some += (some.empty() ? "" : ", ") + item.key();
        }
        options_.fail("keep_fp32", "'" + pattern + "' matches no Linear/LayerNorm/RMSNorm layer of the model (" +
                                       (some.empty() ? std::string("it has none") : "some of its layers: " + some) +
                                       ")");
      }
      n_kept += hits;
      kept += (kept.empty() ? "" : ", ") + pattern;
    }
    tt::log().info("amp: {} autocast on {}; GradScaler {}{}", dtype_ == c10::ScalarType::BFloat16 ? "bf16" : "fp16",
                   autocast_.cuda ? "cuda" : "cpu",
                   scaler_ ? "on (initial scale " + std::to_string(static_cast<int64_t>(scaler_->scale())) + ")"
                           : std::string("off"),
                   kept.empty() ? std::string() : "; float32 layers (" + std::to_string(n_kept) + "): " + kept);
#if defined(__x86_64__) || defined(__i386__)  // x86's flag names (an Arm CPU names bf16 otherwise)
    if (autocast_.cpu && dtype_ == c10::ScalarType::BFloat16 && !tt::cpu_has_flag("amx_bf16") &&
        !tt::cpu_has_flag("avx512_bf16"))
      tt::log().warn("amp: this CPU has no bf16 instructions (neither AMX nor AVX512-BF16): its bf16 matrix products "
                     "are emulated and slower than float32's, so bf16 saves memory here, not time");
#endif
  }

  void before_step(tt::State& s) {
    if (!scaler_) return;
    if (!s.skip_step) {  // a batch already dropped (NaN loss) has no gradients to judge
      std::vector<at::Tensor> params;
      for (auto& g : s.optimizer->param_groups())
        for (auto& p : g.params()) params.push_back(p);
      const bool found_inf = scaler_->unscale(params);
      if (found_inf) {
        s.skip_step = true;
        tt::log().warn("amp: inf/NaN gradients at step {} with loss scale {}: step skipped, scale -> {}", s.step + 1,
                       scaler_->scale(), scaler_->scale() * 0.5);
      }
      scaler_->update(found_inf);
    }
    s.metrics["amp_scale"] = scaler_->scale();
    s.metrics["amp_skipped_steps"] = static_cast<double>(scaler_->skipped());
  }

  tt::Options options_;
  c10::ScalarType dtype_;
  std::vector<std::string> keep_;
  std::unique_ptr<tt::amp::GradScaler> scaler_;
  tt::amp::AutocastState autocast_;
};

struct AmpOptions {
  std::string dtype, grad_scaler;
  std::optional<std::vector<std::string>> keep_fp32;
};

void register_amp(tt::Registry& r) {
  using Scaler = tt::amp::GradScaler::Options;
  const Scaler d{};
  r.add_plugin(
      "amp", "automatic mixed precision: autocast forward (bf16, or fp16 on CUDA) with a GradScaler",
      tt::Schema()
          .field("dtype", &AmpOptions::dtype, "bf16", "bf16 (CPU and CUDA) | fp16 (CUDA only)")
          .choices({"bf16", "fp16"})
          .field("grad_scaler", &AmpOptions::grad_scaler, "auto", "auto (on for fp16, off for bf16) | on | off")
          .choices({"auto", "on", "off"})
          .field("init_scale", &Scaler::init_scale, d.init_scale, "initial loss scale (2^16)")
          .range(tt::gt(0))
          .field("growth_factor", &Scaler::growth, d.growth, "scale x this after growth_interval finite steps")
          .range(tt::gt(1))
          .field("backoff_factor", &Scaler::backoff, d.backoff, "scale x this after a step with inf/NaN gradients")
          .range(tt::gt(0), tt::lt(1))
          .field("growth_interval", &Scaler::growth_interval, d.growth_interval,
                 "finite steps in a row before the scale grows")
          .range(tt::ge(1))
          .field("keep_fp32", &AmpOptions::keep_fp32, std::nullopt,
                 "layers kept in float32: dotted names with wildcards, a subtree, or a last name part, e.g. [head, "
                 "ln_f] (the LM head in float32 keeps bf16 training within 0.1% of float32's loss)"),
      [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
        const auto a = o.to<AmpOptions>();
        const bool use_scaler = a.grad_scaler == "on" || (a.grad_scaler == "auto" && a.dtype == "fp16");
        return std::make_unique<AmpPlugin>(o, a.dtype == "bf16" ? c10::ScalarType::BFloat16 : c10::ScalarType::Half,
                                           use_scaler, o.to<Scaler>(), a.keep_fp32.value_or(std::vector<std::string>{}));
      },
      tt::PlannerOffer{{{"amp(bf16)", "{dtype: bf16}"}, {"amp(fp16)", "{dtype: fp16}", tt::PlannerAlternative::Device::Cuda}}, 20},
      // Autocast lowers the precision of matrix products, tt::nn::Linear's: a model declaring
      // parts without it has none for amp to act on (the topic model's loss is tt's own float32
      // kernels: amp changed nothing there but took the model off its fused step), so the
      // pipeline is refused when read and the planner leaves amp out.
      tt::Repeats::Once, std::vector<std::string>{"linear"});
}

}  // namespace

TT_MODULE("plugin", "amp", "automatic mixed precision (autocast + GradScaler + keep_fp32)", register_amp)
