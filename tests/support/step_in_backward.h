#pragma once
// The optimizer step in backward as a technique builds it on extension point 11 (tt/extension.h):
// each parameter updated by the optimizer's own step as soon as its gradient is ready, and its
// gradient released. The extension tests use it in process; tests/modules/step_in_backward.cpp
// registers it as the plugin test-step-in-backward for runs of tt-run.
#include "tt/extension.h"
#include "tt/plugin.h"
#include "tt/state.h"

namespace tt::test {

class StepInBackward : public Plugin {
 public:
  explicit StepInBackward(const std::string& name = "step-in-backward") {
    set_name(name);
    takes_the_step_in_backward("it updates each parameter as its gradient lands");
  }
  void on(Event e, State& s) override {
    if (e != Event::INIT) return;
    add_gradient_ready_hook(s, [&s](size_t, at::Tensor& p) {
      step_parameter(*s.optimizer, p);
      p.mutable_grad() = at::Tensor();
    });
  }
};

}  // namespace tt::test
