#pragma once
// Runs the gradient-ready hooks plugins registered (tt/extension.h, add_gradient_ready_hook):
// post-hooks on the trainable parameters' gradient accumulators fire them during the last
// micro-batch's backward; complete() fires them for the parameters backward did not reach
// that way (every parameter in a data-parallel run, whose gradients are final after the sync).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace tt {

struct Run;
struct State;

// Whether `plugin` registered a gradient-ready hook on `state` (extension.cpp keeps the owners).
bool has_gradient_ready_hook_of(const State& state, const std::string& plugin);

class GradientReady {
 public:
  explicit GradientReady(Run& run) : run_(run) {}
  // At FIT_START: installs the post-hooks when any gradient-ready hook is registered.
  void install();
  bool active() const { return !accumulators_.empty() || all_after_sync_ || complete_hooks_; }
  // Around the last micro-batch's backward (single process): hooks fire as gradients land.
  void arm(bool on) { armed_ = on; }
  // The step's gradients are complete: fire every parameter that has a gradient and whose
  // hooks have not run yet, in parameter order; then the gradients-complete hooks.
  void complete();
  void fire(size_t index);  // the hooks of one parameter (once per step)
  // Parameters whose hooks ran in this step's backward so far (an out-of-memory error cuts it
  // short: the batch cannot be re-run over work the hooks did), and a new start for the batch.
  size_t fired_count() const;
  void reset();
  // Of the last complete() step: parameters whose hooks left them no gradient after the
  // gradients-complete hooks (the optimizer step in backward frees each one) and that still have
  // none now (a plugin may give them back on BEFORE_STEP): gradient clipping cannot see them.
  size_t released() const;
  // Seconds the hooks took since the last call (the step in backward's optimizer time).
  double take_seconds();
  // While on (the first step, where the meter measures gradients), the most bytes of gradients
  // live at once when a hook was about to run, the one it gets included.
  void measure_gradients(bool on) { measuring_ = on; }
  int64_t most_gradient_bytes() const { return most_gradient_bytes_; }

 private:
  Run& run_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they hold the hooks
  std::vector<char> fired_;
  std::vector<size_t> released_;  // their indices
  double seconds_ = 0;
  int64_t most_gradient_bytes_ = 0;
  bool measuring_ = false;
  bool armed_ = false;
  bool all_after_sync_ = false;
  bool complete_hooks_ = false;  // gradients-complete hooks are registered
};

}  // namespace tt
