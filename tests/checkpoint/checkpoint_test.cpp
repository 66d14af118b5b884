// Activation checkpointing: gradients equal the baseline's (dropout on: the re-run must draw
// the same masks), policies, and the plugin's effect on the activations tt's meter measures.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "test_support.h"
#include "transformer_model.h"
#include "tt/error.h"
#include "tt/extension.h"
#include "tt/meter.h"
#include "tt/pipeline.h"
#include "tt/trainer.h"

namespace fs = std::filesystem;

namespace {

tt::lm::Shape shape(double dropout) {
  tt::lm::Shape s;
  s.vocab = 64;
  s.d_model = 32;
  s.n_layers = 3;
  s.n_heads = 4;
  s.d_ff = 64;
  s.seq_len = 24;
  s.dropout = dropout;
  return s;
}

// Loss and parameter gradients of one forward/backward from the same random state;
// `between` runs after the forward, before the backward.
std::pair<double, std::vector<at::Tensor>> loss_and_grads(tt::lm::TransformerLM& m, const at::Tensor& ids,
                                                          uint64_t seed, const std::function<void()>& between = {}) {
  m.zero_grad();
  torch::manual_seed(seed);
  tt::Batch b;
  b.set("input", ids.slice(1, 0, -1));
  b.set("target", ids.slice(1, 1));
  auto out = m.forward_loss(b);
  if (between) between();
  out.loss.backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : m.parameters()) grads.push_back(p.grad().clone());
  return {out.loss.item<double>(), grads};
}

double max_abs_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

double max_abs(const std::vector<at::Tensor>& a) {
  double m = 0;
  for (const auto& t : a) m = std::max(m, t.abs().max().item<double>());
  return m;
}

// A block runner as an activation-compression plugin installs one: saved-tensor hooks around each
// block's call pack what autograd saves (leaves aside) as the tensor itself (exact) or rounded to
// bfloat16. Records the blocks it ran with and without grad mode, in order, and counts the packed tensors.
class PackingRunner final : public tt::nn::BlockRunner {
 public:
  explicit PackingRunner(bool bf16) : bf16_(bf16) {}
  std::string name() const override { return bf16_ ? "packing(bf16)" : "packing(exact)"; }
  at::Tensor run(int64_t index, tt::nn::Block& block, const at::Tensor& x) override {
    (torch::GradMode::is_enabled() ? with_grad : without_grad).push_back(index);
    tt::nn::SavedTensorHooks hooks([this](const at::Tensor& saved, bool leaf) -> tt::nn::SavedTensorUnpack {
      if (leaf) return nullptr;
      ++packed;
      if (!bf16_ || !saved.is_floating_point()) return [saved] { return saved; };
      return [rounded = saved.to(torch::kBFloat16), dtype = saved.scalar_type()] { return rounded.to(dtype); };
    });
    return block.forward(x);
  }
  void clear() {
    with_grad.clear();
    without_grad.clear();
    packed = 0;
  }
  std::vector<int64_t> with_grad, without_grad;
  int64_t packed = 0;

 private:
  bool bf16_;
};

// Installs `inner` on the stack, then a checkpoint runner over `which` that wraps it, as the
// plugin does when a plugin listed before it set a runner.
std::shared_ptr<tt::ckpt::CheckpointRunner> checkpoint_over(tt::lm::TransformerLM& m,
                                                            const std::shared_ptr<tt::nn::BlockRunner>& inner,
                                                            std::set<int64_t> which) {
  m.blocks->set_runner(inner);
  auto runner = std::make_shared<tt::ckpt::CheckpointRunner>(std::move(which), m.blocks->shared_runner());
  m.blocks->set_runner(runner);
  return runner;
}

}  // namespace

TEST(Checkpoint, GradientsEqualTheBaselineWithDropoutOn) {
  torch::manual_seed(0);
  tt::lm::TransformerLM m(shape(0.1), nullptr, {}, "");
  m.train();
  auto ids = torch::randint(0, 64, {4, 25}, torch::kLong);
  auto [loss_a, base] = loss_and_grads(m, ids, 7);
  auto [loss_other_seed, unused] = loss_and_grads(m, ids, 8);
  ASSERT_NE(loss_a, loss_other_seed) << "dropout is not active: the test would prove nothing about RNG replay";
  for (const char* policy : {"all", "every", "blocks"}) {
    m.blocks->set_runner(std::make_shared<tt::ckpt::CheckpointRunner>(tt::ckpt::select_blocks(policy, 3, 2, {1})));
    auto [loss_b, ckpt] = loss_and_grads(m, ids, 7);
    EXPECT_EQ(loss_a, loss_b) << policy;
    ASSERT_EQ(base.size(), ckpt.size());
    EXPECT_LE(max_abs_diff(base, ckpt), 1e-6) << policy;
  }
  m.blocks->set_runner(nullptr);
}

// With the layers before the blocks frozen (lora's base weights), a checkpointed block's input
// needs no gradient, and its own trainable parameters still get theirs: equal to the baseline's
// for every policy, none of them zero, and the frozen ones get none.
TEST(Checkpoint, ABlockWhoseInputNeedsNoGradientStillTrainsItsOwnParameters) {
  torch::manual_seed(0);
  tt::lm::TransformerLM m(shape(0.0), nullptr, {}, "");
  m.train();
  std::vector<bool> trainable;
  for (const auto& item : m.named_parameters()) {
    const bool in_block = item.key().rfind("blocks.", 0) == 0;
    item.value().set_requires_grad(in_block);
    trainable.push_back(in_block);
  }
  ASSERT_TRUE(std::count(trainable.begin(), trainable.end(), false) > 0);
  auto ids = torch::randint(0, 64, {4, 25}, torch::kLong);
  const auto grads_of = [&] {
    m.zero_grad();
    tt::Batch b;
    b.set("input", ids.slice(1, 0, -1));
    b.set("target", ids.slice(1, 1));
    m.forward_loss(b).loss.backward();
    std::vector<at::Tensor> grads;
    // copies: LibTorch 1.13's zero_grad() zeroes the next call's .grad in place
    for (const auto& p : m.parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    return grads;
  };
  const auto base = grads_of();
  for (const char* policy : {"all", "every", "blocks"}) {
    m.blocks->set_runner(std::make_shared<tt::ckpt::CheckpointRunner>(tt::ckpt::select_blocks(policy, 3, 2, {0})));
    const auto ckpt = grads_of();
    ASSERT_EQ(ckpt.size(), base.size());
    for (size_t i = 0; i < ckpt.size(); ++i) {
      ASSERT_EQ(ckpt[i].defined(), static_cast<bool>(trainable[i])) << policy << " parameter " << i;
      if (!trainable[i]) continue;
      EXPECT_GT(ckpt[i].abs().max().item<double>(), 0) << policy << " parameter " << i;
      EXPECT_LE((ckpt[i] - base[i]).abs().max().item<double>(), 1e-6) << policy << " parameter " << i;
    }
  }
  m.blocks->set_runner(nullptr);
}

// A runner set on the stack before checkpoint's (by a plugin listed before it) is kept: each
// checkpointed block is called through it in the no-grad forward and again in the re-run in
// backward, so the saved-tensor hooks it opens act on what the re-run saves; blocks not
// checkpointed, the probing steps and no-grad calls go through it too. An exact pack leaves the
// gradients bitwise those of checkpoint alone; bfloat16 packing moves them within its rounding.
TEST(Checkpoint, TheRunnerItReplacesCallsEachBlockInForwardAndInTheReRun) {
  torch::manual_seed(0);
  tt::lm::TransformerLM m(shape(0.1), nullptr, {}, "");
  m.train();
  auto ids = torch::randint(0, 64, {4, 25}, torch::kLong);
  const std::set<int64_t> all = tt::ckpt::select_blocks("all", 3, 1, {});
  auto [loss_base, base] = loss_and_grads(m, ids, 7);
  m.blocks->set_runner(std::make_shared<tt::ckpt::CheckpointRunner>(all));
  auto [loss_ckpt, ckpt] = loss_and_grads(m, ids, 7);
  m.blocks->set_runner(std::make_shared<tt::ckpt::CheckpointRunner>(std::set<int64_t>{1}));
  auto [loss_ckpt1, ckpt1] = loss_and_grads(m, ids, 7);
  ASSERT_EQ(loss_base, loss_ckpt);

  auto exact = std::make_shared<PackingRunner>(false);
  auto runner = checkpoint_over(m, exact, all);
  EXPECT_EQ(runner->inner(), exact);
  std::vector<int64_t> forward_with_grad, forward_without_grad;
  int64_t forward_packed = -1;
  auto after_forward = [&](PackingRunner& r) {  // what it saw in the forward; then counts the backward
    return [&, seen = &r] {
      forward_with_grad = seen->with_grad;
      forward_without_grad = seen->without_grad;
      forward_packed = seen->packed;
      seen->clear();
    };
  };
  auto [loss_exact, grads_exact] = loss_and_grads(m, ids, 7, after_forward(*exact));
  // forward: each block once, in checkpoint's no-grad forward (nothing saved)
  EXPECT_EQ(forward_without_grad, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(forward_with_grad.empty());
  EXPECT_EQ(forward_packed, 0);
  // backward: each block re-run through it with grad, the last first; what the re-runs save is packed
  EXPECT_EQ(exact->with_grad, (std::vector<int64_t>{2, 1, 0})) << "the re-run did not call the block through it";
  EXPECT_TRUE(exact->without_grad.empty());
  EXPECT_GT(exact->packed, 0) << "the inner runner's saved-tensor hooks saw nothing of the re-run";
  EXPECT_EQ(loss_exact, loss_ckpt);
  EXPECT_TRUE(bitwise_equal(grads_exact, ckpt)) << "max difference " << max_abs_diff(grads_exact, ckpt);
  EXPECT_LE(max_abs_diff(grads_exact, base), 1e-6);

  // one block checkpointed: the others run through it with grad in the forward (and pack there)
  exact->clear();
  checkpoint_over(m, exact, {1});
  auto [loss_one, grads_one] = loss_and_grads(m, ids, 7, after_forward(*exact));
  EXPECT_EQ(forward_with_grad, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(forward_without_grad, (std::vector<int64_t>{1}));
  EXPECT_GT(forward_packed, 0);
  EXPECT_EQ(exact->with_grad, (std::vector<int64_t>{1}));
  EXPECT_EQ(loss_one, loss_ckpt1);
  EXPECT_TRUE(bitwise_equal(grads_one, ckpt1)) << "max difference " << max_abs_diff(grads_one, ckpt1);

  // no grad mode (evaluation): straight through it
  exact->clear();
  {
    torch::NoGradGuard no_grad;
    m.blocks->forward(torch::randn({2, 5, 32}));
  }
  EXPECT_EQ(exact->without_grad, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(exact->packed, 0);

  // probing (selective, budget): the re-runs that measure the blocks go through it too
  exact->clear();
  runner = checkpoint_over(m, exact, {});
  runner->start_probe(3);
  for (int step = 0; step < 2; ++step) {
    auto [loss_probe, grads_probe] = loss_and_grads(m, ids, 7, after_forward(*exact));
    EXPECT_EQ(forward_without_grad, (std::vector<int64_t>{0, 1, 2})) << "probing step " << step;
    EXPECT_EQ(exact->with_grad, (std::vector<int64_t>{2, 1, 0})) << "probing step " << step;
    EXPECT_GT(exact->packed, 0) << "probing step " << step;
    EXPECT_EQ(loss_probe, loss_ckpt) << "probing step " << step;
    EXPECT_LE(max_abs_diff(grads_probe, base), 1e-6) << "probing step " << step;
    exact->clear();
  }
  EXPECT_TRUE(runner->measured());

  // bfloat16 packing: the forward is untouched (nothing saved there), the re-run's saved tensors
  // are rounded, so the gradients move from checkpoint alone's, within bfloat16's rounding
  auto bf16 = std::make_shared<PackingRunner>(true);
  checkpoint_over(m, bf16, all);
  auto [loss_bf16, grads_bf16] = loss_and_grads(m, ids, 7);
  EXPECT_EQ(bf16->with_grad, (std::vector<int64_t>{2, 1, 0}));
  EXPECT_GT(bf16->packed, 0);
  EXPECT_EQ(loss_bf16, loss_ckpt);
  const double moved = max_abs_diff(grads_bf16, ckpt), scale = max_abs(base);
  EXPECT_GT(moved, 0) << "bfloat16 packing in the re-run left the gradients bitwise those of checkpoint alone";
  EXPECT_LE(moved, 2e-2 * scale) << "largest gradient " << scale;
  m.blocks->set_runner(nullptr);
}

TEST(Checkpoint, RecomputedActivationKeepsGradientsAndLowersTheBackwardPeak) {
  // dropout 0: the re-run's MLPs take the recompute-GELU path (dropout would turn it off).
  // d_ff 256: the MLP's backward holds the step's peak. With d_ff 64 the peak on LibTorch 2.6 lies
  // elsewhere in the step (226,376 bytes with and without the option).
  torch::manual_seed(0);
  auto sh = shape(0.0);
  sh.d_ff = 256;
  tt::lm::TransformerLM m(sh, nullptr, {}, "");
  m.train();
  auto ids = torch::randint(0, 64, {4, 25}, torch::kLong);
  auto [loss_a, base] = loss_and_grads(m, ids, 7);
  auto& meter = tt::Meter::global();
  meter.install();
  std::map<bool, int64_t> peak;
  for (bool lean : {false, true}) {
    auto runner = std::make_shared<tt::ckpt::CheckpointRunner>(tt::ckpt::select_blocks("all", 3, 1, {}));
    runner->set_recompute_activation(lean);
    m.blocks->set_runner(runner);
    loss_and_grads(m, ids, 7);  // gradients allocated, so both measured steps start alike
    meter.reset_peak();
    const int64_t before = meter.current();
    auto [loss_b, ckpt] = loss_and_grads(m, ids, 7);
    peak[lean] = meter.peak() - before;
    EXPECT_EQ(loss_a, loss_b) << "recompute_activation " << lean;
    EXPECT_LE(max_abs_diff(base, ckpt), 1e-6) << "recompute_activation " << lean;
    // lean re-runs skip the residual MLP's unread output (MLPImpl::skip_output) and restore it
    for (size_t i = 0; i < m.blocks->size(); ++i) {
      auto* mlp = static_cast<tt::nn::Block&>((*m.blocks)[i]).residual_mlp();
      ASSERT_NE(mlp, nullptr);
      EXPECT_FALSE(mlp->skip_output || mlp->recompute_activation) << "block " << i << " left switched";
    }
  }
  // the backward peak of a re-run block drops by d_ff-wide tensors ([4, 24, 256] floats = 96 KiB each)
  EXPECT_LT(peak[true], peak[false]) << "recompute_activation did not lower the step's peak";
  m.blocks->set_runner(nullptr);
}

TEST(Checkpoint, PoliciesAndBadOptions) {
  EXPECT_EQ(tt::ckpt::select_blocks("all", 4, 1, {}), (std::set<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(tt::ckpt::select_blocks("every", 5, 2, {}), (std::set<int64_t>{0, 2, 4}));
  EXPECT_EQ(tt::ckpt::select_blocks("blocks", 4, 1, {3, 1}), (std::set<int64_t>{1, 3}));
  EXPECT_THROW(tt::ckpt::select_blocks("every", 4, 0, {}), tt::Error);
  EXPECT_THROW(tt::ckpt::select_blocks("blocks", 4, 1, {4}), tt::Error);
  EXPECT_THROW(tt::ckpt::select_blocks("selectiv", 4, 1, {}), tt::Error);
}

TEST(Checkpoint, PluginCutsMeasuredActivationsAndRefusesModelsWithoutBlocks) {
  const tt::test::TinyLm lm("ckpt-plugin");
  const auto& dir = lm.dir;
  auto run = [&](const std::string& plugins, const std::string& tag) {
    auto r = lm.run(tag, plugins, "batch_size: 8, max_steps: 2, threads: 1");
    EXPECT_EQ(r.rc, 0) << r.output;
    return lm.summary(tag);
  };
  auto base = run("[]", "base"), ckpt = run("[checkpoint]", "ckpt");
  const double a = base["memory"]["activations_bytes"].get<double>(), b = ckpt["memory"]["activations_bytes"].get<double>();
  EXPECT_LT(b, 0.3 * a) << "activations: " << a << " -> " << b;
  EXPECT_EQ(base["final_loss"], ckpt["final_loss"]);  // same trajectory, bitwise
  // a model without a block stack is refused, naming the plugin: when the pipeline is read, for a
  // model that declares its parts (the topic model: none) ...
  std::ofstream(dir / "topic.yaml") << tt::test::topic_yaml(dir, "  max_steps: 1\n", "plugins: [checkpoint]\n");
  auto r = tt::test::run(tt::test::tt_run_bin() + " " + (dir / "topic.yaml").string() + " -q");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("plugins[0] (checkpoint) acts on a model's block_stack, and model 'topic' has none"),
            std::string::npos)
      << r.output;
  // ... and when the plugin starts, for a model that declares nothing (the test model)
  tt::test::register_test_components();
  tt::Trainer flat(tt::parse_pipeline("name: flat\nmodel: test-regression\ndata: test-regression-data\nplugins: "
                                      "[checkpoint]\ntrainer: {max_steps: 1, threads: 1, progress: off}\n",
                                      "flat.yaml"),
                   {dir / "flat", false, true});
  const std::string at_init = tt::test::config_error([&] { flat.fit(); });
  EXPECT_HAS(at_init, "plugin 'checkpoint' failed in INIT");
  EXPECT_HAS(at_init, "BlockStack");
  r = tt::test::run(tt::test::tt_run_bin() + " " + (dir / "base.yaml").string() +
                    " -q 'plugins=[{name: checkpoint, policy: sometimes}]'");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("sometimes"), std::string::npos) << r.output;
  // each refusal names the option, what it may be and what was given
  for (const auto& [plugin, expect] : std::vector<std::pair<std::string, std::string>>{
           {"{name: checkpoint, fraction: 0}", "checkpoint).fraction must be in (0, 1], got 0"},
           {"{name: checkpoint, every: 0}", "checkpoint).every must be >= 1, got 0"},
           {"{name: checkpoint, policy: blocks, blocks: [1, x]}", "blocks must be a list of block indices (0, 1, ...), not 'x'"},
           {"{name: checkpoint, policy: blocks, blocks: [9]}", "blocks block 9 does not exist (the stack 'blocks' has 4 blocks"},
           {"{name: checkpoint, policy: budget}", "budget policy: budget needs a budget"},
           // an option of another policy, which it would ignore
           {"{name: checkpoint, policy: every, every: 2, blocks: [1]}",
            "blocks is for policy: blocks, and the policy is every: set policy: blocks or remove blocks"},
           {"{name: checkpoint, budget: 1GiB}", "budget is for policy: budget, and the policy is all"},
           {"{name: checkpoint, every: 3}", "every is for policy: every, and the policy is all"},
           {"{name: checkpoint, policy: blocks, blocks: [1], fraction: 0.25}",
            "fraction is for policy: selective, and the policy is blocks"}}) {
    r = tt::test::run(tt::test::tt_run_bin() + " " + (dir / "base.yaml").string() + " -q 'plugins=[" + plugin + "]'");
    EXPECT_EQ(r.rc, 2) << plugin << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << plugin << "\n" << r.output;
    EXPECT_EQ(r.output.find("default of"), std::string::npos) << plugin << "\n" << r.output;  // once, where it is
  }
  // a run's pipeline.yaml writes every option, those of other policies at their defaults: a
  // resume reads it and is not refused for them
  for (const auto& [plugin, tag] : std::vector<std::pair<std::string, std::string>>{
           {"[{name: checkpoint, policy: selective}]", "selective"}, {"[{name: checkpoint, policy: every, every: 3}]", "every3"}}) {
    r = lm.run(tag, plugin, "batch_size: 8, max_steps: 2, threads: 1, checkpoint_every: 1");
    ASSERT_EQ(r.rc, 0) << r.output;
    EXPECT_HAS(tt::test::read_file(dir / tag / "pipeline.yaml"), "fraction: 0.5");
    r = lm.resume_copy(tag, tag + "-resumed", 1);
    EXPECT_EQ(r.rc, 0) << plugin << "\n" << r.output;
    EXPECT_EQ(lm.summary(tag + "-resumed")["final_loss"], lm.summary(tag)["final_loss"]) << plugin;
  }
}

TEST(Checkpoint, SelectiveAndBudgetChoicesOnMeasuredSizes) {
  const std::vector<int64_t> held{10, 50, 30, 50};
  EXPECT_EQ(tt::ckpt::choose_selective(held, 0.5), (std::set<int64_t>{1, 3}));
  EXPECT_EQ(tt::ckpt::choose_selective(held, 0.25), (std::set<int64_t>{1}));
  EXPECT_EQ(tt::ckpt::choose_selective(held, 0.75), (std::set<int64_t>{1, 2, 3}));
  EXPECT_EQ(tt::ckpt::choose_selective(held, 1.0).size(), 4u);
  EXPECT_THROW(tt::ckpt::choose_selective(held, 0), tt::Error);
  // predict_peak: blocks run in order; a re-run comes after the later blocks' backward, while
  // the earlier blocks left alone still keep theirs
  const std::vector<int64_t> k2{100, 100}, r2{80, 80};
  EXPECT_EQ(tt::ckpt::predict_peak(k2, r2, 10, {}), 210);
  EXPECT_EQ(tt::ckpt::predict_peak(k2, r2, 10, {0}), 110);  // block 1's 100 at the end of forward
  EXPECT_EQ(tt::ckpt::predict_peak(k2, r2, 10, {1}), 190);  // block 0's 100 + block 1's re-run
  EXPECT_EQ(tt::ckpt::predict_peak(k2, r2, 10, {0, 1}), 90);
  // four equal blocks keeping 100 each, 80 while re-run; base 900
  const std::vector<int64_t> eq{100, 100, 100, 100}, eq_re{80, 80, 80, 80};
  auto c = tt::ckpt::choose_budget(eq, eq_re, 900, 1150);
  EXPECT_TRUE(c.fits);
  EXPECT_EQ(c.which, (std::set<int64_t>{0, 1}));  // the first two re-run after the last two's backward
  EXPECT_EQ(c.predicted_peak, 1100);
  c = tt::ckpt::choose_budget(eq, eq_re, 900, 950);
  EXPECT_FALSE(c.fits);
  EXPECT_EQ(c.which.size(), 4u);
  EXPECT_EQ(c.predicted_peak, 980);
  c = tt::ckpt::choose_budget(eq, eq_re, 900, 1 << 20);
  EXPECT_TRUE(c.which.empty());
  EXPECT_EQ(c.predicted_peak, 1300);
  // unequal: one checkpointed block is enough (the fewest), and it is the one that fits
  c = tt::ckpt::choose_budget({10, 500, 20, 500}, {10, 500, 20, 500}, 1000, 1530);
  EXPECT_EQ(c.which, (std::set<int64_t>{1}));
  EXPECT_EQ(c.predicted_peak, 1530);
}

// The budget policy's prediction is what the run then measures, and it recomputes no more blocks
// than needed: budgets just under the plain peak and just over the peak with the first half of
// the blocks checkpointed.
TEST(Checkpoint, BudgetPolicyPredictsTheMeasuredPeakAndRecomputesTheFewestBlocks) {
  const tt::test::TinyLm lm("ckpt-budget-predict");
  auto run = [&](const std::string& plugins, const std::string& tag) {
    return lm.run(tag, plugins, "batch_size: 8, max_steps: 4, threads: 1");
  };
  auto peak = [&](const std::string& tag) {
    return tt::test::summary_of(lm.dir / tag)["memory"]["peak_tensor_bytes"].get<int64_t>();
  };
  // "budget B: k of n blocks of 'blocks' recomputed in backward (...), predicted peak X MiB"
  auto logged = [&](const std::string& tag, int64_t& recomputed, double& predicted_mib) {
    const std::string log = tt::test::read_file(lm.dir / tag / "log.txt");
    const auto at = log.find("checkpoint: budget ");
    ASSERT_NE(at, std::string::npos) << log;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    const auto colon = line.find(": ", std::string("checkpoint: ").size());
    recomputed = std::stoll(line.substr(colon + 2));
    const auto p = line.find("predicted peak ");
    ASSERT_NE(p, std::string::npos) << line;
    predicted_mib = std::stod(line.substr(p + 15));
    ASSERT_NE(line.find(" MiB", p), std::string::npos) << line;
  };
  ASSERT_EQ(run("[]", "base").rc, 0);
  ASSERT_EQ(run("[{name: checkpoint, policy: blocks, blocks: [0, 1]}]", "half").rc, 0);
  const int64_t hi = peak("base"), half = peak("half");
  ASSERT_LT(half, hi);
  struct Case {
    std::string tag;
    int64_t budget, most_recomputed;
  };
  for (const Case& k : {Case{"under-plain", hi * 97 / 100, 4}, Case{"over-half", half * 104 / 100, 2}}) {
    auto r = run("[{name: checkpoint, policy: budget, budget: " + std::to_string(k.budget) + "}]", k.tag);
    ASSERT_EQ(r.rc, 0) << r.output;
    int64_t recomputed = -1;
    double predicted = 0;
    logged(k.tag, recomputed, predicted);
    const double measured = static_cast<double>(peak(k.tag)) / 1048576.0;
    EXPECT_LE(peak(k.tag), k.budget) << k.tag << ": predicted " << predicted << " MiB, measured " << measured;
    EXPECT_NEAR(predicted, measured, 0.04 * measured) << k.tag;
    EXPECT_GE(recomputed, 1) << k.tag;
    EXPECT_LE(recomputed, k.most_recomputed) << k.tag << ": plain " << hi << ", first half checkpointed " << half;
  }
}

// The budget policy through tt-run: with a budget halfway between the all-checkpointed and the
// plain peak, the run's measured peak fits the budget; one below anything possible is refused
// with how far over it is; selective logs its choice.
TEST(Checkpoint, BudgetPolicyFitsItsBudgetOnTheMeter) {
  const tt::test::TinyLm lm("ckpt-budget");
  const auto& dir = lm.dir;
  auto run = [&](const std::string& plugins, const std::string& tag) {
    return lm.run(tag, plugins, "batch_size: 8, max_steps: 3, threads: 1");
  };
  auto peak = [&](const std::string& tag) {
    return tt::test::summary_of(dir / tag)["memory"]["peak_tensor_bytes"]
        .get<int64_t>();
  };
  ASSERT_EQ(run("[]", "base").rc, 0);
  ASSERT_EQ(run("[checkpoint]", "all").rc, 0);
  const int64_t hi = peak("base"), lo = peak("all"), budget = (hi + lo) / 2;
  ASSERT_LT(lo, hi);
  auto r = run("[{name: checkpoint, policy: budget, budget: " + std::to_string(budget) + "}]", "budget");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_LE(peak("budget"), budget) << "base " << hi << ", all " << lo;
  EXPECT_GT(peak("budget"), lo) << "the budget allowed fewer checkpointed blocks";
  r = run("[{name: checkpoint, policy: budget, budget: " + std::to_string(lo / 4) + "}]", "tiny");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("below the predicted peak"), std::string::npos) << r.output;
  r = run("[{name: checkpoint, policy: budget, budget: abc}]", "unparsable");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("budget"), std::string::npos) << r.output;
  r = run("[{name: checkpoint, policy: selective, fraction: 0.5}]", "selective");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(tt::test::read_file(dir / "selective" / "log.txt").find("selective (fraction 0.5): blocks"),
            std::string::npos);
}

namespace {

// "test-act-compress: forward: C calls, P packed; backward: C calls, P packed" from a run's log.txt
struct Compressed {
  long forward_calls = -1, forward_packed = -1, backward_calls = -1, backward_packed = -1;
};
Compressed compressed(const fs::path& run_dir) {
  const std::string log = tt::test::read_file(run_dir / "log.txt");
  Compressed c;
  const auto at = log.find("test-act-compress: forward: ");
  if (at != std::string::npos)
    std::sscanf(log.c_str() + at, "test-act-compress: forward: %ld calls, %ld packed; backward: %ld calls, %ld packed",
                &c.forward_calls, &c.forward_packed, &c.backward_calls, &c.backward_packed);
  return c;
}

}  // namespace

// A plugin listed before checkpoint that runs each block through a runner of its own (here one
// packing what autograd saves, as an activation-compression plugin does) keeps it: checkpoint
// calls the block through that runner in its no-grad forward and in the re-run in backward, so
// the packing acts on what the re-run saves. Listed after checkpoint, it wraps checkpoint's runner
// and sees the forward only (what checkpoint keeps: the block inputs).
TEST(Checkpoint, APluginsBlockRunnerListedBeforeRunsInsideCheckpointInForwardAndReRun) {
  const char* had = std::getenv("TT_PLUGIN_PATH");
  const std::string previous = had ? had : "";
  setenv("TT_PLUGIN_PATH", TT_TEST_MODULE_DIR, 1);
  struct Restore {
    bool had;
    std::string value;
    ~Restore() { had ? setenv("TT_PLUGIN_PATH", value.c_str(), 1) : unsetenv("TT_PLUGIN_PATH"); }
  } restore{had != nullptr, previous};

  const tt::test::TinyLm lm("ckpt-wrap");
  const int64_t steps = 2, blocks = 4;  // TinyLm's transformer has 4 blocks
  auto run = [&](const std::string& plugins, const std::string& tag) {
    auto r = lm.run(tag, plugins, "batch_size: 8, max_steps: " + std::to_string(steps) + ", threads: 1");
    EXPECT_EQ(r.rc, 0) << plugins << "\n" << r.output;
    return lm.summary(tag)["final_loss"].get<double>();
  };
  const double base = run("[]", "base"), ckpt = run("[checkpoint]", "ckpt");
  EXPECT_EQ(base, ckpt);

  // alone: every block call in forward, with grad, packs; nothing runs in backward
  run("[{name: test-act-compress, pack: exact}]", "alone");
  auto c = compressed(lm.dir / "alone");
  EXPECT_EQ(c.forward_calls, steps * blocks);
  EXPECT_GT(c.forward_packed, 0);
  EXPECT_EQ(c.backward_calls, 0);

  // before checkpoint, exact packing: its runner runs in checkpoint's no-grad forward (nothing
  // saved) and in each re-run (what the re-run saves is packed); the trajectory is bitwise the same
  const double exact = run("[{name: test-act-compress, pack: exact}, checkpoint]", "exact");
  c = compressed(lm.dir / "exact");
  EXPECT_EQ(c.forward_calls, steps * blocks) << "the runner of the plugin listed before checkpoint was dropped";
  EXPECT_EQ(c.forward_packed, 0);
  EXPECT_EQ(c.backward_calls, steps * blocks) << "the re-run in backward did not call the block through it";
  EXPECT_GT(c.backward_packed, 0);
  EXPECT_EQ(exact, ckpt);

  // before checkpoint, bf16 packing: the re-run's saved tensors are rounded, so the trajectory
  // moves, a little
  const double bf16 = run("[{name: test-act-compress, pack: bf16}, checkpoint]", "bf16");
  c = compressed(lm.dir / "bf16");
  EXPECT_EQ(c.backward_calls, steps * blocks);
  EXPECT_GT(c.backward_packed, 0);
  EXPECT_NE(bf16, ckpt) << "bf16 packing in the re-run left the losses bitwise those of checkpoint alone";
  EXPECT_NEAR(bf16, ckpt, 1e-2 * std::abs(ckpt));

  // after checkpoint: it wraps checkpoint's runner, so it sees the forward only, where autograd
  // saves what checkpoint keeps (each block's input)
  const double after = run("[checkpoint, {name: test-act-compress, pack: exact}]", "after");
  c = compressed(lm.dir / "after");
  EXPECT_EQ(c.forward_calls, steps * blocks);
  EXPECT_GT(c.forward_packed, 0);
  EXPECT_EQ(c.backward_calls, 0);
  EXPECT_EQ(after, ckpt);
}

// Activation checkpointing switched on when a run is resumed (after an out-of-memory, as a
// DeepSpeed user would): a plugin that keeps no state may be added, and the run goes on as the
// one resumed without it does. A plugin with state of its own, one that replaces the optimizer,
// and a plugin of the checkpoint's left out are refused, each saying why.
TEST(Checkpoint, APluginThatKeepsNoStateMayBeAddedOnResume) {
  const tt::test::TinyLm lm("ckpt-resume-add");
  const std::string trainer = "threads: 1, batch_size: 4, max_steps: 4, checkpoint_every: 2";
  ASSERT_EQ(lm.run("plain", "[]", trainer).rc, 0);
  ASSERT_EQ(lm.run("ckpt", "[checkpoint]", trainer).rc, 0);
  const auto resume = [&](const std::string& from, const std::string& to, const std::string& plugins) {
    fs::copy(lm.dir / from, lm.dir / to, fs::copy_options::recursive);
    return tt::test::run(tt::test::tt_run_bin() + " -q --resume " + (lm.dir / to).string() + " trainer.max_steps=6" +
                         (plugins.empty() ? "" : " 'plugins=" + plugins + "'"));
  };
  const auto with = resume("plain", "added", "[checkpoint]");
  ASSERT_EQ(with.rc, 0) << with.output;
  EXPECT_HAS(tt::test::read_file(lm.dir / "added" / "log.txt"), "resuming with plugins added: [checkpoint] (they keep "
                                                                 "no state)");
  EXPECT_EQ(lm.summary("added")["plugins"], nlohmann::json::array({"checkpoint"}));
  EXPECT_EQ(lm.summary("added")["steps"], 6);
  const auto without = resume("plain", "same", "");
  ASSERT_EQ(without.rc, 0) << without.output;
  const auto a = tt::test::step_lines(lm.dir / "added" / "metrics.jsonl"),
             b = tt::test::step_lines(lm.dir / "same" / "metrics.jsonl");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 4; i < 6; ++i) {
    const double la = nlohmann::json::parse(a[i])["loss"].get<double>();
    const double lb = nlohmann::json::parse(b[i])["loss"].get<double>();
    EXPECT_NEAR(la, lb, 1e-6 * std::abs(lb)) << "step " << i + 1;
  }
  for (const auto& [plugins, why] : std::vector<std::pair<std::string, std::string>>{
           {"[adam8bit]", "'adam8bit' cannot be added on resume (it replaces or wraps the optimizer, whose state the "
                          "checkpoint holds)"},
           {"[oom-guard]", "'oom-guard' cannot be added on resume (it keeps state of its own in checkpoints, which "
                           "this one does not have)"}}) {
    const std::string to = "refused-" + plugins.substr(1, plugins.size() - 2);
    const auto r = resume("plain", to, plugins);
    EXPECT_EQ(r.rc, 2) << plugins << "\n" << r.output;
    EXPECT_HAS(r.output,
               "was written with plugins [] but the pipeline now has [" + plugins.substr(1, plugins.size() - 2) + "]");
    EXPECT_HAS(r.output, why);
    EXPECT_HAS(r.output, "model.init_from=");
  }
  // lora keeps no state of its own, but adds adapters to the model: the checkpoint's model lacks them
  const auto lora = resume("plain", "refused-lora", "[lora]");
  EXPECT_EQ(lora.rc, 2) << lora.output;
  EXPECT_HAS(lora.output, "does not fit the model of this pipeline");
  EXPECT_HAS(lora.output, "plugins added on resume: [lora], and a plugin that changes the model's parameters (as lora "
                          "adds adapters) cannot be");
  const auto dropped = resume("ckpt", "dropped", "[]");
  EXPECT_EQ(dropped.rc, 2) << dropped.output;
  EXPECT_HAS(dropped.output, "was written with plugins [checkpoint] but the pipeline now has []: resume with the same "
                             "plugins in the same order");
}
