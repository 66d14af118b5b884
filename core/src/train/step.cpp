#include "train/step.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "train/grad_sync.h"
#include "train/run_dir.h"
#include "tt/extension.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/optimizer_state.h"
#include "tt/schedule.h"

namespace tt {

namespace {

struct Accumulated {
  bool ok = false;           // false: the batch was dropped (NaN with on_nan: skip)
  bool sum_reduced = false;  // the model's loss is a sum (not weighted by micro-batch share)
};

// The newest checkpoint (this process's, or the one it resumed from) and how to go on from it.
std::string last_checkpoint(const Run& run) {
  const std::string file = run.last_checkpoint_step >= 0
                               ? checkpoint_path(run.state.run_dir / "checkpoints", run.last_checkpoint_step).string()
                               : run.resumed_from;
  if (file.empty()) return "none";
  return file + " (go on from it at a lower rate: " + launch_command(run) + " --resume " + run.state.run_dir.string() +
         " optimizer.lr=LOWER" + launched_as_before(run, "--resume") + ")";
}

// What to change: the learning rate, and the clipping (set, or lower where it is).
std::string lower_rate_or_clip(const Run& run) {
  const Options& T = run.pipeline.trainer;
  return T.is_set("grad_clip") ? detail::cat("Lower optimizer.lr or trainer.grad_clip (", T.get_float("grad_clip"), ")")
                               : std::string("Lower optimizer.lr or set trainer.grad_clip");
}

// A non-finite loss: dropped (on_nan: skip) or an error that says what to try. Dropping cannot
// help once the weights themselves are not finite (an earlier step's update made them so: every
// later loss is NaN): that is the error too.
bool finite_or_dropped(Run& run, double loss) {
  State& s = run.state;
  if (std::isfinite(loss)) return true;
  if (run.pipeline.trainer.get_string("on_nan") == "skip") {
    if (const std::string p = nonfinite_parameter(s); !p.empty())
      TT_FAIL_AS(NumericError, "loss is ", loss, " at step ", s.step + 1, " and the model's parameter '", p,
                 "' holds NaN/inf: an earlier step's update made the weights non-finite, which dropping batches "
                 "(trainer.on_nan=skip) cannot undo. ", lower_rate_or_clip(run), ". Last checkpoint: ", last_checkpoint(run));
    log().warn("loss is {} at step {} (epoch {}, batch {}): batch dropped (trainer.on_nan=skip)", loss, s.step + 1,
               s.epoch, s.batch_in_epoch);
    return false;
  }
  TT_FAIL_AS(NumericError, "loss is ", loss, " at step ", s.step + 1, " (epoch ", s.epoch, ", batch ", s.batch_in_epoch,
             "). ", lower_rate_or_clip(run), ", check the data for NaN/inf, or set trainer.on_nan=skip to drop such "
             "batches. Last checkpoint: ", last_checkpoint(run));
}

}  // namespace

void check_trained_numbers(Run& run, int64_t steps) {
  const int64_t dropped = run.record.dropped_batches;
  TT_CHECK_AS(NumericError, steps == 0 || dropped < steps, "every one of the ", steps,
              " steps had a loss that is not finite and was dropped (trainer.on_nan=skip): nothing was trained. "
              "Check the data and the model's loss for NaN/inf. ", lower_rate_or_clip(run));
  if (dropped > 0) log().warn("{} of {} steps had a loss that is not finite and were dropped (trainer.on_nan=skip)", dropped, steps);
  if (const std::string p = steps > 0 ? nonfinite_parameter(run.state) : ""; !p.empty())
    TT_FAIL_AS(NumericError, "after training, the model's parameter '", p, "' holds NaN/inf: the weights diverged. ",
               lower_rate_or_clip(run), ". Last checkpoint: ", last_checkpoint(run));
}

std::string nonfinite_parameter(const State& s) {
  if (!s.model) return "";
  at::NoGradGuard no_grad;
  for (const auto& p : s.model->named_parameters()) {  // a sum first: no numel-sized temporary for a finite one
    const at::Tensor& t = p.value();
    if (t.defined() && t.is_floating_point() && !std::isfinite(t.sum().item<double>()) && !t.isfinite().all().item<bool>())
      return p.key();
  }
  return "";
}

std::string held_by_plugins(const State& s) {
  std::string held;  // what plugins said they hold in tensors is part of the peak
  for (const auto& h : s.held)
    if (h.where == static_cast<int>(Held::Tensors) && h.bytes > 0)
      held += (held.empty() ? " (plugins hold " : ", ") + format_bytes(h.bytes) + " of it: " + h.plugin + "'s " + h.what;
  return held.empty() ? held : held + ")";
}

namespace {

// Forward and backward over the micro-batches. Mean-reduced losses are weighted by their
// share of the batch, so the accumulated gradient is the full batch's.
Accumulated forward_backward(Run& run) {
  State& s = run.state;
  const std::string& model_name = run.pipeline.model.name;
  Accumulated acc;
  run.zero_grads();
  const Batch& batch = s.batch;
  s.micro_count = (batch.size + s.micro_batch_size - 1) / s.micro_batch_size;
  s.batch_loss = 0;
  for (s.micro_index = 0; s.micro_index < s.micro_count; ++s.micro_index) {
    const int64_t begin = s.micro_index * s.micro_batch_size, end = std::min(batch.size, begin + s.micro_batch_size);
    s.micro = s.micro_count == 1 ? batch : batch.slice(begin, end);
    run.host.fire(Event::BEFORE_FORWARD, s);
    const int64_t before = run.live();
    {
      auto scopes = run.host.enter_forward_scopes(s);
      s.output = with_context(detail::cat("model (", model_name, ") forward at step ", s.step + 1),
                              [&] { return tt::forward_loss(s, s.micro); });  // through the loss hooks
      while (!scopes.empty()) scopes.pop_back();  // exit in reverse order
    }
    run.step_items += s.output.items;
    run.host.fire(Event::AFTER_FORWARD, s);
    TT_CHECK(s.output.loss.defined(), "model (", model_name, ") returned no loss (ModelOutput::loss is undefined)");
    TT_CHECK(s.output.loss.numel() == 1, "model (", model_name, ") returned a loss of shape ", s.output.loss.sizes(),
             ", not a scalar: reduce it (mean or sum) and say which in ModelOutput::reduction");
    acc.sum_reduced = run.record.loss_summed = s.output.reduction != Reduction::Mean;
    const double weight = acc.sum_reduced ? 1.0 : static_cast<double>(s.micro.size) / static_cast<double>(batch.size);
    const double raw = s.output.loss.item<double>();
    if (!finite_or_dropped(run, raw)) {
      run.zero_grads();
      s.output = {};
      return acc;
    }
    s.batch_loss += raw * weight;
    s.loss = weight == 1.0 ? s.output.loss : s.output.loss * weight;
    run.host.fire(Event::AFTER_LOSS, s);
    s.memory.activations = std::max(s.memory.activations, run.live() - before);
    run.host.fire(Event::BEFORE_BACKWARD, s);
    if (const std::string& by = run.host.loss_replaced_by(); !by.empty()) {
      // A plugin's loss (AFTER_LOSS or BEFORE_BACKWARD) is checked as the model's was, naming it.
      const std::string who = "plugin '" + by + "' replaced the loss at step " + std::to_string(s.step + 1);
      TT_CHECK(s.loss.defined(), who, " with an undefined tensor");
      TT_CHECK(s.loss.numel() == 1, who, " with one of shape ", s.loss.sizes(), ", not a scalar: reduce it");
      TT_CHECK(s.loss.is_floating_point(), who, " with a tensor of ", s.loss.scalar_type(), ", not a floating one");
      TT_CHECK(s.loss.requires_grad(), who, " with one that no gradient flows from (detached, or computed under "
               "torch::NoGradGuard)");
      if (const double v = s.loss.item<double>(); !std::isfinite(v)) {
        if (run.pipeline.trainer.get_string("on_nan") != "skip")
          TT_FAIL_AS(NumericError, who, " with one that is ", v, " (the model's was ", raw, "): fix the plugin, or set "
                     "trainer.on_nan=skip to drop such batches");
        log().warn("{} with one that is {}: batch dropped (trainer.on_nan=skip)", who, v);
        run.zero_grads();
        s.loss = at::Tensor();
        s.output = {};
        return acc;
      }
    }
    TT_CHECK(s.loss.requires_grad(), "model (", model_name, ") returned a loss at step ", s.step + 1,
             " that no gradient flows from: it was detached (.item(), .detach()), computed under torch::NoGradGuard, "
             "or from no trainable parameter");
    run.gradient_ready.arm(s.micro_index + 1 == s.micro_count);
    with_context(detail::cat("backward at step ", s.step + 1), [&] {
      s.loss.backward();
      return 0;
    });
    run.gradient_ready.arm(false);
    s.loss = at::Tensor();
    s.output = {};
    run.host.fire(Event::AFTER_BACKWARD, s);
  }
  s.micro = {};
  acc.ok = true;
  return acc;
}

// forward_backward, retried after an out-of-memory error that a plugin handled on OOM (e.g.
// oom-guard halving the micro-batch). The retry starts from the random state the batch began
// with, so it draws the same dropout masks as if it had fitted the first time. Only where a
// retry can happen: a plugin to handle it, and an error to handle (the meter's cap on CPU, the
// device's allocator on CUDA).
Accumulated forward_backward_retrying(Run& run) {
  State& s = run.state;
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  const bool may_retry = !run.host.plugins().empty() && (run.meter.cap() > 0 || s.device.is_cuda());
  // Kept in a vector, not the tensor get_state returns: its 5,056 bytes, live through the step,
  // were in the peak of every capped run with a plugin (the planner's probes had no cap).
  std::vector<uint8_t> rng_at_start;
  if (may_retry) {
    const at::Tensor state = gen.get_state();
    rng_at_start.assign(state.data_ptr<uint8_t>(), state.data_ptr<uint8_t>() + state.numel());
  }
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0 && !rng_at_start.empty())
      gen.set_state(at::from_blob(rng_at_start.data(), {static_cast<int64_t>(rng_at_start.size())}, at::kByte));
    try {
      return forward_backward(run);
    } catch (const c10::OutOfMemoryError& e) {
      std::string what = e.what();
      s.oom_message = first_line(what);
      const size_t fired = run.gradient_ready.fired_count();
      run.gradient_ready.reset();
      s.loss = at::Tensor();
      s.output = {};
      s.micro = {};
      run.zero_grads();
      run.meter.release_cache();
      s.retry_batch = false;
      // Hooks that acted on gradients as they landed (the optimizer step in backward) did work
      // that a re-run of the batch would do again: no retry then.
      TT_CHECK_AS(OutOfMemory, fired == 0, "out of memory at step ", s.step + 1, " in backward (micro-batch ",
                  s.micro_batch_size, "): ", s.oom_message, ", after the gradient-ready hooks (plugins: ",
                  run.host.names(), ") had run for ", fired, " of ", run.trainable.size(),
                  " parameters, so the batch cannot be re-run without doing their work twice. Peak tensor bytes "
                  "so far ", format_bytes(run.peak()), held_by_plugins(s),
                  ". Fixes: lower trainer.micro_batch_size, or use [checkpoint] / [amp] to need less activation memory.");
      run.host.fire(Event::OOM, s);
      if (!s.retry_batch || attempt >= 16) {
        TT_FAIL_AS(OutOfMemory, "out of memory at step ", s.step + 1, " (epoch ", s.epoch, ", batch ", s.batch_in_epoch,
                   ", micro-batch ", s.micro_batch_size, "): ", s.oom_message, ". Peak tensor bytes so far ",
                   format_bytes(run.peak()), held_by_plugins(s),
                   ". Fixes: lower trainer.micro_batch_size (gradients accumulate to the same batch), "
                   "add plugins: [oom-guard] to do that automatically, or use [checkpoint] / [amp] to need less "
                   "activation memory.");
      }
      log().warn("out of memory at step {}; a plugin handled it, retrying the batch (micro-batch {})", s.step + 1,
                 s.micro_batch_size);
    }
  }
}

// A step taken or skipped: counted, and the schedule's learning rate set for the next one.
void next_step(Run& run) {
  State& s = run.state;
  s.last_step.skipped = s.skip_step;
  if (s.skip_step) ++s.skipped_steps;
  ++s.step;
  run.lr_epoch_pos = static_cast<double>(s.epoch) +
                     static_cast<double>(s.batch_in_epoch) / static_cast<double>(s.batches_per_epoch);
  run.set_lr(run.schedule->lr({s.step, s.total_steps, run.lr_epoch_pos, run.base_lr}));
}

// Clip, step (unless skipped), and set the schedule's learning rate for the next step.
void optimizer_step(Run& run) {
  State& s = run.state;
  const Options& T = run.pipeline.trainer;
  // A data-parallel optimizer that synchronizes the gradients itself (zero1: gradient_sync off)
  // clips them once summed; here each rank holds only its own part.
  if (!s.skip_step && T.is_set("grad_clip") && (s.gradient_sync || s.world_size == 1)) {
    TT_CHECK_AS(ConfigError, run.gradient_ready.released() == 0, "trainer.grad_clip is set, but gradient-ready hooks "
                "(tt::add_gradient_ready_hook; plugins: ", run.host.names(), ") released ", run.gradient_ready.released(),
                " of ", run.trainable.size(), " gradients as they landed, before the step: the clipping norm cannot "
                "cover them (it would read 0). Unset trainer.grad_clip, or clip where the hook uses the gradient.");
    s.last_step.grad_norm = torch::nn::utils::clip_grad_norm_(run.trainable, T.get_float("grad_clip"));
  }
  s.last_step.lr = s.lr;
  if (!s.skip_step && run.host.steps_in_backward()) {  // taken by the gradient-ready hooks
    const double seconds = run.gradient_ready.take_seconds();
    run.record.optimizer_times.push_back(seconds);
    s.last_step.optimizer_seconds = seconds;
    if (!run.optimizer_measured) {
      const int64_t counted = optimizer_state_bytes(*s.optimizer);
      if (counted < 0)
        log().warn("the optimizer's state ({}) cannot be counted, and its step ran in backward, where what it "
                   "creates cannot be told from the activations: memory.optimizer_state_bytes is 0",
                   c10::demangle(typeid(*s.optimizer).name()));
      s.memory.optimizer_state = std::max<int64_t>(0, counted);
      run.optimizer_measured = true;
    }
  } else if (!s.skip_step) {
    const int64_t before = run.live();
    const auto t0 = Clock::now();
    s.optimizer->step();
    const double seconds = seconds_since(t0);
    run.record.optimizer_times.push_back(seconds);
    s.last_step.optimizer_seconds = seconds;
    if (!run.optimizer_measured) {  // counted from the state where tt knows its tensors, else what the step left
      const int64_t counted = optimizer_state_bytes(*s.optimizer);
      s.memory.optimizer_state = counted >= 0 ? counted : std::max<int64_t>(0, run.live() - before);
      run.optimizer_measured = true;
    }
  }
  next_step(run);
}

// The model's own fused step (Model::fused_step), where nothing else is to see the step in
// between: no plugins, no gradient clipping, one micro-batch, one process. False: the model
// left the step to the usual path. The step's figures are measured as the usual path's are:
// the bytes it leaves live are the optimizer's state (counted from the state itself) and the
// model's workspace (activations); there are no gradient tensors.
bool fused_step(Run& run) {
  State& s = run.state;
  if (!run.host.plugins().empty() || run.pipeline.trainer.is_set("grad_clip") || run.sync ||
      s.micro_batch_size < s.batch.size)
    return false;
  const int64_t before = run.live();
  const int64_t state_before = run.gradients_measured ? -1 : optimizer_state_bytes(*s.optimizer);
  const auto t0 = Clock::now();
  FusedStep f = with_context(detail::cat("model (", run.pipeline.model.name, ") fused step at step ", s.step + 1),
                             [&] { return s.model->fused_step(s.batch, *s.optimizer); });
  if (!f.stepped) return false;
  TT_CHECK(f.output.loss.defined() && f.output.loss.numel() == 1, "model (", run.pipeline.model.name,
           ") returned no scalar loss from its fused step");
  run.step_items += f.output.items;
  run.record.loss_summed = f.output.reduction != Reduction::Mean;
  const double loss = f.output.loss.item<double>();
  s.skip_step = s.last_step.dropped = !finite_or_dropped(run, loss);  // the model left its parameters as they were
  s.batch_loss = loss;
  // The first step of this process: what it left live is the optimizer state it created (all
  // of it in a new run; none after a resume, whose checkpoint brought the state) and the model's
  // workspace for that step's batch (the activations figure).
  if (!run.gradients_measured && !s.skip_step) {
    const int64_t grown = std::max<int64_t>(0, run.live() - before);
    const int64_t state_after = optimizer_state_bytes(*s.optimizer);
    const int64_t state_grown = state_before >= 0 && state_after >= 0 ? state_after - state_before
                                : run.optimizer_measured                ? 0
                                                                        : grown;
    if (!run.optimizer_measured) s.memory.optimizer_state = state_after >= 0 ? state_after : grown;
    s.memory.activations = std::max(s.memory.activations, std::max<int64_t>(0, grown - state_grown));
    run.optimizer_measured = run.gradients_measured = true;
  }
  const double seconds = seconds_since(t0);
  run.record.optimizer_times.push_back(seconds);
  s.last_step.optimizer_seconds = seconds;
  run.host.fire(Event::BEFORE_STEP, s);
  s.last_step.lr = s.lr;
  next_step(run);
  run.host.fire(Event::AFTER_STEP, s);
  return true;
}

// Forward and backward over the micro-batches, (gradient sync), the optimizer step.
void usual_step(Run& run) {
  State& s = run.state;
  Accumulated acc = forward_backward_retrying(run);
  if (run.sync) acc.ok = run.sync->sync(acc.ok, acc.sum_reduced);
  if (acc.ok && run.gradient_ready.active()) run.gradient_ready.complete();
  if (!run.gradients_measured && acc.ok) {  // all of them after backward, or the most live at once
    s.memory.gradients = std::max(gradient_bytes(run.trainable), run.gradient_ready.most_gradient_bytes());
    run.gradient_ready.measure_gradients(false);
    run.gradients_measured = true;
  }
  const Plugin* stepper = run.host.steps_in_backward();
  if (stepper && acc.ok && run.sync && run.accumulation_warned == 0) {
    run.accumulation_warned = -1;
    log().warn("plugin '{}' takes the optimizer step in backward, but in a data-parallel run the gradients are "
               "complete only after their all-reduce, when every one is live: the parameters are stepped one by one "
               "then, and the step in backward saves no memory", stepper->name());
  } else if (stepper && acc.ok && !run.sync && s.micro_count > 1 && s.micro_count != run.accumulation_warned) {
    run.accumulation_warned = s.micro_count;
    log().warn("plugin '{}' takes the optimizer step in backward, but step {} runs {} micro-batches of {} "
               "(trainer.micro_batch_size, or oom-guard after an out-of-memory error): the earlier ones' gradients "
               "accumulate whole until the last backward, so every gradient is live and the step in backward saves "
               "no memory; it does with one micro-batch per step", stepper->name(), s.step + 1, s.micro_count,
               s.micro_batch_size);
  }
  if (!acc.ok) s.skip_step = s.last_step.dropped = true;
  run.host.fire(Event::BEFORE_STEP, s);
  if (stepper && s.skip_step && !s.last_step.dropped) {
    const std::string& by = run.host.vetoed_by();
    TT_FAIL_AS(ConfigError,
               by.empty() ? std::string("state.skip_step was set before BEFORE_STEP, skipping step ")
                          : "plugin '" + by + "' skipped step ",
               s.step + 1, by.empty() ? "" : " on BEFORE_STEP (state.skip_step)", ", but plugin '", stepper->name(),
               "' took that step in backward (", stepper->step_in_backward(), "): the parameters are updated "
               "already. A plugin that may skip steps declares may_skip_steps() (tt/plugin.h), and is then refused "
               "beside it when the pipeline is read; remove one of them from plugins");
  }
  optimizer_step(run);
  run.host.fire(Event::AFTER_STEP, s);
}

}  // namespace

int64_t gradient_bytes(const std::vector<at::Tensor>& parameters) {
  int64_t n = 0;
  for (const auto& p : parameters) {
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (g.is_sparse()) n += static_cast<int64_t>(g._indices().nbytes() + g._values().nbytes());
    else n += static_cast<int64_t>(g.nbytes());
  }
  return n;
}

int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t n = 0;
  const auto add = [&n](const at::Tensor& t) {
    if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  };
  if (auto* st = dynamic_cast<StateTensors*>(&optimizer)) {
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params())
        for (const at::Tensor* t : st->state_tensors(p)) add(*t);
    return n;
  }
  // torch's own optimizers, whose state types are known (a wrapper's state lives elsewhere)
  if (!dynamic_cast<torch::optim::AdamW*>(&optimizer) && !dynamic_cast<torch::optim::Adam*>(&optimizer) &&
      !dynamic_cast<torch::optim::SGD*>(&optimizer))
    return -1;
  const auto moments = [&add](const auto& a) {
    for (const at::Tensor* t : {&a.exp_avg(), &a.exp_avg_sq(), &a.max_exp_avg_sq()}) add(*t);
  };
  for (const auto& entry : optimizer.state()) {
    const auto* state = entry.second.get();
    if (const auto* a = dynamic_cast<const torch::optim::AdamWParamState*>(state)) moments(*a);
    else if (const auto* b = dynamic_cast<const torch::optim::AdamParamState*>(state)) moments(*b);
    else if (const auto* m = dynamic_cast<const torch::optim::SGDParamState*>(state)) add(m->momentum_buffer());
  }
  return n;
}

void train_step(Run& run, Batch batch, Clock::time_point started) {
  State& s = run.state;
  const int64_t examples = batch.size;
  s.batch = std::move(batch);
  s.skip_step = false;
  s.metrics.clear();
  s.last_step = {};
  run.step_items = 0;
  run.host.fire(Event::BATCH_START, s);

  if (!fused_step(run)) usual_step(run);

  s.last_step.seconds = seconds_since(started);
  s.last_step.examples = run.sync ? run.sync->global_examples() : examples;  // the whole run's throughput
  run.record.step_times.push_back(s.last_step.seconds);
  run.dropped_in_a_row = s.last_step.dropped ? run.dropped_in_a_row + 1 : 0;
  if (s.last_step.dropped) {  // no loss to report or average (metrics.jsonl: null)
    s.batch_loss = std::numeric_limits<double>::quiet_NaN();
    ++run.record.dropped_batches;
  } else {
    run.epoch_loss_sum += s.batch_loss;
    ++run.epoch_batches;
  }
  run.record.step_losses.push_back(s.batch_loss);
  run.record.step_examples.push_back(s.last_step.examples);
  run.host.fire(Event::BATCH_END, s);
}

}  // namespace tt
