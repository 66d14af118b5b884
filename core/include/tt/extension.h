#pragma once
// Every place a technique acts on training, with its contract. A plugin uses these (and the
// events of tt/event.h); it never flips a model's private flag. Each has a test
// (tests/core/extension_test.cpp; the model-side ones also tests/nn, the output head
// tests/transformer).
//
// Model side: the building blocks of tt/nn.h. A model built from them gets every technique;
// a model of plain torch modules still gets the model-agnostic ones.
//  1. block runner     nn::BlockStackImpl::set_runner        how each block is called (checkpoint)
//  2. attention kernel nn::AttentionImpl::set_kernel         how attention is computed (attention)
//  3. Linear adapters  nn::LinearImpl::add_adapter           y += adapter(x) (lora)
//  4. keep float32     nn::keep_fp32_switch                  a layer runs in float32, autocast off (amp)
//  5. lean re-run      nn::LeanRecompute                     a block re-run for backward keeps less (checkpoint)
// Trainer side: registered on the State, honoured by the loop.
//  6. gradient ready   add_gradient_ready_hook               each parameter's gradient, once per step, complete
//     gradients complete add_gradients_complete_hook         after every one, before clipping and
//                                                            BEFORE_STEP (gradients given back)
//  7. loss hook        add_loss_hook                         wrap or replace the model's forward_loss
//  8. teacher          State::teacher                        a second, frozen model (distillation)
//  9. saved tensors    nn::SavedTensorHooks                  what autograd keeps for backward, packed
//                                                            and unpacked (activation offload)
// 10. output head      Model::output_head (tt/model.h)       the final hidden states, the head and the
//                                                            targets, for a loss hook (chunked
//                                                            cross-entropy, distillation)
// 11. step in backward Plugin::takes_the_step_in_backward,   each parameter updated as its gradient
//                      step_parameter                        is ready; no step after backward
// 12. held memory      report_held                           what a plugin holds of its own, named,
//                                                            in the run's memory figures
// Plus: the optimizer (assign state.optimizer on OPTIMIZER), forward scopes (tt/plugin.h), the
// loss before backward (AFTER_LOSS), a step veto (BEFORE_STEP), OOM handling (OOM), and what a
// plugin declares in its constructor (tt/plugin.h: its place in the list, how it treats the step,
// the only device it runs on).
#include <torch/nn/module.h>

namespace torch::optim {
class Optimizer;
}

#include <functional>
#include <memory>

#include "tt/export.h"
#include "tt/model.h"
#include "tt/nn.h"

namespace tt {

struct State;

namespace nn {

// 4. The keep_fp32 switch of a layer that has one (Linear, TiedLinear, LayerNorm, RMSNorm), or
// nullptr (containers and other modules). A layer whose switch is on computes in float32 with
// autocast off and returns float32, whatever autocast is active.
TT_API bool* keep_fp32_switch(torch::nn::Module& module);

// 5. While alive, `block` runs as a re-run for backward (activation checkpointing) needs it:
// every MLP inside keeps only fc1's output and recomputes GELU in backward
// (MLPImpl::recompute_activation), and the MLP whose output the block only adds into its
// result (Block::residual_mlp) skips computing that unread value (MLPImpl::skip_output; its
// backward runs as usual). Gradients are the same as without it. Restores the flags on exit.
class TT_API LeanRecompute {
 public:
  explicit LeanRecompute(Block& block);
  ~LeanRecompute();
  LeanRecompute(const LeanRecompute&) = delete;
  LeanRecompute& operator=(const LeanRecompute&) = delete;

 private:
  std::vector<std::shared_ptr<MLPImpl>> switched_;
  MLPImpl* unread_ = nullptr;
};

// 9. Saved-tensor hooks, as torch.autograd.graph.saved_tensors_hooks in Python. While a scope
// is alive, every tensor that autograd saves for backward in this thread's forward is given to
// `pack` as `saved` (detached: the same storage, no graph; never modify it in place) with
// `leaf` true for a leaf of the graph or a view of one (a parameter or its weight.t(), the input,
// a constant: memory held elsewhere anyway, so moving it frees nothing; a tensor that needs no
// gradient is a leaf too, even one forward made, as LayerNorm's mean and rstd). pack returns how to get it back: a function
// called in backward (possibly on autograd's thread, more than once with retain_graph) that
// returns a tensor equal to `saved` (shape, dtype, device, values), e.g. read back from host
// memory or disk. Returning an empty function keeps the tensor as autograd would. What pack
// and its function hold lives until autograd frees the saved tensor (after backward).
// Scopes nest on a thread, the innermost wins; a re-run for backward (checkpoint) runs on
// autograd's thread outside any scope. Use it around a block's forward (a block runner) or the
// whole forward (a forward scope, tt/plugin.h). The first scope installs tt's autograd engine,
// LibTorch's own engine that also answers these hooks (torch::autograd::set_default_engine_stub).
using SavedTensorUnpack = std::function<at::Tensor()>;
using SavedTensorPack = std::function<SavedTensorUnpack(const at::Tensor& saved, bool leaf)>;
class TT_API SavedTensorHooks {
 public:
  explicit SavedTensorHooks(SavedTensorPack pack);
  ~SavedTensorHooks();
  SavedTensorHooks(const SavedTensorHooks&) = delete;
  SavedTensorHooks& operator=(const SavedTensorHooks&) = delete;
  static bool active();  // a scope is open on this thread

 private:
  size_t depth_ = 0;
};

}  // namespace nn

// 6. Called once per optimizer step for every trainable parameter that has a gradient, as soon
// as that gradient is complete: in one process during the last micro-batch's backward, right
// after autograd accumulated it (the earlier parameters' hooks run while backward continues
// with the rest: gradient offload, the optimizer step in backward); in a data-parallel run
// after the gradient sync, in parameter order. `index` is the parameter's place in the
// optimizer's parameter list (the model's trainable parameters in order). The hook may read,
// move or replace parameter.grad(); hooks run in the order registered, and one that releases the
// gradient leaves the hooks after it none. Gradient clipping and BEFORE_STEP come after every
// hook and the gradients-complete hooks. Register on INIT, OPTIMIZER or FIT_START.
using GradientReadyHook = std::function<void(size_t index, at::Tensor& parameter)>;
TT_API void add_gradient_ready_hook(State& state, GradientReadyHook hook);

// Called once per step when every gradient-ready hook has run (in a data-parallel run after the
// gradient sync), before gradient clipping, BEFORE_STEP and the step, in the order registered;
// not for a batch dropped before backward. Where a plugin that moved gradients away as they
// landed (gradient offload) gives them back, so that clipping, BEFORE_STEP's handlers (amp's
// unscale, whatever the plugins' order) and the step see them; the meter's gradients figure
// counts what is live after these hooks. Register on INIT, OPTIMIZER or FIT_START.
using GradientsCompleteHook = std::function<void()>;
TT_API void add_gradients_complete_hook(State& state, GradientsCompleteHook hook);

// 11. The optimizer step in backward: a plugin that declares takes_the_step_in_backward() in its
// constructor (tt/plugin.h) registers a gradient-ready hook (6) that updates each parameter,
// usually step_parameter(*state.optimizer, parameter), and then releases its gradient
// (parameter.mutable_grad() = at::Tensor()), so that at most the gradients backward has not reached yet and
// one being stepped are live, instead of all of them. The trainer then takes no step after
// backward; it counts the step, sets the schedule's learning rate on state.optimizer's groups for
// the next (read there by step_parameter), checkpoints state.optimizer, reports the hooks' time as
// the step's optimizer seconds and the most bytes in the parameters' gradients (.grad) at once, when
// each hook ran, as memory.gradients (a gradient autograd still sums before accumulating it, a
// tied weight's share from its other use, is in the peak and its rest).
// BEFORE_STEP still fires, after the update: a veto there fails the run (plugins that may veto
// declare may_skip_steps() and are refused when the pipeline is read, with trainer.grad_clip, a
// wrapper of the final optimizer and a second such plugin). Gradient accumulation works (the hooks
// fire in the last micro-batch's backward); a batch whose loss is not finite is dropped before
// backward, with no parameter updated; an out-of-memory error after some parameters were updated
// is not retried. With several micro-batches the saving is gone: the earlier micro-batches'
// gradients accumulate whole until the last backward; in a data-parallel run too: the gradients
// are complete after the all-reduce (warnings say so).
// step_parameter: the optimizer's own step() applied to `parameter` alone, with its group's
// options (the learning rate included) and its state: `optimizer` is a tt::PerParameterStep or
// one of LibTorch's SGD, Adam, AdamW, Adagrad and RMSprop (tt/optimizer_state.h); refused for
// another optimizer, a parameter that is not one of its own, and a parameter without a gradient
// (a hook that ran before released it: nothing would be updated).
TT_API void step_parameter(torch::optim::Optimizer& optimizer, const at::Tensor& parameter);

// 7. Wraps the model's forward_loss for every micro-batch. `next` computes the loss of the
// hooks registered after this one and finally the model's; a hook may call it and change the
// result (scale it, add a term, e.g. distillation against state.teacher), or not call it and
// compute the loss itself (chunked cross-entropy, from state.model->output_head(micro), 10):
// only the last hook may, as the hooks after one that does not call next never run (refused at
// the first step). Hooks registered first are outermost.
// Forward scopes (amp's autocast) are active around all of them.
using LossHook = std::function<ModelOutput(const Batch& micro, const std::function<ModelOutput(const Batch&)>& next)>;
TT_API void add_loss_hook(State& state, LossHook hook);

// 12. What a plugin holds of its own (gradients moved away, offloaded optimizer state, buffers),
// named in summary.json's memory.held, the printed summary and compare's notes, so that the
// figures say where the memory went. `what` names it ("gradients"); `where`:
//   Tensors  tensors of the training process: in the tensor peak, taken out of its rest
//   File     a memory-mapped file: file-backed pages, outside the tensor peak (RSS may hold some)
//   Host     host memory of a device run (pinned buffers): outside the device's peak
// Call it from a plugin's handler or a hook it registered, as often as the figure changes: the
// largest reported for each (plugin, what) is kept.
enum class Held { Tensors, File, Host };
TT_API void report_held(State& state, const std::string& what, int64_t bytes, Held where);
TT_API const char* to_string(Held where);  // "tensors", "file", "host"

// The micro-batch's loss through the registered loss hooks (the trainer's call).
TT_API ModelOutput forward_loss(State& state, const Batch& micro);

// 8. State::teacher: a plugin may set it on INIT, usually to tt::load_model(path,
// *state.datasets, "plugins.NAME.teacher") (tt/weights.h: a finished run's model, built with the
// shape its checkpoint records), or to any model the registry builds. The trainer then freezes it: moved to the training device, eval mode, no
// parameter requires grad; it is never in the optimizer, the checkpoints or the parameter
// count; its bytes are reported as memory.teacher_bytes. Use it under torch::NoGradGuard.
TT_API void freeze_teacher(State& state);

}  // namespace tt
