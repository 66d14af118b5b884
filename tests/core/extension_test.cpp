// The trainer-side extension points of tt/extension.h (gradient ready, loss hook, teacher) and
// the model-side switches it declares (keep float32, lean re-run).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <optional>

#include "test_support.h"
#include "tt/autocast.h"
#include "tt/extension.h"
#include "tt/meter.h"
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
  t.fit();
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
  tt::nn::SavedTensorPack fn() {
    return [this](const at::Tensor& saved, bool leaf) -> tt::nn::SavedTensorUnpack {
      if (leaf) {
        ++kept;
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
  DiskPack disk{tt::test::temp_dir("saved-hooks")};
  auto run = [&](bool hooks, int64_t* held) {
    block.zero_grad();
    at::Tensor in = x.clone().requires_grad_(true);
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
  EXPECT_GE(disk.kept, 4);  // fc1 and fc2 weights, LayerNorm's weight, the input
  // A tensor saved by two nodes is written twice: the files hold at least what the graph kept.
  EXPECT_GE(disk.packed_bytes, held_plain);
  EXPECT_LE(held_packed, held_plain / 100) << held_plain << " " << held_packed;
  ASSERT_EQ(plain.size(), packed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], packed[i])) << i;
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
