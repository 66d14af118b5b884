#include "train/gradient_ready.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "train/run.h"
#include "train/step.h"
#include "tt/error.h"

namespace tt {

namespace {
// After AccumulateGrad added this backward's gradient into parameter.grad().
struct AccumulatedHook : torch::autograd::FunctionPostHook {
  AccumulatedHook(GradientReady& owner, size_t index, const bool& armed) : owner(owner), index(index), armed(armed) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (armed) owner.fire(index);
    return outputs;
  }
  GradientReady& owner;
  size_t index;
  const bool& armed;
};
}  // namespace

void GradientReady::install() {
  if (const Plugin* stepper = run_.host.steps_in_backward())
    TT_CHECK_AS(ModuleError, has_gradient_ready_hook_of(run_.state, stepper->name()), "plugin '", stepper->name(),
                "' declares that it takes the optimizer step in backward (", stepper->step_in_backward(),
                "), but registered no gradient-ready hook of its own by FIT_START (tt::add_gradient_ready_hook, "
                "tt/extension.h): no parameter would be updated");
  complete_hooks_ = !run_.state.gradients_complete_hooks.empty();
  if (run_.state.gradient_ready_hooks.empty()) return;
  measuring_ = !run_.gradients_measured;
  fired_.assign(run_.trainable.size(), 0);
  if (run_.sync) {  // gradients are final only after the sync: complete() fires them all
    all_after_sync_ = true;
    return;
  }
  for (size_t i = 0; i < run_.trainable.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(run_.trainable[i]);
    acc->add_post_hook(std::make_unique<AccumulatedHook>(*this, i, armed_));
    accumulators_.push_back(std::move(acc));
  }
}

void GradientReady::fire(size_t index) {
  if (fired_[index]) return;
  fired_[index] = 1;
  if (measuring_) most_gradient_bytes_ = std::max(most_gradient_bytes_, gradient_bytes(run_.trainable));
  const auto t0 = Clock::now();
  for (auto& hook : run_.state.gradient_ready_hooks) hook(index, run_.trainable[index]);
  seconds_ += seconds_since(t0);
}

double GradientReady::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

void GradientReady::complete() {
  armed_ = false;
  if (!fired_.empty())  // gradient-ready hooks are registered
    for (size_t i = 0; i < run_.trainable.size(); ++i)
      if (run_.trainable[i].grad().defined()) fire(i);
  for (auto& hook : run_.state.gradients_complete_hooks) hook();
  released_.clear();
  for (size_t i = 0; i < fired_.size(); ++i)
    if (fired_[i] && !run_.trainable[i].grad().defined()) released_.push_back(i);
  std::fill(fired_.begin(), fired_.end(), 0);
}

size_t GradientReady::released() const {
  return static_cast<size_t>(std::count_if(released_.begin(), released_.end(),
                                           [this](size_t i) { return !run_.trainable[i].grad().defined(); }));
}

size_t GradientReady::fired_count() const { return static_cast<size_t>(std::count(fired_.begin(), fired_.end(), 1)); }

void GradientReady::reset() {
  armed_ = false;
  seconds_ = 0;
  std::fill(fired_.begin(), fired_.end(), 0);
}

}  // namespace tt
