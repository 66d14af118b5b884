// The fused loss and gradient against tinytopics' dense formula and a direct computation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "poisson_loss.h"

using namespace tt::topic;

namespace {
struct Problem {
  torch::Tensor L_raw, F_raw, index, x;
};

Problem problem(int64_t n, int64_t m, int64_t k, int64_t b, double density, uint64_t seed) {
  torch::manual_seed(seed);
  Problem p;
  p.L_raw = (torch::rand({n, k}) * 0.1).requires_grad_();
  p.F_raw = (torch::rand({k, m}) * 0.1).requires_grad_();
  p.index = torch::randperm(n, torch::kLong).slice(0, 0, b);
  auto counts = torch::poisson(torch::full({b, m}, 3.0));
  p.x = counts * (torch::rand({b, m}) < density).to(torch::kFloat);
  p.x.index_put_({torch::indexing::Slice(), 0}, 1.0);  // no empty rows
  return p;
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}
}  // namespace

TEST(PoissonLoss, MatchesDirectComputationInDouble) {
  auto p = problem(40, 30, 5, 8, 0.3, 1);
  auto loss = poisson_nmf_loss(p.L_raw, p.F_raw, p.index, nonzeros_of(p.x), false);
  // the formula, term by term, in double
  auto L = torch::softmax(p.L_raw.detach().to(torch::kDouble).index_select(0, p.index), 1);
  auto F = torch::softmax(p.F_raw.detach().to(torch::kDouble), 1);
  auto xhat = L.mm(F);
  auto x = p.x.to(torch::kDouble);
  double direct = (xhat - x * torch::log(torch::clamp_min(xhat, 1e-10))).sum().item<double>();
  EXPECT_NEAR(loss.item<double>(), direct, 1e-5 * std::abs(direct));
}

TEST(PoissonLoss, LossAndGradientsMatchTinytopicsDenseAutograd) {
  for (double density : {0.05, 0.5, 1.0}) {
    auto p = problem(50, 200, 10, 16, density, 7);
    auto fused = poisson_nmf_loss(p.L_raw, p.F_raw, p.index, nonzeros_of(p.x), false);
    fused.backward();
    auto gL = p.L_raw.grad().clone(), gF = p.F_raw.grad().clone();
    // tinytopics' dense formula through autograd, in float (what tinytopics computes) and in
    // double (the exact value both approximate)
    auto ref = poisson_nmf_loss_reference(p.L_raw.detach().requires_grad_(), p.F_raw.detach().requires_grad_(),
                                          p.index, p.x);
    auto Ld = p.L_raw.detach().to(torch::kDouble).requires_grad_(), Fd = p.F_raw.detach().to(torch::kDouble).requires_grad_();
    auto exact = poisson_nmf_loss_reference(Ld, Fd, p.index, p.x.to(torch::kDouble));
    exact.backward();
    EXPECT_NEAR(fused.item<double>(), ref.item<double>(), 1e-5 * std::abs(ref.item<double>())) << density;
    EXPECT_NEAR(fused.item<double>(), exact.item<double>(), 1e-5 * std::abs(exact.item<double>())) << density;
    // float gradients carry ~1e-4 relative rounding (the dense path's cancelling linear term
    // adds to it); against the exact gradient the fused one must be that good
    EXPECT_LT(rel(gL.to(torch::kDouble), Ld.grad()), 1e-4) << density;
    EXPECT_LT(rel(gF.to(torch::kDouble), Fd.grad()), 1e-4) << density;
    // rows outside the batch get no gradient
    auto outside = torch::ones({50}, torch::kBool);
    outside.index_put_({p.index}, false);
    EXPECT_EQ(gL.index({outside}).abs().max().item<float>(), 0.0f);
  }
}

TEST(PoissonLoss, SparseGradientHoldsTheBatchRows) {
  auto p = problem(30, 20, 4, 6, 0.4, 3);
  auto dense = poisson_nmf_loss(p.L_raw, p.F_raw, p.index, nonzeros_of(p.x), false);
  dense.backward();
  auto gL = p.L_raw.grad().clone();
  p.L_raw.mutable_grad().reset();
  auto lazy = poisson_nmf_loss(p.L_raw, p.F_raw, p.index, nonzeros_of(p.x), true);
  lazy.backward();
  ASSERT_TRUE(p.L_raw.grad().is_sparse());
  EXPECT_EQ(p.L_raw.grad()._nnz(), 6);
  EXPECT_TRUE(torch::allclose(p.L_raw.grad().to_dense(), gL));
}

TEST(PoissonLoss, TinyReconstructionsPassNoGradientBelowTheFloor) {
  // A term whose reconstruction is below 1e-10 contributes x*log(1e-10) and no gradient.
  auto L_raw = torch::tensor({{0.0f, -60.0f}}).requires_grad_();
  auto F_raw = torch::tensor({{0.0f, -60.0f}, {-60.0f, 0.0f}}).requires_grad_();
  auto x = torch::tensor({{0.0f, 2.0f}});
  auto idx = torch::tensor({0}, torch::kLong);
  auto fused = poisson_nmf_loss(L_raw, F_raw, idx, nonzeros_of(x), false);
  auto ref = poisson_nmf_loss_reference(L_raw, F_raw, idx, x);
  EXPECT_NEAR(fused.item<double>(), ref.item<double>(), 1e-4 * std::abs(ref.item<double>()));
}
