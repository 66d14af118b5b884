#include <gtest/gtest.h>
#include <torch/torch.h>

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
