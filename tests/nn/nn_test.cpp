#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "tt/autocast.h"
#include "tt/meter.h"
#include "tt/nn.h"

namespace {

struct ScaleAdapter : tt::nn::LinearAdapter {
  at::Tensor w;
  explicit ScaleAdapter(int64_t in, int64_t out) { w = register_parameter("w", torch::randn({out, in})); }
  at::Tensor forward(const at::Tensor& x) override { return torch::matmul(x, w.t()); }
};

struct CountingKernel : tt::nn::AttentionKernel {
  int calls = 0;
  tt::nn::NaiveAttentionKernel inner;
  std::string name() const override { return "counting"; }
  at::Tensor forward(const tt::nn::AttentionInputs& in) override {
    ++calls;
    return inner.forward(in);
  }
};

struct TestBlock : tt::nn::Block {
  tt::nn::Attention attn{nullptr};
  tt::nn::MLP mlp{nullptr};
  TestBlock() {
    attn = register_module("attn", tt::nn::Attention(tt::nn::AttentionImpl::Options{16, 2, true, false, true, 0, 1e4}));
    mlp = register_module("mlp", tt::nn::MLP(16, 32));
  }
  at::Tensor forward(const at::Tensor& x) override { return x + mlp->forward(x + attn->forward(x)); }
};

struct RecordingRunner : tt::nn::BlockRunner {
  std::vector<int64_t> seen;
  std::string name() const override { return "recording"; }
  at::Tensor run(int64_t i, tt::nn::Block& b, const at::Tensor& x) override {
    seen.push_back(i);
    return b.forward(x);
  }
};

tt::nn::AttentionImpl::Options attn_opts(bool causal, bool rotary) {
  tt::nn::AttentionImpl::Options o;
  o.d_model = 16;
  o.n_heads = 4;
  o.causal = causal;
  o.rotary = rotary;
  return o;
}

}  // namespace

TEST(NnLinear, IsAffineAndAdaptersAddTheirOutput) {
  torch::manual_seed(1);
  tt::nn::Linear lin(8, 5);
  auto x = torch::randn({3, 8});
  auto base = lin->forward(x);
  EXPECT_TRUE(torch::allclose(base, torch::matmul(x, lin->weight.t()) + lin->bias));
  auto a = std::make_shared<ScaleAdapter>(8, 5);
  lin->add_adapter("lora", a);
  EXPECT_TRUE(torch::allclose(lin->forward(x), base + a->forward(x)));
  bool found = false;
  for (const auto& p : lin->named_parameters())
    if (p.key() == "adapter_lora.w") found = true;
  EXPECT_TRUE(found) << "adapter parameters belong to the model";
  EXPECT_THROW(lin->add_adapter("lora", a), std::exception);
  lin->remove_adapter("lora");
  EXPECT_TRUE(torch::equal(lin->forward(x), base));
  EXPECT_EQ(lin->named_parameters().size(), 2u);
}

TEST(NnAttention, CausalOutputsIgnoreTheFuture) {
  torch::manual_seed(2);
  tt::nn::Attention attn(attn_opts(true, true));
  auto x = torch::randn({2, 6, 16});
  auto y = attn->forward(x);
  auto x2 = x.clone();
  x2.slice(1, 4).add_(torch::randn({2, 2, 16}));  // change positions 4, 5
  auto y2 = attn->forward(x2);
  EXPECT_TRUE(torch::allclose(y.slice(1, 0, 4), y2.slice(1, 0, 4), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(y.slice(1, 4), y2.slice(1, 4)));
}

TEST(NnAttention, NaiveKernelIsTheFormula) {
  torch::manual_seed(3);
  tt::nn::AttentionInputs in;
  in.q = torch::randn({1, 2, 5, 4});
  in.k = torch::randn({1, 2, 5, 4});
  in.v = torch::randn({1, 2, 5, 4});
  in.causal = true;
  auto out = tt::nn::NaiveAttentionKernel().forward(in);
  auto s = torch::matmul(in.q, in.k.transpose(-2, -1)) / 2.0;
  auto mask = torch::ones({5, 5}).tril().to(torch::kBool);
  auto expect = torch::matmul(torch::softmax(s.masked_fill(mask.logical_not(), -1e30), -1), in.v);
  EXPECT_TRUE(torch::allclose(out, expect, 1e-5, 1e-6));
}

TEST(NnAttention, PaddedKeysAreIgnored) {
  torch::manual_seed(4);
  tt::nn::Attention attn(attn_opts(false, false));
  auto x = torch::randn({1, 5, 16});
  auto keep = torch::tensor({true, true, true, false, false}).view({1, 5});
  auto y = attn->forward(x, keep);
  auto x2 = x.clone();
  x2.slice(1, 3).add_(5.0);
  auto y2 = attn->forward(x2, keep);
  EXPECT_TRUE(torch::allclose(y.slice(1, 0, 3), y2.slice(1, 0, 3), 1e-5, 1e-6));
}

TEST(NnAttention, KernelIsSwappable) {
  tt::nn::Attention attn(attn_opts(true, false));
  auto k = std::make_shared<CountingKernel>();
  attn->set_kernel(k);
  EXPECT_EQ(attn->kernel().name(), "counting");
  attn->forward(torch::randn({1, 3, 16}));
  EXPECT_EQ(k->calls, 1);
  attn->set_kernel(nullptr);
  EXPECT_EQ(attn->kernel().name(), "naive");
}

TEST(NnRotary, DotProductsDependOnlyOnRelativePosition) {
  torch::manual_seed(5);
  auto q = torch::randn({8}), k = torch::randn({8});
  auto Q = tt::nn::apply_rotary(q.expand({1, 1, 10, 8}).contiguous());
  auto K = tt::nn::apply_rotary(k.expand({1, 1, 10, 8}).contiguous());
  auto dot = [&](int i, int j) { return (Q[0][0][i] * K[0][0][j]).sum().item<double>(); };
  EXPECT_NEAR(dot(3, 1), dot(7, 5), 1e-4);
  EXPECT_NEAR(dot(2, 2), dot(9, 9), 1e-4);
  EXPECT_NEAR(Q[0][0][6].norm().item<double>(), q.norm().item<double>(), 1e-5);  // a rotation
}

TEST(NnNorms, RmsAndLayerNorm) {
  torch::manual_seed(6);
  auto x = torch::randn({4, 32}) * 3 + 1;
  auto r = tt::nn::RMSNorm(32)->forward(x);
  EXPECT_TRUE(torch::allclose(r.pow(2).mean(-1), torch::ones({4}), 1e-3, 1e-4));
  auto l = tt::nn::LayerNorm(32)->forward(x);
  EXPECT_TRUE(torch::allclose(l.mean(-1), torch::zeros({4}), 1e-4, 1e-5));
}

TEST(NnBlockStack, RunnerSeesEveryBlockAndNamesAreDotted) {
  torch::manual_seed(7);
  auto root = std::make_shared<torch::nn::Module>();
  tt::nn::BlockStack blocks;
  for (int i = 0; i < 3; ++i) blocks->push_back(std::make_shared<TestBlock>());
  root->register_module("blocks", blocks.ptr());
  auto x = torch::randn({2, 4, 16});
  auto plain = blocks->forward(x);
  auto runner = std::make_shared<RecordingRunner>();
  blocks->set_runner(runner);
  EXPECT_TRUE(torch::equal(blocks->forward(x), plain));
  EXPECT_EQ(runner->seen, (std::vector<int64_t>{0, 1, 2}));
  std::vector<std::string> names;
  for (const auto& [name, lin] : tt::nn::find_modules<tt::nn::LinearImpl>(*root)) names.push_back(name);
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.1.attn.qkv"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.2.mlp.fc2"), names.end());
  EXPECT_EQ(names.size(), 12u);  // 3 blocks x (qkv, proj, fc1, fc2)
}

namespace {

// Gradients of sum(out * w) with respect to each of `inputs`, for a fixed random weighting w.
std::vector<at::Tensor> grads_of(const at::Tensor& out, const std::vector<at::Tensor>& inputs) {
  torch::manual_seed(99);
  auto w = torch::randn(out.sizes(), out.options().dtype(torch::kFloat));
  return torch::autograd::grad({(out.to(torch::kFloat) * w).sum()}, inputs);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>();
}

}  // namespace

TEST(NnAttention, NaiveKernelGradientsAreTheFormulas) {
  // the naive kernel's own backward (softmax-times-v in place) against autograd through the
  // textbook composite: causal with T == S and T < S (scale and mask inside one product), T > S
  // (queries without keys), and not causal
  for (auto [T, S, causal] : std::vector<std::tuple<int64_t, int64_t, bool>>{
           {9, 9, true}, {5, 11, true}, {11, 5, true}, {9, 7, false}}) {
    torch::manual_seed(10 + T + S);
    tt::nn::AttentionInputs in;
    in.q = torch::randn({2, 3, T, 8}, torch::requires_grad());
    in.k = torch::randn({2, 3, S, 8}, torch::requires_grad());
    in.v = torch::randn({2, 3, S, 8}, torch::requires_grad());
    in.causal = causal;
    auto out = tt::nn::NaiveAttentionKernel().forward(in);
    auto s = torch::matmul(in.q, in.k.transpose(-2, -1)) / std::sqrt(8.0);
    if (causal)
      s = s.masked_fill(torch::ones({T, S}, torch::kBool).tril(S - T).logical_not(),
                        -std::numeric_limits<float>::infinity());
    auto expect = torch::matmul(torch::softmax(s, -1), in.v);
    const auto label = "T=" + std::to_string(T) + " S=" + std::to_string(S) + (causal ? " causal" : "");
    auto finite = expect.isfinite();  // T > S: the first rows attend to nothing (NaN both ways)
    EXPECT_TRUE(torch::equal(out.isfinite(), finite)) << label;
    EXPECT_TRUE(torch::allclose(out.masked_fill(finite.logical_not(), 0), expect.masked_fill(finite.logical_not(), 0),
                                1e-5, 1e-6))
        << label;
    if (T > S) continue;  // NaN rows make every gradient NaN in both
    auto got = grads_of(out, {in.q, in.k, in.v}), want = grads_of(expect, {in.q, in.k, in.v});
    for (size_t i = 0; i < 3; ++i) EXPECT_LE(max_diff(got[i], want[i]), 1e-5) << label << " grad " << "qkv"[i];
  }
}

TEST(NnMlp, RecomputedActivationGivesTheSameOutputAndGradients) {
  torch::manual_seed(11);
  tt::nn::MLP mlp(16, 48);
  auto x = torch::randn({3, 5, 16}, torch::requires_grad());
  std::vector<at::Tensor> inputs{x, mlp->fc1->weight, mlp->fc1->bias, mlp->fc2->weight, mlp->fc2->bias};
  auto plain = mlp->forward(x);
  auto want = grads_of(plain, inputs);
  mlp->recompute_activation = true;
  auto lean = mlp->forward(x);
  auto got = grads_of(lean, inputs);
  EXPECT_LE(max_diff(lean, plain), 1e-6);
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_LE(max_diff(got[i], want[i]), 1e-5) << "input " << i;
  {  // under bf16 autocast: the same bf16 products, so the same values to bf16 rounding
    tt::amp::AutocastState ac;
    ac.cpu = true;
    ac.cpu_dtype = torch::kBFloat16;
    tt::amp::AutocastScope scope(ac);
    mlp->recompute_activation = false;
    auto p16 = mlp->forward(x);
    auto w16 = grads_of(p16, inputs);
    mlp->recompute_activation = true;
    auto l16 = mlp->forward(x);
    auto g16 = grads_of(l16, inputs);
    EXPECT_EQ(l16.scalar_type(), torch::kBFloat16);
    EXPECT_LE(max_diff(l16, p16), 1e-6);
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_EQ(g16[i].scalar_type(), inputs[i].scalar_type()) << "input " << i;
      EXPECT_LE(max_diff(g16[i], w16[i]), 2e-2 * w16[i].abs().max().item<double>()) << "input " << i;
    }
  }
}

TEST(NnLoss, CrossEntropyIsTorchsWithLessMemory) {
  torch::manual_seed(12);
  // 1000 rows of 700 classes: several row blocks and a partial last one
  auto logits = (torch::randn({1000, 700}) * 3).requires_grad_();
  auto target = torch::randint(0, 700, {1000}, torch::kLong);
  auto want = torch::nn::functional::cross_entropy(logits, target);
  auto got = tt::nn::cross_entropy(logits, target);
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-6 * want.item<double>());
  auto gw = torch::autograd::grad({want * 3.0}, {logits})[0];
  auto gg = torch::autograd::grad({got * 3.0}, {logits})[0];
  EXPECT_LE(max_diff(gg, gw), 1e-8);
  // bf16 logits: float32 math on the bf16 values, the gradient in bf16
  auto l16 = logits.detach().to(torch::kBFloat16).requires_grad_();
  auto ref16 = torch::nn::functional::cross_entropy(l16.detach().to(torch::kFloat).requires_grad_(), target);
  auto got16 = tt::nn::cross_entropy(l16, target);
  EXPECT_EQ(got16.scalar_type(), torch::kFloat);
  EXPECT_NEAR(got16.item<double>(), ref16.item<double>(), 1e-5 * ref16.item<double>());
  auto g16 = torch::autograd::grad({got16}, {l16})[0];
  EXPECT_EQ(g16.scalar_type(), torch::kBFloat16);
  auto l32 = l16.detach().to(torch::kFloat).requires_grad_();
  auto r16 = torch::autograd::grad({torch::nn::functional::cross_entropy(l32, target)}, {l32})[0];
  EXPECT_LE(max_diff(g16, r16), 1e-2 * r16.abs().max().item<double>());
  // Less memory: the most tensor bytes forward and backward add beside the logits, on tt's meter
  // (installed by the tests' main). Torch keeps the float32 log-probabilities for backward and
  // makes a gradient of them before the logits'; tt keeps neither.
  auto& meter = tt::Meter::global();
  ASSERT_TRUE(meter.installed());
  auto added_peak = [&](const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss) {
    const int64_t before = meter.foreground_current();  // what peak() counts
    meter.reset_peak();
    {
      auto l = loss(logits, target);
      auto g = torch::autograd::grad({l}, {logits})[0];
    }
    return meter.peak() - before;
  };
  const int64_t torch_peak = added_peak([](const at::Tensor& x, const at::Tensor& y) {
    return torch::nn::functional::cross_entropy(x, y);
  });
  const int64_t tt_peak = added_peak([](const at::Tensor& x, const at::Tensor& y) { return tt::nn::cross_entropy(x, y); });
  const auto logits_bytes = static_cast<int64_t>(logits.nbytes());
  EXPECT_GE(tt_peak, logits_bytes);  // the gradient of the logits is returned
  EXPECT_LE(tt_peak, torch_peak - logits_bytes) << "tt " << tt_peak << " B, torch " << torch_peak << " B";
  // bad input
  EXPECT_THROW(tt::nn::cross_entropy(logits, torch::full({1000}, 700, torch::kLong)), std::exception);
  EXPECT_THROW(tt::nn::cross_entropy(logits, torch::full({1000}, -1, torch::kLong)), std::exception);
  EXPECT_THROW(tt::nn::cross_entropy(logits, target.slice(0, 0, 10)), std::exception);
  EXPECT_THROW(tt::nn::cross_entropy(logits.view({10, 100, 700}), target), std::exception);
}
