#include "tt/extension.h"

#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "train/plugin_host.h"
#include "tt/error.h"
#include "tt/optimizer_state.h"
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

namespace {
// Who registered each State's loss hooks, in order ("" outside a plugin): named when a hook
// that computes the loss itself leaves the hooks after it uncalled.
std::mutex g_owners_mutex;
std::unordered_map<const State*, std::vector<std::string>> g_loss_hook_owners;
std::unordered_map<const State*, std::vector<std::string>> g_gradient_hook_owners;  // the same, gradient-ready

}  // namespace

bool has_gradient_ready_hook_of(const State& state, const std::string& plugin) {
  const std::lock_guard<std::mutex> lock(g_owners_mutex);
  const auto it = g_gradient_hook_owners.find(&state);
  if (it == g_gradient_hook_owners.end()) return false;
  const auto& owners = it->second;
  const size_t n = std::min(owners.size(), state.gradient_ready_hooks.size());  // a State gone left more
  return std::find(owners.begin(), owners.begin() + static_cast<std::ptrdiff_t>(n), plugin) !=
         owners.begin() + static_cast<std::ptrdiff_t>(n);
}

// A hook added in a plugin's handler throws as that plugin's ("plugin 'x' failed in its loss
// hook at step N: ..."), as its handlers do; what the hook's `next` throws (the model, a later
// hook) passes through as it was.
void add_gradient_ready_hook(State& state, GradientReadyHook hook) {
  TT_CHECK(hook, "add_gradient_ready_hook: an empty hook");
  const Plugin* owner = PluginHost::calling();
  {
    const std::lock_guard<std::mutex> lock(g_owners_mutex);
    auto& owners = g_gradient_hook_owners[&state];
    owners.resize(state.gradient_ready_hooks.size());  // a State at the address of one gone: its names dropped
    owners.push_back(owner ? owner->name() : std::string());
  }
  if (owner)
    hook = [owner, inner = std::move(hook), &state](size_t index, at::Tensor& grad) {
      try {
        const PluginHost::Calling in(*owner);  // what it reports (report_held) is its own
        inner(index, grad);
      } catch (...) {
        PluginHost::rethrow_attributed(*owner, detail::cat("its gradient-ready hook at step ", state.step + 1), state);
      }
    };
  state.gradient_ready_hooks.push_back(std::move(hook));
}

namespace {
// While alive, every group of the optimizer holds nothing but `parameter` in the group it
// belongs to: the optimizer's step() sees that one parameter. Restores the lists on exit (swaps:
// no copies of the lists).
class OneParameter {
 public:
  OneParameter(torch::optim::Optimizer& optimizer, const at::Tensor& parameter) : groups_(optimizer.param_groups()) {
    size_t owner = groups_.size();
    for (size_t g = 0; g < groups_.size() && owner == groups_.size(); ++g)
      for (const auto& p : groups_[g].params())
        if (p.unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) {
          owner = g;
          break;
        }
    TT_CHECK(owner < groups_.size(), "step_parameter: the tensor (", parameter.sizes(),
             ") is not a parameter of the optimizer (", groups_.size(), " groups)");
    held_.resize(groups_.size());
    held_[owner].push_back(parameter);
    for (size_t g = 0; g < groups_.size(); ++g) std::swap(held_[g], groups_[g].params());
  }
  ~OneParameter() {
    for (size_t g = 0; g < groups_.size(); ++g) std::swap(held_[g], groups_[g].params());
  }
  OneParameter(const OneParameter&) = delete;
  OneParameter& operator=(const OneParameter&) = delete;

 private:
  std::vector<torch::optim::OptimizerParamGroup>& groups_;
  std::vector<std::vector<at::Tensor>> held_;
};

bool steps_per_parameter(torch::optim::Optimizer& o) {
  return dynamic_cast<PerParameterStep*>(&o) || dynamic_cast<torch::optim::SGD*>(&o) ||
         dynamic_cast<torch::optim::Adam*>(&o) || dynamic_cast<torch::optim::AdamW*>(&o) ||
         dynamic_cast<torch::optim::Adagrad*>(&o) || dynamic_cast<torch::optim::RMSprop*>(&o);
}
}  // namespace

void step_parameter(torch::optim::Optimizer& optimizer, const at::Tensor& parameter) {
  TT_CHECK(steps_per_parameter(optimizer), "step_parameter: the optimizer (", c10::demangle(typeid(optimizer).name()),
           ") does not declare that its step updates each parameter on its own (tt::PerParameterStep, "
           "tt/optimizer_state.h), so one parameter cannot be stepped alone; torch's SGD, Adam, AdamW, Adagrad and "
           "RMSprop can");
  TT_CHECK(parameter.grad().defined(), "step_parameter: the parameter (", parameter.sizes(),
           ") has no gradient, so nothing would update it: a gradient-ready hook that ran before released it "
           "(register the hook that steps before the one that moves gradients away, or give them back first)");
  const OneParameter only(optimizer, parameter);
  optimizer.step();
}

void add_gradients_complete_hook(State& state, GradientsCompleteHook hook) {
  TT_CHECK(hook, "add_gradients_complete_hook: an empty hook");
  if (const Plugin* owner = PluginHost::calling())
    hook = [owner, inner = std::move(hook), &state] {
      try {
        const PluginHost::Calling in(*owner);
        inner();
      } catch (...) {
        PluginHost::rethrow_attributed(*owner, detail::cat("its gradients-complete hook at step ", state.step + 1), state);
      }
    };
  state.gradients_complete_hooks.push_back(std::move(hook));
}

const char* to_string(Held where) {
  switch (where) {
    case Held::Tensors: return "tensors";
    case Held::File: return "file";
    case Held::Host: return "host";
  }
  return "?";
}

void report_held(State& state, const std::string& what, int64_t bytes, Held where) {
  TT_CHECK(bytes >= 0, "report_held: ", bytes, " bytes of '", what, "'");
  TT_CHECK(!what.empty(), "report_held: an empty name (say what is held, e.g. \"gradients\")");
  const Plugin* owner = PluginHost::calling();
  const std::string plugin = owner ? owner->name() : std::string();
  const auto it = std::find_if(state.held.begin(), state.held.end(),
                               [&](const HeldMemory& h) { return h.plugin == plugin && h.what == what; });
  if (it == state.held.end()) {
    state.held.push_back({plugin, what, bytes, static_cast<int>(where)});
  } else {
    TT_CHECK(it->where == static_cast<int>(where), "report_held: '", what, "' of plugin '", plugin, "' was reported in ",
             to_string(static_cast<Held>(it->where)), " and now in ", to_string(where), ": give each place its own name");
    it->bytes = std::max(it->bytes, bytes);
  }
  state.memory.held = 0;  // the tensors' part of the breakdown
  for (const auto& h : state.held)
    if (h.where == static_cast<int>(Held::Tensors)) state.memory.held += h.bytes;
}

void add_loss_hook(State& state, LossHook hook) {
  TT_CHECK(hook, "add_loss_hook: an empty hook");
  {
    const std::lock_guard<std::mutex> lock(g_owners_mutex);
    auto& owners = g_loss_hook_owners[&state];
    owners.resize(state.loss_hooks.size());  // a State at the address of one gone: its names dropped
    const Plugin* owner = PluginHost::calling();
    owners.push_back(owner ? owner->name() : std::string());
  }
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
        const PluginHost::Calling in(*owner);
        return inner(micro, marked);
      } catch (...) {
        if (from_next) throw;
        PluginHost::rethrow_attributed(*owner, detail::cat("its loss hook at step ", state.step + 1), state);
      }
    };
  state.loss_hooks.push_back(std::move(hook));
}

namespace {
ModelOutput forward_loss_from(State& state, size_t hook, const Batch& micro, size_t& reached) {
  reached = std::max(reached, hook);
  if (hook == state.loss_hooks.size()) return state.model->forward_loss(micro);
  const std::function<ModelOutput(const Batch&)> next = [&state, hook, &reached](const Batch& b) {
    return forward_loss_from(state, hook + 1, b, reached);
  };
  return state.loss_hooks[hook](micro, next);
}
}  // namespace

ModelOutput forward_loss(State& state, const Batch& micro) {
  size_t reached = 0;
  ModelOutput out = forward_loss_from(state, 0, micro, reached);
  // The last hook may compute the loss itself (the model's forward_loss then does not run); an
  // earlier one that does leaves the hooks after it out: two plugins replacing the loss.
  if (reached + 1 < state.loss_hooks.size()) {
    std::vector<std::string> owners;
    {
      const std::lock_guard<std::mutex> lock(g_owners_mutex);
      owners = g_loss_hook_owners[&state];
    }
    owners.resize(state.loss_hooks.size());
    const auto named = [&](size_t i) { return owners[i].empty() ? "#" + std::to_string(i + 1) : "'" + owners[i] + "'"; };
    std::string skipped;
    for (size_t i = reached + 1; i < owners.size(); ++i) skipped += (skipped.empty() ? "" : ", ") + named(i);
    TT_FAIL_AS(ConfigError, "plugins: the loss hook of ", named(reached), " computed the loss without calling next, so ",
               "the loss hooks after it (of ", skipped, ") never ran at step ", state.step + 1,
               ": list a plugin that replaces the loss last, after those that wrap it, or use one plugin that "
               "replaces it");
  }
  return out;
}

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
