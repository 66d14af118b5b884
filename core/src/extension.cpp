#include "tt/extension.h"

#include <torch/torch.h>

#include "train/plugin_host.h"
#include "tt/error.h"
#include "tt/state.h"

namespace tt {

namespace nn {

bool* keep_fp32_switch(torch::nn::Module& m) {
  if (auto* l = m.as<LinearImpl>()) return &l->keep_fp32;
  if (auto* l = m.as<TiedLinearImpl>()) return &l->keep_fp32;
  if (auto* l = m.as<LayerNormImpl>()) return &l->keep_fp32;
  if (auto* l = m.as<RMSNormImpl>()) return &l->keep_fp32;
  return nullptr;
}

LeanRecompute::LeanRecompute(Block& block) {
  for (auto& [name, mlp] : find_modules<MLPImpl>(block))
    if (!mlp->recompute_activation) {
      mlp->recompute_activation = true;
      switched_.push_back(mlp);
    }
  unread_ = block.residual_mlp();
  if (unread_) unread_->skip_output = true;
}

LeanRecompute::~LeanRecompute() {
  for (auto& m : switched_) m->recompute_activation = false;
  if (unread_) unread_->skip_output = false;
}

}  // namespace nn

// A hook added in a plugin's handler throws as that plugin's ("plugin 'x' failed in its loss
// hook at step N: ..."), as its handlers do; what the hook's `next` throws (the model, a later
// hook) passes through as it was.
void add_gradient_ready_hook(State& state, GradientReadyHook hook) {
  TT_CHECK(hook, "add_gradient_ready_hook: an empty hook");
  if (const Plugin* owner = PluginHost::calling())
    hook = [owner, inner = std::move(hook), &state](size_t index, at::Tensor& grad) {
      try {
        inner(index, grad);
      } catch (...) {
        PluginHost::rethrow_attributed(*owner, detail::cat("its gradient-ready hook at step ", state.step + 1), state);
      }
    };
  state.gradient_ready_hooks.push_back(std::move(hook));
}

void add_loss_hook(State& state, LossHook hook) {
  TT_CHECK(hook, "add_loss_hook: an empty hook");
  if (const Plugin* owner = PluginHost::calling())
    hook = [owner, inner = std::move(hook), &state](const Batch& micro,
                                                    const std::function<ModelOutput(const Batch&)>& next) {
      bool from_next = false;
      const std::function<ModelOutput(const Batch&)> marked = [&](const Batch& b) {
        try {
          return next(b);
        } catch (...) {
          from_next = true;
          throw;
        }
      };
      try {
        return inner(micro, marked);
      } catch (...) {
        if (from_next) throw;
        PluginHost::rethrow_attributed(*owner, detail::cat("its loss hook at step ", state.step + 1), state);
      }
    };
  state.loss_hooks.push_back(std::move(hook));
}

namespace {
ModelOutput forward_loss_from(State& state, size_t hook, const Batch& micro) {
  if (hook == state.loss_hooks.size()) return state.model->forward_loss(micro);
  const std::function<ModelOutput(const Batch&)> next = [&state, hook](const Batch& b) {
    return forward_loss_from(state, hook + 1, b);
  };
  return state.loss_hooks[hook](micro, next);
}
}  // namespace

ModelOutput forward_loss(State& state, const Batch& micro) { return forward_loss_from(state, 0, micro); }

void freeze_teacher(State& state) {
  if (!state.teacher) return;
  Model& teacher = *state.teacher;
  TT_CHECK(state.teacher != state.model, "State::teacher is the trained model itself: give it a model of its own");
  teacher.to(state.device);
  teacher.eval();
  int64_t bytes = 0;
  for (auto& p : teacher.parameters()) {
    p.set_requires_grad(false);
    bytes += static_cast<int64_t>(p.nbytes());
  }
  for (const auto& b : teacher.buffers()) bytes += static_cast<int64_t>(b.nbytes());
  state.memory.teacher = bytes;
}

}  // namespace tt
