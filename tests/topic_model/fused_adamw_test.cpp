#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tt/fused_adamw.h"

namespace {
torch::optim::AdamWOptions opts() { return torch::optim::AdamWOptions(0.05).betas({0.9, 0.999}).eps(1e-8).weight_decay(1e-5); }

// Runs `steps` steps with the same gradient sequence on a copy of `init`.
template <class Opt>
torch::Tensor train(const torch::Tensor& init, int steps, torch::optim::AdamWOptions o) {
  auto p = init.clone().requires_grad_();
  Opt opt(std::vector<torch::Tensor>{p}, o);
  torch::manual_seed(11);
  for (int s = 0; s < steps; ++s) {
    p.mutable_grad() = torch::randn_like(p) * (s % 3 == 0 ? 0.0 : 1.0);  // include zero gradients
    opt.step();
  }
  return p.detach();
}
}  // namespace

TEST(FusedAdamW, MatchesTorchAdamW) {
  torch::manual_seed(5);
  auto init = torch::rand({1000, 10}) * 0.1;
  auto a = train<tt::FusedAdamW>(init, 60, opts());
  auto b = train<torch::optim::AdamW>(init, 60, opts());
  EXPECT_LT(((a - b).abs().max() / b.abs().max()).item<double>(), 1e-6);
}

TEST(FusedAdamW, StateIsInterchangeableWithTorchAdamW) {
  torch::manual_seed(6);
  auto p = (torch::rand({64, 8})).requires_grad_();
  tt::FusedAdamW fused(std::vector<torch::Tensor>{p}, opts());
  p.mutable_grad() = torch::randn_like(p);
  fused.step();
  std::stringstream buf;
  torch::serialize::OutputArchive out;
  fused.save(out);
  out.save_to(buf);
  torch::optim::AdamW plain(std::vector<torch::Tensor>{p}, opts());
  torch::serialize::InputArchive in;
  in.load_from(buf);
  plain.load(in);
  auto q = p.detach().clone().requires_grad_();
  auto g = torch::randn_like(p);
  p.mutable_grad() = g;
  plain.step();
  // the fused optimizer continuing from its own state gives the same parameters
  tt::FusedAdamW again(std::vector<torch::Tensor>{q}, opts());
  std::stringstream buf2;
  torch::serialize::OutputArchive out2;
  fused.save(out2);
  out2.save_to(buf2);
  torch::serialize::InputArchive in2;
  in2.load_from(buf2);
  again.load(in2);
  q.mutable_grad() = g;
  again.step();
  EXPECT_LT((p.detach() - q.detach()).abs().max().item<double>(), 1e-6);
}

TEST(FusedAdamW, SparseGradientUpdatesOnlyItsRows) {
  torch::manual_seed(8);
  auto p = torch::rand({20, 4}).requires_grad_();
  auto before = p.detach().clone();
  tt::FusedAdamW opt(std::vector<torch::Tensor>{p}, opts());
  auto rows = torch::tensor({3, 7}, torch::kLong);
  auto vals = torch::randn({2, 4});
  p.mutable_grad() = torch::sparse_coo_tensor(rows.unsqueeze(0), vals, {20, 4});
  opt.step();
  auto changed = (p.detach() != before).any(1);
  EXPECT_EQ(changed.sum().item<int64_t>(), 2);
  EXPECT_TRUE(changed[3].item<bool>() && changed[7].item<bool>());
  // those rows moved exactly as a dense AdamW step on them would
  auto q = before.index_select(0, rows).clone().requires_grad_();
  torch::optim::AdamW ref(std::vector<torch::Tensor>{q}, opts());
  q.mutable_grad() = vals;
  ref.step();
  EXPECT_LT((p.detach().index_select(0, rows) - q.detach()).abs().max().item<double>(), 1e-6);
}

// dense_rows: a sparse gradient means zeros elsewhere; every row updates, bitwise as if the
// zeros had been materialized — over many steps, with rows unsorted, uncoalesced and repeated
// across steps, and with the parallel row walk split at arbitrary places (2 threads).
TEST(FusedAdamW, DenseRowsFromSparseGradientsEqualDenseGradientsBitwise) {
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    torch::manual_seed(9);
    const int64_t n = 5000, k = 10;  // several parallel chunks
    auto init = torch::rand({n, k}) * 0.1;
    auto a = init.clone().requires_grad_(), b = init.clone().requires_grad_();
    tt::FusedAdamW sparse_opt(std::vector<torch::Tensor>{a}, opts());
    tt::FusedAdamW dense_opt(std::vector<torch::Tensor>{b}, opts());
    sparse_opt.dense_rows(a);
    EXPECT_TRUE(sparse_opt.has_dense_rows(a));
    EXPECT_FALSE(dense_opt.has_dense_rows(b));
    for (int s = 0; s < 40; ++s) {
      auto rows = torch::randperm(n, torch::kLong).narrow(0, 0, 16);  // unsorted, unique
      if (s % 5 == 0) rows = torch::cat({rows, rows.narrow(0, 0, 3)});  // repeated rows add up
      if (s == 7) rows = torch::tensor({int64_t{0}, n - 1});     // the first and last rows
      auto vals = torch::randn({rows.size(0), k});
      a.mutable_grad() = torch::sparse_coo_tensor(rows.unsqueeze(0), vals, {n, k});
      b.mutable_grad() = torch::zeros({n, k}).index_add_(0, rows, vals);
      sparse_opt.step();
      dense_opt.step();
      ASSERT_TRUE(torch::equal(a.detach(), b.detach())) << "step " << s << ", " << threads << " threads";
    }
  }
  at::set_num_threads(1);
}
