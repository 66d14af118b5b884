// amp: the GradScaler's arithmetic (planted infs skip the step and halve the scale, growth
// after the interval, state through a checkpoint), autocast scopes (nesting, restore),
// keep_fp32 on core's layers, activation checkpointing re-entering autocast in backward,
// and the plugin through tt-run (bf16 learning like fp32, bad options).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint.h"
#include "grad_scaler.h"
#include "test_support.h"
#include "transformer_model.h"
#include "tt/autocast.h"
#include "tt/error.h"
#include "tt/nn.h"

namespace fs = std::filesystem;

namespace {
tt::amp::GradScaler::Options scaler_options(int64_t interval = 2000) {
  tt::amp::GradScaler::Options o;
  o.growth_interval = interval;
  return o;
}

std::vector<nlohmann::json> metric_lines(const fs::path& file) {
  std::vector<nlohmann::json> out;
  for (const auto& line : tt::test::step_lines(file)) out.push_back(nlohmann::json::parse(line));
  return out;
}
}  // namespace

TEST(GradScaler, UnscalesExactlyAndFindsPlantedInfAndNaN) {
  tt::amp::GradScaler s(scaler_options());
  EXPECT_EQ(s.scale(), 65536.0);
  auto a = torch::randn({5, 3}).requires_grad_(), b = torch::randn({4}).requires_grad_();
  auto ga = torch::randn({5, 3}), gb = torch::randn({4});
  a.mutable_grad() = ga * s.scale();
  b.mutable_grad() = gb * s.scale();
  EXPECT_FALSE(s.unscale({a, b}));
  EXPECT_TRUE(torch::equal(a.grad(), ga));  // a power of two: exact
  EXPECT_TRUE(torch::equal(b.grad(), gb));
  EXPECT_DOUBLE_EQ(s.scale_loss(torch::tensor(1.5)).item<double>(), 1.5 * 65536);
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    a.mutable_grad() = ga.clone();
    b.mutable_grad() = gb.clone();
    b.mutable_grad()[2] = bad;
    EXPECT_TRUE(s.unscale({a, b})) << bad;
  }
  // sparse gradients (the topic model's rows of L) are checked too
  auto c = torch::zeros({10, 2}).requires_grad_();
  c.mutable_grad() = torch::sparse_coo_tensor(torch::tensor({{int64_t{3}}}),
                                              torch::tensor({{1.0f, std::numeric_limits<float>::infinity()}}), {10, 2});
  EXPECT_TRUE(s.unscale({c}));
  auto d = torch::zeros({3}).requires_grad_();  // no gradient: nothing to judge
  EXPECT_FALSE(s.unscale({d}));
}

TEST(GradScaler, BacksOffOnInfAndGrowsAfterTheInterval) {
  tt::amp::GradScaler s(scaler_options(3));
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 2);
  s.update(true);  // inf: halve, count from zero again
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.skipped(), 1);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 32768.0);
  s.update(false);  // third finite step in a row
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, StateRoundTripsThroughAnArchive) {
  tt::amp::GradScaler s(scaler_options(5));
  s.update(true);
  s.update(false);
  s.update(false);
  std::stringstream buf;
  torch::serialize::OutputArchive out;
  s.save(out);
  out.save_to(buf);
  tt::amp::GradScaler t(scaler_options(5));
  torch::serialize::InputArchive in;
  in.load_from(buf);
  t.load(in);
  EXPECT_EQ(t.scale(), 32768.0);
  EXPECT_EQ(t.growth_tracker(), 2);
  EXPECT_EQ(t.skipped(), 1);
  auto bad = scaler_options();
  bad.backoff = 1.5;
  EXPECT_THROW(tt::amp::GradScaler{bad}, tt::Error);  // a precondition; pipelines are refused by the schema
}

TEST(Autocast, ScopesNestAndRestore) {
  ASSERT_FALSE(tt::amp::current_autocast().any());
  tt::amp::AutocastState on;
  on.cpu = true;
  on.cpu_dtype = torch::kBFloat16;
  auto w = torch::randn({8, 8}), x = torch::randn({2, 8});
  {
    tt::amp::AutocastScope outer(on);
    EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kBFloat16);
    {
      tt::amp::NoAutocast off;
      EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kFloat);
    }
    EXPECT_TRUE(tt::amp::current_autocast().cpu) << "the inner scope must restore the outer one";
    EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(tt::amp::current_autocast().any());
  EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kFloat);
}

TEST(Autocast, KeepFp32LayersStayFloat32) {
  tt::amp::AutocastState on;
  on.cpu = true;
  tt::nn::Linear lin(8, 4);
  tt::nn::LayerNorm ln(8);
  tt::nn::RMSNorm rms(8);
  auto x = torch::randn({2, 8});
  tt::amp::AutocastScope scope(on);
  EXPECT_EQ(lin->forward(x).scalar_type(), torch::kBFloat16);
  lin->keep_fp32 = true;
  ln->keep_fp32 = true;
  rms->keep_fp32 = true;
  auto y = lin->forward(x.to(torch::kBFloat16));  // a bf16 input is taken up to float32
  EXPECT_EQ(y.scalar_type(), torch::kFloat);
  tt::amp::NoAutocast off;
  EXPECT_TRUE(torch::allclose(y, lin->forward(x.to(torch::kBFloat16).to(torch::kFloat)), 0, 0));
  EXPECT_EQ(ln->forward(x.to(torch::kBFloat16)).scalar_type(), torch::kFloat);
  EXPECT_EQ(rms->forward(x.to(torch::kBFloat16)).scalar_type(), torch::kFloat);
}

// A model whose first layer is a Linear feeds LayerNorm autocast's bf16 with its float32 weights
// (LibTorch 1.13's CPU kernel refused the mix): normalized in float32, returned as bf16, and the
// gradients reach the weights and the input.
TEST(Autocast, LayerNormTakesABf16InputBehindALinear) {
  tt::nn::Linear lin(8, 8);
  tt::nn::LayerNorm ln(8);
  auto x = torch::randn({4, 8});
  tt::amp::AutocastState on;
  on.cpu = true;
  on.cpu_dtype = torch::kBFloat16;
  at::Tensor h, y;
  {
    tt::amp::AutocastScope scope(on);
    h = lin->forward(x);
    ASSERT_EQ(h.scalar_type(), torch::kBFloat16);
    y = ln->forward(h);
  }
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto want = torch::layer_norm(h.to(torch::kFloat), {8}, ln->weight, ln->bias, 1e-5).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y, want));
  y.to(torch::kFloat).pow(2).sum().backward();
  EXPECT_TRUE(ln->weight.grad().defined() && ln->weight.grad().abs().sum().item<double>() > 0);
  EXPECT_TRUE(lin->weight.grad().defined() && lin->weight.grad().abs().sum().item<double>() > 0);
}

TEST(Autocast, TiedHeadSharesTheEmbeddingAndCanStayFloat32) {
  auto w = torch::randn({16, 8}, torch::requires_grad());
  tt::nn::TiedLinear head(w);
  EXPECT_TRUE(head->parameters().empty()) << "the tied weight belongs to the embedding";
  auto x = torch::randn({2, 8});
  tt::amp::AutocastState on;
  on.cpu = true;
  tt::amp::AutocastScope scope(on);
  EXPECT_EQ(head->forward(x).scalar_type(), torch::kBFloat16);
  head->keep_fp32 = true;
  auto y = head->forward(x.to(torch::kBFloat16));
  EXPECT_EQ(y.scalar_type(), torch::kFloat);
  y.sum().backward();
  EXPECT_TRUE(w.grad().defined()) << "gradients must reach the embedding weight";
}

// Checkpointed blocks re-run in backward under the autocast state of their forward: the
// gradients equal the non-checkpointed bf16 ones (without re-entry the recomputation would
// run in float32 and differ at bf16's precision).
TEST(Autocast, CheckpointRecomputesUnderTheForwardsAutocast) {
  tt::lm::Shape sh;
  sh.vocab = 64;
  sh.d_model = 32;
  sh.n_layers = 2;
  sh.n_heads = 4;
  sh.d_ff = 64;
  sh.seq_len = 16;
  sh.dropout = 0;
  torch::manual_seed(0);
  tt::lm::TransformerLM m(sh, nullptr, {}, "");
  m.train();
  auto ids = torch::randint(0, 64, {2, 17}, torch::kLong);
  auto grads = [&]() {
    m.zero_grad();
    tt::Batch b;
    b.set("input", ids.slice(1, 0, -1));
    b.set("target", ids.slice(1, 1));
    at::Tensor loss;
    {
      tt::amp::AutocastState on;
      on.cpu = true;
      tt::amp::AutocastScope scope(on);
      loss = m.forward_loss(b).loss;
    }
    loss.backward();
    std::vector<at::Tensor> g;
    for (const auto& p : m.parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto base = grads();
  m.blocks->set_runner(std::make_shared<tt::ckpt::CheckpointRunner>(tt::ckpt::select_blocks("all", 2, 1, {})));
  auto ckpt = grads();
  m.blocks->set_runner(nullptr);
  double worst = 0, norm = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    worst = std::max(worst, (base[i] - ckpt[i]).abs().max().item<double>());
    norm = std::max(norm, base[i].abs().max().item<double>());
  }
  EXPECT_LE(worst, 1e-6 * norm) << "checkpointed bf16 gradients differ from plain bf16 ones";
}

namespace {
// The tiny LM at 2 layers, seq 64, AdamW 3e-3, 2 threads.
struct LmRun : tt::test::TinyLm {
  LmRun() : TinyLm("amp") {
    model = "{name: transformer, d_model: 64, n_layers: 2, n_heads: 4, sample_tokens: 0}";
    seq_len = 64;
  }
  tt::test::RunResult run(const std::string& tag, const std::string& plugins, const std::string& trainer) const {
    return TinyLm::run(tag, plugins, "batch_size: 8, threads: 2, " + trainer, "optimizer: {name: adamw, lr: 0.003}\n");
  }
};
}  // namespace

TEST(AmpPlugin, Bf16LearnsLikeFloat32WithLessActivationMemory) {
  LmRun r;
  auto a = r.run("fp32", "[]", "max_steps: 25");
  ASSERT_EQ(a.rc, 0) << a.output;
  auto b = r.run("bf16", "[{name: amp, keep_fp32: [ln_f]}]", "max_steps: 25");
  ASSERT_EQ(b.rc, 0) << b.output;
  EXPECT_NE(b.output.find("amp: bf16 autocast on cpu"), std::string::npos) << b.output;
  // an x86 CPU without bf16 instructions is said to make bf16 slower, not faster; one with them is not
#if defined(__x86_64__) || defined(__i386__)
  const std::string flags = tt::test::run("grep -m1 -w -o -E 'amx_bf16|avx512_bf16' /proc/cpuinfo").output;
  EXPECT_EQ(b.output.find("this CPU has no bf16 instructions") != std::string::npos, flags.empty())
      << flags << b.output;
#endif
  const auto sa = r.summary("fp32"), sb = r.summary("bf16");
  // The mean of the last 5 steps' losses: one step's loss depends on how the CPU's bf16 matmul
  // rounds (AVX512-BF16, AMX or a float32 fallback) more than the curve does.
  auto last5 = [&](const std::string& tag) {
    const auto lines = metric_lines(r.dir / tag / "metrics.jsonl");
    EXPECT_EQ(lines.size(), 25u);
    double sum = 0;
    for (size_t i = lines.size() - 5; i < lines.size(); ++i) sum += lines[i]["loss"].get<double>();
    return sum / 5;
  };
  const double la = last5("fp32"), lb = last5("bf16");
  EXPECT_LT(std::abs(lb - la), 0.02 * la) << "fp32 " << la << ", bf16 " << lb;
  EXPECT_DOUBLE_EQ(sb["final_loss"].get<double>(), metric_lines(r.dir / "bf16" / "metrics.jsonl").back()["loss"].get<double>());
  const auto first = metric_lines(r.dir / "fp32" / "metrics.jsonl").front()["loss"].get<double>();
  EXPECT_LT(lb, 0.8 * first) << "bf16 did not learn";
  EXPECT_LT(sb["memory"]["activations_bytes"].get<double>(), 0.8 * sa["memory"]["activations_bytes"].get<double>());
}

// The scaler through the trainer: the scale follows the schedule of finite steps, and a run
// resumed from a checkpoint continues the same scale (the state is in the checkpoint).
TEST(AmpPlugin, ScalerStateContinuesThroughResume) {
  LmRun r;
  const std::string amp = "[{name: amp, grad_scaler: on, init_scale: 1024, growth_interval: 2}]";
  auto a = r.run("straight", amp, "max_steps: 6, checkpoint_every: 3, keep_checkpoints: 5");
  ASSERT_EQ(a.rc, 0) << a.output;
  auto lines = metric_lines(r.dir / "straight" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  const double expected[] = {1024, 2048, 2048, 4096, 4096, 8192};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(lines[i]["amp_scale"].get<double>(), expected[i]) << "step " << i + 1;
  // crash after step 3: resume from its checkpoint
  auto res = r.resume_copy("straight", "resumed", 3);
  ASSERT_EQ(res.rc, 0) << res.output;
  EXPECT_EQ(r.summary("resumed")["steps_this_run"], 3);  // steps 4 to 6: from the checkpoint, not from 0
  auto after = metric_lines(r.dir / "resumed" / "metrics.jsonl");
  ASSERT_GE(after.size(), 3u);
  for (size_t i = after.size() - 3; i < after.size(); ++i)
    EXPECT_EQ(after[i]["amp_scale"].get<double>(), expected[after[i]["step"].get<int>() - 1]) << after[i].dump();
  EXPECT_EQ(r.summary("resumed")["final_loss"], r.summary("straight")["final_loss"]);
}

TEST(AmpPlugin, BadOptionsAreConfigErrors) {
  LmRun r;
  struct Case {
    std::string plugins, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"[{name: amp, dtype: fp16}]", "CUDA"},
           {"[{name: amp, dtype: fp8}]", "fp8"},
           {"[{name: amp, grad_scaler: maybe}]", "grad_scaler"},
           {"[{name: amp, growth_interval: 0}]", "growth_interval"},
           {"[{name: amp, backoff_factor: 1.5}]", "backoff_factor must be in (0, 1), got 1.5"},
           {"[{name: amp, keep_fp32: [nosuchlayer]}]", "nosuchlayer"},
       }) {
    auto res = r.run("bad", c.plugins, "max_steps: 1");
    EXPECT_EQ(res.rc, 2) << c.plugins << "\n" << res.output;
    EXPECT_NE(res.output.find("amp"), std::string::npos) << res.output;
    EXPECT_NE(res.output.find(c.expect), std::string::npos) << c.plugins << "\n" << res.output;
  }
}
