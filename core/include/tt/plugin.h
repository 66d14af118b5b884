#pragma once
// The Plugin interface: how a technique acts on training.
//
// The trainer fires Events in a fixed order (see event.h). Plugins run in the order the
// pipeline lists them; AFTER_* and *_END events run in reverse (first in, last out), so
// that a plugin wrapping something sees its own "after" last. A plugin may:
//  - replace the optimizer            on OPTIMIZER: assign state.optimizer
//  - wrap the forward pass            forward_scope(): an RAII object alive during forward+loss
//  - transform the loss               on AFTER_LOSS: replace state.loss
//  - veto an optimizer step           on BEFORE_STEP: set state.skip_step
//  - react to out-of-memory           on OOM: set state.retry_batch (e.g. after shrinking
//                                      state.micro_batch_size)
//  - keep state across checkpoints    save_state / load_state
//  - declare its place in the list    must_come_after / must_wrap_the_final_optimizer /
//                                      replaces_the_optimizer
//  - declare how it treats the step    takes_the_step_in_backward / may_skip_steps
//  - declare the device it needs       runs_only_on
//
// A plugin is built (its factory called) when the pipeline is read, --dry-run included, so that
// what its factory or its place in the list would refuse is refused before any data is read: a
// constructor reads its options and declares, and does nothing else; the work starts at INIT.
//
// Built-in callbacks (metrics lines, progress, checkpoint saving, the run report) are Plugins
// too; they run after every plugin on every event, so they see what the plugins did.
// An exception escaping a handler ends the fit with "plugin 'NAME' failed in EVENT at step N:
// ..." (the same error kind; exit 1 for exceptions that are not tt's), in log.txt and in
// summary.json (status "failed").
#include <memory>
#include <string>
#include <vector>

#include "tt/event.h"
#include "tt/export.h"

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace tt {

struct State;

// Entered when created, exited when destroyed.
class TT_API Scope {
 public:
  virtual ~Scope();
};

class TT_API Plugin {
 public:
  virtual ~Plugin();
  virtual void on(Event event, State& state);
  virtual std::unique_ptr<Scope> forward_scope(State& state);
  virtual void save_state(torch::serialize::OutputArchive& archive) const;
  virtual void load_state(torch::serialize::InputArchive& archive);

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // Ordering constraints, declared in the constructor and checked by the trainer with one
  // message format ("plugins: 'offload' must be listed after 'adam8bit' (...), but the list is
  // [offload, adam8bit]").
  struct Ordering {
    std::string after;  // a plugin that must be listed earlier when both are listed;
                        // "" = every plugin that replaces the optimizer on OPTIMIZER
    std::string why;
  };
  const std::vector<Ordering>& ordering() const { return ordering_; }
  // Whether it declares that it assigns state.optimizer on OPTIMIZER (replacing or wrapping it).
  bool assigns_the_optimizer() const { return assigns_optimizer_; }
  // Why it takes the optimizer step in backward, and why it may veto a step; "" when it does not
  // declare so (below).
  const std::string& step_in_backward() const { return step_in_backward_; }
  const std::string& skips_steps() const { return skips_steps_; }
  // The only kind of device it runs on ("cpu" or "cuda"; "" for either), and why.
  const std::string& only_device() const { return only_device_; }
  const std::string& only_device_why() const { return only_device_why_; }

 protected:
  // When `plugin` is listed too, it must come earlier (checked before INIT).
  void must_come_after(std::string plugin, std::string why) { ordering_.push_back({std::move(plugin), std::move(why)}); }
  // Every plugin that replaces state.optimizer on OPTIMIZER must come earlier: for a plugin that
  // wraps the optimizer it is given (offload, zero1). Checked after OPTIMIZER, so it also covers
  // plugins built out of tree.
  void must_wrap_the_final_optimizer(std::string why) {
    ordering_.push_back({"", std::move(why)});
    assigns_optimizer_ = true;
  }
  // It assigns state.optimizer an optimizer of its own on OPTIMIZER (adam8bit): the plugins that
  // must wrap the final optimizer are then checked to come after it when the pipeline is read.
  // Undeclared, the same check happens only when OPTIMIZER fires.
  void replaces_the_optimizer() { assigns_optimizer_ = true; }
  // It updates every parameter itself as its gradient becomes ready, during backward
  // (tt/extension.h, 11): the trainer then takes no step after backward. Refused, when the
  // pipeline is read, beside trainer.grad_clip, a plugin that wraps the final optimizer, one that
  // may skip steps, or a second plugin that declares this.
  void takes_the_step_in_backward(std::string why) { step_in_backward_ = std::move(why); }
  // It may veto a step on BEFORE_STEP (state.skip_step after gradients are judged: amp's fp16
  // loss scaling), which a step taken in backward has already applied. Undeclared, such a veto
  // beside a step in backward fails at the step it happens.
  void may_skip_steps(std::string why) { skips_steps_ = std::move(why); }
  // It runs only on this kind of device, "cpu" or "cuda" (amp's fp16 autocast, a CUDA model's
  // state moved to host memory): refused when the pipeline is read, --dry-run included, where
  // trainer.device is the other kind. `why` says why and what to use there instead.
  void runs_only_on(std::string device, std::string why);

 private:
  std::string name_;
  std::vector<Ordering> ordering_;
  bool assigns_optimizer_ = false;
  std::string step_in_backward_, skips_steps_, only_device_, only_device_why_;
};

}  // namespace tt
