// The trainer-side extension points of tt/extension.h (gradient ready, loss hook, teacher) and
// the model-side switches it declares (keep float32, lean re-run).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint_reader.h"
#include "step_in_backward.h"
#include "test_support.h"
#include "tt/autocast.h"
#include "tt/checkpoint.h"
#include "tt/extension.h"
#include "tt/meter.h"
#include "tt/optimizer_state.h"
#include "tt/options.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"
#include "tt/trainer.h"

namespace fs = std::filesystem;
using tt::Event;
using tt::test::OnEvent;

namespace {



std::vector<torch::Tensor> clone_grads(tt::State& s) {
  std::vector<torch::Tensor> g;
  for (const auto& p : s.optimizer->param_groups()[0].params()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace

TEST(Extension, GradientReadyFiresOncePerParameterWithTheCompleteGradient) {
  for (int micro : {16, 4}) {  // one micro-batch, and four accumulated
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 3\n  micro_batch_size: " + std::to_string(micro) + "\n"),
                  {out / "run", false, true});
    std::vector<std::vector<torch::Tensor>> at_hook(3);  // per step, per parameter index
    std::vector<int> micro_at_hook;
    t.add_plugin(std::make_unique<OnEvent>(Event::INIT, [&](tt::State& s) {
      tt::add_gradient_ready_hook(s, [&, state = &s](size_t index, at::Tensor& p) {
        auto& step = at_hook.at(static_cast<size_t>(state->step));
        if (step.size() <= index) step.resize(index + 1);
        EXPECT_FALSE(step[index].defined()) << "fired twice for parameter " << index;
        step[index] = p.grad().clone();
        micro_at_hook.push_back(static_cast<int>(state->micro_index));
      });
    }));
    std::vector<std::vector<torch::Tensor>> at_step;
    t.add_plugin(std::make_unique<OnEvent>(Event::BEFORE_STEP, [&](tt::State& s) { at_step.push_back(clone_grads(s)); }));
    t.fit();
    ASSERT_EQ(at_step.size(), 3u);
    for (size_t step = 0; step < 3; ++step) {
      ASSERT_EQ(at_hook[step].size(), at_step[step].size()) << "micro " << micro;
      for (size_t i = 0; i < at_step[step].size(); ++i)
        EXPECT_TRUE(torch::equal(at_hook[step][i], at_step[step][i])) << "step " << step << " parameter " << i;
    }
    // fired during the last micro-batch's backward
    for (int m : micro_at_hook) EXPECT_EQ(m, 16 / micro - 1);
  }
}

// A hook that releases each gradient as it lands (the optimizer step in backward) leaves
// gradient clipping nothing to measure: trainer.grad_clip is refused at the first step, not
// applied to no gradient with a norm of 0; given back before clipping reads them (on BEFORE_STEP
// here), they are clipped.
TEST(Extension, GradientReadyHooksThatReleaseGradientsRefuseGradientClipping) {
  const auto run = [](const std::string& trainer, bool give_back_on_before_step = false) {
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(tt::test::regression_pipeline(out, trainer), {out / "run", false, true});
    auto stash = std::make_shared<std::vector<at::Tensor>>();
    auto releaser = std::make_unique<OnEvent>(Event::INIT, [stash](tt::State& s) {
      tt::add_gradient_ready_hook(s, [stash](size_t, at::Tensor& p) {
        stash->push_back(p.grad());
        p.mutable_grad() = at::Tensor();
      });
    });
    releaser->set_name("in-backward");
    t.add_plugin(std::move(releaser));
    if (give_back_on_before_step)  // what clipping then reads is back
      t.add_plugin(std::make_unique<OnEvent>(Event::BEFORE_STEP, [stash](tt::State& s) {
        auto& params = s.optimizer->param_groups()[0].params();
        for (auto& p : params)
          for (auto& g : *stash)
            if (g.sizes() == p.sizes() && !p.grad().defined()) {
              p.mutable_grad() = g;
              break;
            }
        stash->clear();
      }));
    const std::string error = tt::test::refusal_of([&] { t.fit(); });
    return std::make_pair(error, t.state().step);
  };
  const auto [clipped, clipped_steps] = run("  max_steps: 2\n  grad_clip: 1.0\n");
  EXPECT_HAS(clipped, "trainer.grad_clip is set, but gradient-ready hooks (tt::add_gradient_ready_hook; plugins: "
                      "in-backward) released ");
  EXPECT_HAS(clipped, "gradients as they landed, before the step");
  EXPECT_EQ(clipped_steps, 0);
  const auto [plain, plain_steps] = run("  max_steps: 2\n");
  EXPECT_EQ(plain, "");
  EXPECT_EQ(plain_steps, 2);
  const auto [given_back, given_back_steps] = run("  max_steps: 2\n  grad_clip: 1.0\n", true);
  EXPECT_EQ(given_back, "");
  EXPECT_EQ(given_back_steps, 2);
}

// Gradient offload as a plugin builds it on the gradient-ready and gradients-complete hooks: each
// gradient moved away as it lands and given back when the step's gradients are complete. A plugin
// listed before it that acts on gradients on BEFORE_STEP (as loss scaling's unscale does) and
// trainer.grad_clip see them all, so the run trains as without it, and the meter counts every
// gradient (all are live again at the step).
TEST(Extension, GradientsGivenBackWhenCompleteAreSeenByClippingAndBeforeStep) {
  for (int micro : {16, 4}) {
    SCOPED_TRACE("micro-batch " + std::to_string(micro));
    const auto fit = [&](bool offload) {
      auto out = tt::test::temp_dir("ext");
      tt::Trainer t(tt::test::regression_pipeline(
                        out, "  max_steps: 4\n  grad_clip: 0.05\n  micro_batch_size: " + std::to_string(micro) + "\n"),
                    {out / "run", false, true});
      auto halve = std::make_unique<OnEvent>(Event::BEFORE_STEP, [](tt::State& s) {
        for (auto& p : s.optimizer->param_groups()[0].params()) {
          ASSERT_TRUE(p.grad().defined()) << "a gradient not back by BEFORE_STEP";
          p.mutable_grad().mul_(0.5);
        }
      });
      halve->set_name("halve");
      t.add_plugin(std::move(halve));
      auto stash = std::make_shared<std::map<size_t, torch::Tensor>>();
      if (offload) {
        auto mover = std::make_unique<OnEvent>(Event::INIT, [stash](tt::State& s) {
          tt::add_gradient_ready_hook(s, [stash](size_t index, at::Tensor& p) {
            (*stash)[index] = p.grad().clone();  // "elsewhere" (a host or disk copy on a device)
            p.mutable_grad() = at::Tensor();
          });
          tt::add_gradients_complete_hook(s, [stash, &s] {
            auto& params = s.optimizer->param_groups()[0].params();
            for (auto& [index, g] : *stash) params[index].mutable_grad() = std::move(g);
            stash->clear();
          });
        });
        mover->set_name("grad-offload");
        t.add_plugin(std::move(mover));
      }
      t.fit();
      return std::make_tuple(t.step_losses(), tt::test::params_of(t), t.state().memory.gradients);
    };
    const auto [plain_losses, plain_params, plain_gradients] = fit(false);
    const auto [losses, params, gradients] = fit(true);
    ASSERT_EQ(losses.size(), 4u);
    EXPECT_EQ(losses, plain_losses);
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], plain_params[i])) << i;
    EXPECT_EQ(gradients, plain_gradients);
    EXPECT_GT(gradients, 0);
  }
}

// 12. What a plugin reports holding is kept per (plugin, what), its largest figure, attributed to
// the plugin from its handlers and from the hooks it registered; in tensors it leaves the rest of
// the peak (the same 1 MiB held unreported is in the rest), elsewhere it is only named; one name in
// two places is refused.
TEST(Extension, WhatAPluginReportsHoldingIsNamedAndTakenOutOfTheRest) {
  const auto fit = [](bool report) {
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 3\n"), {out / "run", false, true});
    auto buffer = std::make_shared<torch::Tensor>();
    auto holder = std::make_unique<OnEvent>(Event::FIT_START, [buffer, report](tt::State& s) {
      *buffer = torch::ones({1 << 20}, torch::kUInt8);  // 1 MiB held through the fit
      if (!report) return;
      tt::report_held(s, "buffer", 512 << 10, tt::Held::Tensors);
      tt::report_held(s, "buffer", 1 << 20, tt::Held::Tensors);  // the largest is kept
      tt::report_held(s, "scratch file", 3 << 20, tt::Held::File);
      tt::add_gradient_ready_hook(s, [&s](size_t, at::Tensor&) { tt::report_held(s, "from a hook", 16, tt::Held::Host); });
    });
    holder->set_name("holder");
    t.add_plugin(std::move(holder));
    t.fit();
    return std::make_tuple(tt::test::summary_of(out / "run")["memory"], t.state().held, t.state().memory.held);
  };
  const auto [plain, plain_held, plain_memory_held] = fit(false);
  const auto [reported, held, memory_held] = fit(true);
  EXPECT_TRUE(plain_held.empty());
  EXPECT_FALSE(plain.contains("held"));
  EXPECT_EQ(reported["held"], nlohmann::json::parse(R"([
      {"plugin": "holder", "what": "buffer", "bytes": 1048576, "where": "tensors"},
      {"plugin": "holder", "what": "scratch file", "bytes": 3145728, "where": "file"},
      {"plugin": "holder", "what": "from a hook", "bytes": 16, "where": "host"}])"));
  EXPECT_EQ(reported["held_bytes"], 1 << 20);
  EXPECT_EQ(held.size(), 3u);
  EXPECT_EQ(plain_memory_held, 0);
  EXPECT_EQ(memory_held, 1 << 20) << "the state's breakdown (profile-memory's) as summary.json's";
  // the rest is the peak less the parts and what is held in tensors; the two runs' peaks may differ by
  // what the prefetching loader happens to hold at that moment (a few hundred bytes)
  for (const auto* m : {&plain, &reported})
    EXPECT_EQ((*m)["rest_bytes"].get<int64_t>(),
              (*m)["peak_tensor_bytes"].get<int64_t>() - (*m)["parameters_bytes"].get<int64_t>() -
                  (*m)["gradients_bytes"].get<int64_t>() - (*m)["optimizer_state_bytes"].get<int64_t>() -
                  (*m)["activations_bytes"].get<int64_t>() - (*m).value("held_bytes", int64_t{0}));
  EXPECT_NEAR(static_cast<double>(reported["rest_bytes"].get<int64_t>()),
              static_cast<double>(plain["rest_bytes"].get<int64_t>() - (1 << 20)), 16 << 10);
  tt::State s;
  tt::report_held(s, "buffer", 8, tt::Held::Tensors);
  EXPECT_HAS(tt::test::message_of<tt::Error>([&] { tt::report_held(s, "buffer", 8, tt::Held::File); }, "an Error"),
             "report_held: 'buffer' of plugin '' was reported in tensors and now in file: give each place its own name");
}

// An out-of-memory error in backward after gradient-ready hooks ran for some parameters is not
// retried (a re-run would do their work twice, e.g. apply an update again), whatever a plugin
// would say on OOM.
TEST(Extension, AnOutOfMemoryAfterGradientReadyHooksRanIsNotRetried) {
  const auto run = [](int throw_at_call) {
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 2\n"), {out / "run", false, true});
    auto calls = std::make_shared<int>(0);
    auto retries = std::make_shared<int>(0);
    t.add_plugin(std::make_unique<OnEvent>(Event::INIT, [calls, throw_at_call](tt::State& s) {
      tt::add_gradient_ready_hook(s, [calls, throw_at_call](size_t, at::Tensor&) {
        if (++*calls == throw_at_call) TORCH_CHECK_WITH(OutOfMemoryError, false, "test: out of memory in a hook");
      });
    }));
    t.add_plugin(std::make_unique<OnEvent>(Event::OOM, [retries](tt::State& s) {
      ++*retries;
      s.retry_batch = *retries < 3;
    }));
    std::string error;
    try {
      t.fit();
    } catch (const tt::OutOfMemory& e) {
      error = e.what();
    }
    return std::make_tuple(error, *retries, t.state().step);
  };
  const auto [error, retries, steps] = run(2);
  EXPECT_HAS(error, "out of memory at step 1 in backward (micro-batch 16): test: out of memory in a hook, after the "
                    "gradient-ready hooks (plugins: ");
  EXPECT_HAS(error, ") had run for 2 of ");
  EXPECT_EQ(retries, 0) << "no plugin was offered a retry";
  EXPECT_EQ(steps, 0);
}

namespace {
tt::Pipeline regression_with(const fs::path& out, const std::string& optimizer, const std::string& trainer) {
  tt::test::register_test_components();
  return tt::parse_pipeline("name: reg\nseed: 1\ndata: {name: test-regression-data}\nmodel: {name: test-regression}\n"
                            "optimizer: " + optimizer + "\nschedule: {name: cosine, warmup_steps: 2}\n"
                            "trainer:\n  batch_size: 16\n  threads: 1\n  progress: off\n" + trainer +
                                "output:\n  dir: " + out.string() + "\n  plots: false\n",
                            "reg.yaml");
}
}  // namespace

// 11. The optimizer step in backward (tests/support/step_in_backward.h: step_parameter in a
// gradient-ready hook, the gradient released) trains exactly as the step after backward, with
// each of tt's optimizers, a schedule and accumulated micro-batches, and reports fewer gradient
// bytes live: with one micro-batch the largest gradient alone (each is released before the next
// lands); accumulated, all of them (the earlier micro-batches' wait for the last backward).
TEST(Extension, TheStepInBackwardTrainsAsTheStepAfterBackwardWithFewerGradientsLive) {
  for (const std::string optimizer : {"{name: sgd, lr: 0.05, momentum: 0.9}", "{name: adamw, lr: 0.05}",
                                      "{name: adamw, lr: 0.05, fused: false}", "{name: adam, lr: 0.05, weight_decay: 0.1}"})
    for (int micro : {16, 4}) {
      SCOPED_TRACE(optimizer + ", micro-batch " + std::to_string(micro));
      const auto fit = [&](bool in_backward) {
        auto out = tt::test::temp_dir("ext");
        tt::Trainer t(regression_with(out, optimizer, "  max_steps: 6\n  micro_batch_size: " + std::to_string(micro) + "\n"),
                      {out / "run", false, true});
        if (in_backward) t.add_plugin(std::make_unique<tt::test::StepInBackward>());
        t.fit();
        return std::make_tuple(t.step_losses(), tt::test::params_of(t), t.state().memory, t.state().lr,
                               tt::test::read_file(out / "run" / "log.txt"));
      };
      const auto [plain_losses, plain_params, plain_memory, plain_lr, plain_log] = fit(false);
      const auto [losses, params, memory, lr, log] = fit(true);
      // accumulated micro-batches keep every gradient live, and the run says so
      EXPECT_EQ(log.find("saves no memory") != std::string::npos, micro != 16) << log;
      if (micro != 16)
        EXPECT_HAS(log, "plugin 'step-in-backward' takes the optimizer step in backward, but step 1 runs 4 micro-batches "
                        "of 4 (trainer.micro_batch_size, or oom-guard after an out-of-memory error)");
      ASSERT_EQ(losses.size(), 6u);
      EXPECT_EQ(losses, plain_losses);
      ASSERT_EQ(params.size(), plain_params.size());
      int64_t largest = 0, all = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::equal(params[i], plain_params[i])) << "parameter " << i;
        largest = std::max<int64_t>(largest, static_cast<int64_t>(params[i].nbytes()));
        all += static_cast<int64_t>(params[i].nbytes());
      }
      EXPECT_NE(losses.front(), losses.back()) << "it trained";
      EXPECT_EQ(lr, plain_lr);
      EXPECT_EQ(memory.optimizer_state, plain_memory.optimizer_state);
      EXPECT_EQ(plain_memory.gradients, all);
      EXPECT_EQ(memory.gradients, micro == 16 ? largest : all);
    }
}

// What cannot be beside a step taken in backward is refused before training (the same check
// refuses a pipeline's plugins when it is read: the transformer's test runs --dry-run), each
// naming both sides, the stepping plugin's own declarations included; a veto on BEFORE_STEP that
// no plugin declared fails at the step it happens, naming who vetoed; a plugin that declares the
// step but registers no hook of its own fails before the first step.
TEST(Extension, TheStepInBackwardIsRefusedBesideWhatNeedsTheStepAfterBackward) {
  class Skipper : public tt::Plugin {
   public:
    Skipper() {
      set_name("skipper");
      may_skip_steps("it skips steps whose gradients overflowed");
    }
  };
  class Wrapper : public tt::Plugin {
   public:
    Wrapper() {
      set_name("wrapper");
      must_wrap_the_final_optimizer("it moves the state of the optimizer it is given");
    }
  };
  class NoHook : public tt::Plugin {
   public:
    NoHook() {
      set_name("no-hook");
      takes_the_step_in_backward("it says so");
    }
  };
  class SkippingStepper : public tt::test::StepInBackward {
   public:
    SkippingStepper() : tt::test::StepInBackward("both") { may_skip_steps("it also vetoes"); }
  };
  struct Case {
    std::string trainer;
    std::function<void(tt::Trainer&)> add;
    std::string expect;
  };
  const std::string taken = "'step-in-backward' takes the optimizer step in backward (it updates each parameter as "
                            "its gradient lands)";
  const auto stepper = [](tt::Trainer& t) { t.add_plugin(std::make_unique<tt::test::StepInBackward>()); };
  for (const Case& c : std::vector<Case>{
           {"  grad_clip: 1.0\n", stepper,
            "trainer.grad_clip is set, but plugin " + taken + ": clipping by the norm of all gradients needs every "
            "gradient before any parameter is updated. Unset trainer.grad_clip, or remove 'step-in-backward' from plugins"},
           {"", [&](tt::Trainer& t) { stepper(t); t.add_plugin(std::make_unique<Wrapper>()); },
            "plugins: 'wrapper' wraps the final optimizer's step (it moves the state of the optimizer it is given), but " +
                taken + ", one parameter at a time, so that step never runs: remove one of them from plugins (the "
                "list is [step-in-backward, wrapper])"},
           {"", [&](tt::Trainer& t) { t.add_plugin(std::make_unique<Skipper>()); stepper(t); },
            "plugins: 'skipper' may skip a step after backward (it skips steps whose gradients overflowed), but " + taken +
                ", before that: the update could not be undone; remove one of them from plugins (the list is "
                "[skipper, step-in-backward])"},
           {"", [&](tt::Trainer& t) { stepper(t); t.add_plugin(std::make_unique<tt::test::StepInBackward>("again")); },
            "plugins: " + taken + ", and so does 'again' (it updates each parameter as its gradient lands): each would "
            "update every parameter; remove one of them from plugins (the list is [step-in-backward, again])"},
           {"", [&](tt::Trainer& t) { t.add_plugin(std::make_unique<SkippingStepper>()); },
            "plugins: 'both' may skip a step after backward (it also vetoes), but 'both' takes the optimizer step in "
            "backward (it updates each parameter as its gradient lands), before that: the update could not be "
            "undone; remove one of them from plugins (the list is [both])"},
       }) {
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(regression_with(out, "{name: sgd, lr: 0.05}", "  max_steps: 2\n" + c.trainer), {out / "run", false, true});
    c.add(t);
    EXPECT_EQ(tt::test::refusal_of([&] { t.fit(); }), c.expect);
    EXPECT_EQ(t.state().step, 0);
  }
  {  // an undeclared veto: the update happened already
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(regression_with(out, "{name: sgd, lr: 0.05}", "  max_steps: 3\n"), {out / "run", false, true});
    stepper(t);
    auto veto = std::make_unique<OnEvent>(Event::BEFORE_STEP, [](tt::State& s) { s.skip_step = s.step == 1; });
    veto->set_name("veto");
    t.add_plugin(std::move(veto));
    EXPECT_EQ(tt::test::refusal_of([&] { t.fit(); }),
              "plugin 'veto' skipped step 2 on BEFORE_STEP (state.skip_step), but plugin 'step-in-backward' took that "
              "step in backward (it updates each parameter as its gradient lands): the parameters are updated already. "
              "A plugin that may skip steps declares may_skip_steps() (tt/plugin.h), and is then refused beside it "
              "when the pipeline is read; remove one of them from plugins");
    EXPECT_EQ(t.state().step, 1);
  }
  {  // a skip set before BEFORE_STEP says so
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(regression_with(out, "{name: sgd, lr: 0.05}", "  max_steps: 3\n"), {out / "run", false, true});
    stepper(t);
    t.add_plugin(std::make_unique<OnEvent>(Event::AFTER_BACKWARD, [](tt::State& s) { s.skip_step = s.step == 1; }));
    EXPECT_HAS(tt::test::refusal_of([&] { t.fit(); }),
               "state.skip_step was set before BEFORE_STEP, skipping step 2, but plugin 'step-in-backward' took that "
               "step in backward");
  }
  {  // declared, but no hook of its own registered (another plugin's does not count)
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(regression_with(out, "{name: sgd, lr: 0.05}", "  max_steps: 1\n"), {out / "run", false, true});
    t.add_plugin(std::make_unique<NoHook>());
    auto other = std::make_unique<OnEvent>(Event::INIT, [](tt::State& s) {
      tt::add_gradient_ready_hook(s, [](size_t, at::Tensor&) {});
    });
    other->set_name("other");
    t.add_plugin(std::move(other));
    EXPECT_HAS(tt::test::message_of<tt::ModuleError>([&] { t.fit(); }, "a ModuleError"),
               "plugin 'no-hook' declares that it takes the optimizer step in backward (it says so), but registered "
               "no gradient-ready hook of its own by FIT_START (tt::add_gradient_ready_hook, tt/extension.h): no "
               "parameter would be updated");
  }
}

// step_parameter steps one parameter with the optimizer's own step (the others keep their values
// and state), and refuses an optimizer that does not step each parameter on its own and a tensor
// that is not one of the optimizer's parameters.
TEST(Extension, StepParameterStepsOneParameterAloneAndRefusesWhatItCannot) {
  auto a = torch::ones({3}, torch::requires_grad()), b = torch::ones({2}, torch::requires_grad());
  torch::optim::AdamW adamw({torch::optim::OptimizerParamGroup({a}), torch::optim::OptimizerParamGroup({b})},
                            torch::optim::AdamWOptions(0.1));
  a.mutable_grad() = torch::ones({3});
  b.mutable_grad() = torch::ones({2});
  tt::step_parameter(adamw, b);
  EXPECT_TRUE(torch::equal(a, torch::ones({3}))) << "a was not stepped";
  EXPECT_FALSE(torch::equal(b, torch::ones({2}))) << "b was stepped";
  EXPECT_EQ(adamw.state().size(), 1u);
  ASSERT_EQ(adamw.param_groups()[0].params().size(), 1u);  // the groups as they were
  EXPECT_TRUE(adamw.param_groups()[0].params()[0].is_same(a));
  EXPECT_TRUE(adamw.param_groups()[1].params()[0].is_same(b));
  // the same update as the whole step on that parameter alone
  auto c = torch::ones({2}, torch::requires_grad());
  torch::optim::AdamW whole({c}, torch::optim::AdamWOptions(0.1));
  c.mutable_grad() = torch::ones({2});
  whole.step();
  EXPECT_TRUE(torch::equal(b, c));
  auto stranger = torch::ones({2});
  stranger.mutable_grad() = torch::ones({2});
  EXPECT_HAS(tt::test::message_of<tt::Error>([&] { tt::step_parameter(adamw, stranger); }, "an Error"),
             "step_parameter: the tensor ([2]) is not a parameter of the optimizer (2 groups)");
  // a parameter whose gradient an earlier hook released: nothing would update it
  a.mutable_grad() = at::Tensor();
  EXPECT_HAS(tt::test::message_of<tt::Error>([&] { tt::step_parameter(adamw, a); }, "an Error"),
             "step_parameter: the parameter ([3]) has no gradient, so nothing would update it: a gradient-ready hook "
             "that ran before released it");
  // a step that throws leaves the groups as they were
  struct Throwing : torch::optim::Optimizer, tt::PerParameterStep {
    explicit Throwing(std::vector<torch::optim::OptimizerParamGroup> groups)
        : torch::optim::Optimizer(std::move(groups), std::make_unique<torch::optim::SGDOptions>(0.1)) {}
    torch::Tensor step(LossClosure) override { TT_FAIL("a step that throws"); }
  };
  Throwing throwing({torch::optim::OptimizerParamGroup({a, b}), torch::optim::OptimizerParamGroup({c})});
  a.mutable_grad() = torch::ones({3});
  EXPECT_HAS(tt::test::message_of<tt::Error>([&] { tt::step_parameter(throwing, a); }, "an Error"), "a step that throws");
  ASSERT_EQ(throwing.param_groups()[0].params().size(), 2u);
  EXPECT_TRUE(throwing.param_groups()[0].params()[0].is_same(a));
  EXPECT_TRUE(throwing.param_groups()[0].params()[1].is_same(b));
  ASSERT_EQ(throwing.param_groups()[1].params().size(), 1u);
  EXPECT_TRUE(throwing.param_groups()[1].params()[0].is_same(c));
  torch::optim::LBFGS lbfgs({a}, torch::optim::LBFGSOptions(0.1));
  EXPECT_HAS(tt::test::message_of<tt::Error>([&] { tt::step_parameter(lbfgs, a); }, "an Error"),
             "step_parameter: the optimizer (torch::optim::LBFGS) does not declare that its step updates each "
             "parameter on its own (tt::PerParameterStep, tt/optimizer_state.h)");
}

TEST(Extension, LossHooksWrapOrReplaceTheModelsLoss) {
  auto grads_with = [](const std::function<void(tt::State&)>& register_hooks) {
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "run", false, true});
    t.add_plugin(std::make_unique<OnEvent>(Event::INIT, register_hooks));
    std::vector<torch::Tensor> g;
    t.add_plugin(std::make_unique<OnEvent>(Event::BEFORE_STEP, [&](tt::State& s) { g = clone_grads(s); }));
    t.fit();
    return std::make_pair(g, t.step_losses().at(0));
  };
  auto [g1, loss1] = grads_with([](tt::State&) {});
  // Two wrappers: the outer adds 1 to what the inner (x3) returns.
  auto [g3, loss3] = grads_with([](tt::State& s) {
    tt::add_loss_hook(s, [](const tt::Batch& b, const std::function<tt::ModelOutput(const tt::Batch&)>& next) {
      tt::ModelOutput o = next(b);
      o.loss = o.loss + 1.0;
      return o;
    });
    tt::add_loss_hook(s, [](const tt::Batch& b, const std::function<tt::ModelOutput(const tt::Batch&)>& next) {
      tt::ModelOutput o = next(b);
      o.loss = o.loss * 3.0;
      return o;
    });
  });
  EXPECT_NEAR(loss3, 3 * loss1 + 1, 1e-5 * loss3);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_TRUE(torch::allclose(g3[i], 3 * g1[i], 1e-5, 1e-7));
  // A replacement that never calls the model: the loss of a constant target.
  auto [g0, loss0] = grads_with([](tt::State& s) {
    tt::add_loss_hook(s, [&s](const tt::Batch& b, const std::function<tt::ModelOutput(const tt::Batch&)>&) {
      tt::ModelOutput o;
      at::Tensor w = s.optimizer ? at::Tensor() : at::Tensor();
      at::Tensor sum;
      for (const auto& p : s.model->parameters()) sum = sum.defined() ? sum + p.sum() : p.sum();
      o.loss = sum * 0.0 + 7.0;
      o.items = b.size;
      return o;
    });
  });
  EXPECT_DOUBLE_EQ(loss0, 7.0);
  for (const auto& g : g0) EXPECT_EQ(g.abs().max().item<double>(), 0.0);
}

// A loss hook may compute the loss without calling next (chunked cross-entropy) only as the
// last one: listed before another plugin's loss hook, it would leave that one out unseen.
TEST(Extension, ALossHookThatReplacesTheLossLeavingLaterHooksOutIsRefused) {
  const auto run = [](bool replacer_first) {
    auto out = tt::test::temp_dir("ext");
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 2\n"), {out / "run", false, true});
    auto replacer = std::make_unique<OnEvent>(Event::INIT, [](tt::State& s) {
      tt::add_loss_hook(s, [&s](const tt::Batch& b, const std::function<tt::ModelOutput(const tt::Batch&)>&) {
        return s.model->forward_loss(b);  // its own loss, next not called
      });
    });
    replacer->set_name("chunked");
    auto wrapper = std::make_unique<OnEvent>(Event::INIT, [](tt::State& s) {
      tt::add_loss_hook(s, [](const tt::Batch& b, const std::function<tt::ModelOutput(const tt::Batch&)>& next) {
        tt::ModelOutput o = next(b);
        o.loss = o.loss * 0.5;
        return o;
      });
    });
    wrapper->set_name("distill");
    if (replacer_first) {
      t.add_plugin(std::move(replacer));
      t.add_plugin(std::move(wrapper));
    } else {
      t.add_plugin(std::move(wrapper));
      t.add_plugin(std::move(replacer));
    }
    return std::make_pair(tt::test::refusal_of([&] { t.fit(); }), t.state().step);
  };
  const auto [refused, refused_steps] = run(true);
  EXPECT_EQ(refused, "plugins: the loss hook of 'chunked' computed the loss without calling next, so the loss hooks "
                     "after it (of 'distill') never ran at step 1: list a plugin that replaces the loss last, after "
                     "those that wrap it, or use one plugin that replaces it");
  EXPECT_EQ(refused_steps, 0);
  const auto [ok, ok_steps] = run(false);
  EXPECT_EQ(ok, "");
  EXPECT_EQ(ok_steps, 2);
}

TEST(Extension, TeacherIsFrozenAndKeptOutOfTrainingAndCheckpoints) {
  auto out = tt::test::temp_dir("ext");
  tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 3\n"), {out / "run", false, true});
  std::vector<torch::Tensor> teacher_before;
  size_t optimized = 0;
  t.add_plugin(std::make_unique<OnEvent>(Event::INIT, [&](tt::State& s) {
    auto& reg = tt::Registry::global();
    s.teacher = reg.model("test-regression").factory(tt::Options(), *s.datasets);
    for (const auto& p : s.teacher->parameters()) teacher_before.push_back(p.detach().clone());
  }));
  // a distillation-like loss: the student's plus its distance to the teacher's prediction
  t.add_plugin(std::make_unique<OnEvent>(Event::FIT_START, [&](tt::State& s) {
    for (const auto& g : s.optimizer->param_groups()) optimized += g.params().size();
    tt::add_loss_hook(s, [&s](const tt::Batch& b, const std::function<tt::ModelOutput(const tt::Batch&)>& next) {
      tt::ModelOutput o = next(b);
      EXPECT_FALSE(s.teacher->is_training());
      at::Tensor teacher_loss;
      {
        torch::NoGradGuard no_grad;
        teacher_loss = s.teacher->forward_loss(b).loss;
      }
      EXPECT_FALSE(teacher_loss.requires_grad());
      o.loss = o.loss + 0.0 * teacher_loss;
      return o;
    });
  }));
  testing::internal::CaptureStdout();
  t.fit();
  const std::string printed = testing::internal::GetCapturedStdout();
  tt::State& s = t.state();
  ASSERT_TRUE(s.teacher);
  EXPECT_EQ(optimized, s.model->parameters().size());
  const auto after = s.teacher->parameters();
  ASSERT_EQ(after.size(), teacher_before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_FALSE(after[i].requires_grad());
    EXPECT_TRUE(torch::equal(after[i], teacher_before[i]));
  }
  int64_t bytes = 0;
  for (const auto& p : after) bytes += static_cast<int64_t>(p.nbytes());
  EXPECT_EQ(t.memory().teacher, bytes);
  EXPECT_NE(tt::test::read_file(out / "run" / "summary.json").find("\"teacher_bytes\": " + std::to_string(bytes)),
            std::string::npos);
  // The teacher is a part of the peak of its own, not of the rest (summary.json, the printed summary).
  const auto m = tt::test::summary_of(out / "run")["memory"];
  EXPECT_EQ(m["rest_bytes"].get<int64_t>(), m["peak_tensor_bytes"].get<int64_t>() - m["parameters_bytes"].get<int64_t>() -
                                                m["gradients_bytes"].get<int64_t>() -
                                                m["optimizer_state_bytes"].get<int64_t>() -
                                                m["activations_bytes"].get<int64_t>() - bytes);
  EXPECT_NE(printed.find(" + teacher " + tt::format_bytes(bytes) + " + rest "), std::string::npos) << printed;
  // The run's last checkpoint holds the student alone: its model entry is the student's tensors,
  // name for name and value for value (the teacher is the same model, with the same names, and
  // other values after training), and no tensor of the archive is one of the teacher's.
  const auto files = tt::list_checkpoints(out / "run" / "checkpoints");
  ASSERT_FALSE(files.empty());
  const auto saved = tt::test::checkpoint_params(files.back());
  const auto student = s.model->named_parameters();
  ASSERT_EQ(saved.size(), student.size());
  for (const auto& p : student) {
    ASSERT_TRUE(saved.count(p.key())) << p.key();
    EXPECT_TRUE(torch::equal(saved.at(p.key()), p.value())) << p.key();
  }
  for (size_t i = 0; i < after.size(); ++i)  // student and teacher tell apart by value
    EXPECT_FALSE(torch::equal(student[i].value(), after[i])) << student[i].key();
  torch::serialize::InputArchive whole;
  whole.load_from(files.back().string());
  std::map<std::string, at::Tensor> every;
  tt::test::collect_tensors(whole, "", every);
  for (const auto& [name, tensor] : every) {
    EXPECT_EQ(name.find("teacher"), std::string::npos) << name;
    for (const auto& t : after)
      EXPECT_FALSE(tensor.sizes() == t.sizes() && tensor.scalar_type() == t.scalar_type() && torch::equal(tensor, t)) << name;
  }
}

TEST(Extension, KeepFp32SwitchExistsExactlyOnTheLayersThatHaveOne) {
  tt::nn::Linear lin(4, 3);
  tt::nn::LayerNorm ln(4);
  tt::nn::RMSNorm rms(4);
  tt::nn::TiedLinear tied(torch::randn({5, 4}));
  tt::nn::MLP mlp(4, 8);
  for (torch::nn::Module* m : std::initializer_list<torch::nn::Module*>{lin.get(), ln.get(), rms.get(), tied.get()})
    EXPECT_NE(tt::nn::keep_fp32_switch(*m), nullptr);
  EXPECT_EQ(tt::nn::keep_fp32_switch(*mlp), nullptr);  // a container: its Linears have theirs
  // On: float32 out under bf16 autocast; off: bf16.
  const at::Tensor x = torch::randn({2, 4});
  tt::amp::AutocastState bf16;
  bf16.cpu = true;
  bf16.cpu_dtype = torch::kBFloat16;
  tt::amp::AutocastScope scope(bf16);
  EXPECT_EQ(lin->forward(x).scalar_type(), torch::kBFloat16);
  *tt::nn::keep_fp32_switch(*lin) = true;
  EXPECT_EQ(lin->forward(x).scalar_type(), torch::kFloat);
}

namespace {
// forward(x) = x + mlp(norm(x)): the MLP's output is only added into the result.
class ResidualBlock : public tt::nn::Block {
 public:
  explicit ResidualBlock(int64_t d = 8, int64_t d_ff = 32) {
    ln = register_module("ln", tt::nn::LayerNorm(d));
    mlp = register_module("mlp", tt::nn::MLP(d, d_ff));
  }
  at::Tensor forward(const at::Tensor& x) override { return x + mlp->forward(ln->forward(x)); }
  tt::nn::MLPImpl* residual_mlp() override { return mlp.get(); }
  tt::nn::LayerNorm ln{nullptr};
  tt::nn::MLP mlp{nullptr};
};
}  // namespace

TEST(Extension, LeanRecomputeSetsTheMlpSwitchesForItsLifetimeAndKeepsGradients) {
  torch::manual_seed(0);
  ResidualBlock block;
  const at::Tensor x = torch::randn({3, 5, 8});
  auto grads = [&](bool lean) {
    block.zero_grad();
    at::Tensor in = x.clone().requires_grad_(true);
    at::Tensor g_out = torch::ones({3, 5, 8});
    {
      std::optional<tt::nn::LeanRecompute> scope;
      if (lean) scope.emplace(block);
      EXPECT_EQ(block.mlp->recompute_activation, lean);
      EXPECT_EQ(block.mlp->skip_output, lean);
      at::Tensor y = block.forward(in);
      y.backward(g_out);
    }
    EXPECT_FALSE(block.mlp->recompute_activation);  // restored on exit
    EXPECT_FALSE(block.mlp->skip_output);
    std::vector<at::Tensor> g{in.grad().clone()};
    for (const auto& p : block.parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto plain = grads(false), lean = grads(true);
  ASSERT_EQ(plain.size(), lean.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::allclose(plain[i], lean[i], 1e-5, 1e-6)) << i;
}

namespace {
// Saved tensors go to files: what a disk offload of activations does.
struct DiskPack {
  fs::path dir;
  int packed = 0, kept = 0, unpacked = 0;
  int64_t packed_bytes = 0;
  // Leaves the forward made (LayerNorm's mean and rstd need no gradient, so autograd sees them
  // as leaves): kept, and counted here, apart from the parameters and the input (`held`).
  std::set<const void*> held;
  int64_t kept_made_bytes = 0;
  tt::nn::SavedTensorPack fn() {
    return [this](const at::Tensor& saved, bool leaf) -> tt::nn::SavedTensorUnpack {
      if (leaf) {
        ++kept;
        if (!held.count(saved.data_ptr())) kept_made_bytes += saved.numel() * static_cast<int64_t>(saved.element_size());
        return nullptr;
      }
      const fs::path file = dir / ("t" + std::to_string(packed++));
      at::Tensor c = saved.contiguous();
      const int64_t n = c.numel() * static_cast<int64_t>(c.element_size());
      packed_bytes += n;
      std::ofstream(file, std::ios::binary).write(static_cast<const char*>(c.data_ptr()), n);
      return [this, file, sizes = saved.sizes().vec(), options = saved.options(), n] {
        ++unpacked;
        at::Tensor t = torch::empty(sizes, options);
        std::ifstream(file, std::ios::binary).read(static_cast<char*>(t.data_ptr()), n);
        return t;
      };
    };
  }
};
}  // namespace

TEST(Extension, SavedTensorHooksPackWhatAutogradSavesFreeItsMemoryAndKeepTheGradients) {
  tt::Meter::global().install();
  torch::manual_seed(0);
  ResidualBlock block(64, 256);
  const at::Tensor x = torch::randn({8, 128, 64});
  DiskPack disk;
  disk.dir = tt::test::temp_dir("saved-hooks");
  auto run = [&](bool hooks, int64_t* held) {
    block.zero_grad();
    at::Tensor in = x.clone().requires_grad_(true);
    disk.held = {in.data_ptr()};
    for (const auto& p : block.parameters()) disk.held.insert(p.data_ptr());
    at::Tensor y;
    const int64_t before = tt::Meter::global().current();
    {
      std::optional<tt::nn::SavedTensorHooks> scope;
      if (hooks) scope.emplace(disk.fn());
      EXPECT_EQ(tt::nn::SavedTensorHooks::active(), hooks);
      y = block.forward(in);
    }
    EXPECT_FALSE(tt::nn::SavedTensorHooks::active());
    *held = tt::Meter::global().current() - before - y.numel() * 4;  // what the graph keeps
    y.backward(torch::ones_like(y));
    std::vector<at::Tensor> g{in.grad().clone()};
    for (const auto& p : block.parameters()) g.push_back(p.grad().clone());
    return g;
  };
  int64_t held_plain = 0, held_packed = 0;
  auto plain = run(false, &held_plain);
  EXPECT_EQ(disk.packed + disk.kept, 0);  // no scope, no hook
  auto packed = run(true, &held_packed);
  // The MLP's fc1 input, its output and GELU's output (8*128*(64+256+256) floats at least) were
  // written to disk, each read back once; the parameters and the input were offered as leaves.
  EXPECT_GE(disk.packed, 3);
  EXPECT_GE(disk.packed_bytes, int64_t{8} * 128 * (64 + 256 + 256) * 4);
  EXPECT_EQ(disk.unpacked, disk.packed);
  EXPECT_GE(disk.kept, 4);  // fc1 and fc2 weights (and their views), LayerNorm's weight, the input
  // A tensor saved by two nodes is written twice: the files and the leaves the forward made hold
  // at least what the graph kept.
  EXPECT_GE(disk.packed_bytes + disk.kept_made_bytes, held_plain);
  EXPECT_LE(disk.kept_made_bytes, held_plain / 100);
  EXPECT_LE(held_packed, held_plain / 100) << held_plain << " " << held_packed;
  ASSERT_EQ(plain.size(), packed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], packed[i])) << i;
}

// `leaf` is true for a parameter and for a view of one (weight.t(), which a linear layer saves):
// memory held elsewhere; false for what forward computed and its views.
TEST(Extension, SavedTensorHooksOfferAParametersViewAsALeafAndAnActivationsViewAsNot) {
  const at::Tensor w = torch::randn({4, 3}).requires_grad_(true), x = torch::randn({5, 3}).requires_grad_(true),
                   v = torch::ones({5, 2}).requires_grad_(true);
  std::vector<std::pair<std::string, bool>> offered;  // what each saved tensor is, and its leaf flag
  at::Tensor h;
  const auto what = [&](const at::Tensor& t) -> std::string {
    if (t.data_ptr() == w.data_ptr()) return t.sizes() == w.sizes() ? "w" : "w.t()";
    if (t.data_ptr() == x.data_ptr()) return "x";
    if (h.defined() && t.data_ptr() == h.data_ptr()) return t.sizes() == h.sizes() ? "h" : "h.t()";
    return "other";
  };
  at::Tensor y;
  {
    tt::nn::SavedTensorHooks hooks([&](const at::Tensor& saved, bool leaf) -> tt::nn::SavedTensorUnpack {
      offered.emplace_back(what(saved), leaf);
      return {};
    });
    h = x * 2;                                         // saves nothing (a constant factor)
    const at::Tensor a = torch::mm(x, w.t());          // saves x and w.t()
    const at::Tensor b = torch::mm(h.t(), v);               // saves h.t() and v
    y = a.sum() + b.sum();
  }
  std::map<std::string, bool> leaf_of;
  for (const auto& [name, leaf] : offered) leaf_of[name] = leaf;
  ASSERT_TRUE(leaf_of.count("x") && leaf_of.count("w.t()") && leaf_of.count("h.t()")) << offered.size();
  EXPECT_TRUE(leaf_of["x"]);
  EXPECT_TRUE(leaf_of["w.t()"]) << "a parameter's view is memory the parameter holds anyway";
  EXPECT_FALSE(leaf_of["h.t()"]) << "a view of an activation is the activation's memory";
  y.backward();
  EXPECT_TRUE(w.grad().defined() && x.grad().defined());
}

TEST(Extension, SavedTensorHooksNestInnermostFirstAndKeepWhatPackDeclines) {
  int outer = 0, inner = 0;
  auto count = [](int* n) {
    return [n](const at::Tensor&, bool) -> tt::nn::SavedTensorUnpack {
      ++*n;
      return nullptr;  // keep: autograd's own copy is used
    };
  };
  auto gradient = [&](bool hooks) {
    torch::manual_seed(0);
    const at::Tensor w = torch::randn({16, 16}, torch::requires_grad());
    at::Tensor loss;
    {
      std::optional<tt::nn::SavedTensorHooks> a;
      if (hooks) a.emplace(count(&outer));
      at::Tensor h = torch::tanh(torch::randn({4, 16}).matmul(w));  // mm saves the input, tanh its result
      const int outer_after_first = outer;
      EXPECT_EQ(outer_after_first, hooks ? 2 : 0);
      {
        std::optional<tt::nn::SavedTensorHooks> b;
        if (hooks) b.emplace(count(&inner));
        loss = (h * h).sum();  // mul saves both operands: the inner scope gets them
      }
      EXPECT_EQ(outer, outer_after_first);
      EXPECT_EQ(inner, hooks ? 2 : 0);
      loss = loss + torch::exp(h).sum();  // exp saves its result: the outer scope again
      EXPECT_EQ(outer, outer_after_first + (hooks ? 1 : 0));
    }
    loss.backward();
    return w.grad().clone();
  };
  const at::Tensor plain = gradient(false), kept = gradient(true);
  EXPECT_TRUE(torch::equal(plain, kept));
}
