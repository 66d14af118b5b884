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
#include <memory>
#include <string>

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

 private:
  std::string name_;
};

}  // namespace tt
