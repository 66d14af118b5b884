// The fused loss and gradient against tinytopics' dense formula and a direct computation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "poisson_loss.h"
#include "tt/meter.h"

using tt::topic::BatchCounts;
using tt::topic::nonzeros_of;
using tt::topic::nonzeros_on_device;
using tt::topic::poisson_nmf_loss;
using tt::topic::poisson_nmf_loss_nonzeros;
using tt::topic::poisson_nmf_loss_reference;

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
    // against the exact gradient: L's within 2e-5 (its softmax backward subtracts nearly equal
    // numbers; measured 2e-6 to 7e-6 with -O3 and with -O1, since F's softmax sums in double),
    // F's within 2e-6 (measured under 4e-7)
    EXPECT_LT(rel(gL.to(torch::kDouble), Ld.grad()), 2e-5) << density;
    EXPECT_LT(rel(gF.to(torch::kDouble), Fd.grad()), 2e-6) << density;
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
  // A term whose reconstruction is below 1e-10 contributes x*log(1e-10) and no gradient; the
  // mass term's gradient is exactly zero, so a batch whose only count sits below the floor
  // passes no gradient at all. Document 0: P = softmax(0, -g), topics F_raw rows (0, -g) and
  // (-g, 0); its one count (x = 2) is at term 1, whose reconstruction is 2 exp(-g) / (1 + exp(-g))^2.
  auto case_of = [](float g) {
    Problem p;
    p.L_raw = torch::tensor({{0.0f, -g}}).requires_grad_();
    p.F_raw = torch::tensor({{0.0f, -g}, {-g, 0.0f}}).requires_grad_();
    p.x = torch::tensor({{0.0f, 2.0f}});
    p.index = torch::tensor({0}, torch::kLong);
    return p;
  };
  auto below = case_of(60.0f);  // reconstruction ~1.7e-26
  auto fused = poisson_nmf_loss(below.L_raw, below.F_raw, below.index, nonzeros_of(below.x), false);
  const double floor_term = -2.0 * std::log(1e-10);  // -x log(1e-10), plus the mass of one row
  EXPECT_NEAR(fused.item<double>(), 1.0 + floor_term, 1e-5 * floor_term);
  fused.backward();
  EXPECT_EQ(below.L_raw.grad().abs().max().item<float>(), 0.0f) << below.L_raw.grad();
  EXPECT_EQ(below.F_raw.grad().abs().max().item<float>(), 0.0f) << below.F_raw.grad();
  // The dense formula through autograd agrees: clamp_min passes no gradient below the floor,
  // and the mass term's gradient is zero up to float rounding.
  auto Lr = below.L_raw.detach().clone().requires_grad_(), Fr = below.F_raw.detach().clone().requires_grad_();
  auto ref = poisson_nmf_loss_reference(Lr, Fr, below.index, below.x);
  EXPECT_NEAR(fused.item<double>(), ref.item<double>(), 1e-4 * std::abs(ref.item<double>()));
  ref.backward();
  EXPECT_LT(Lr.grad().abs().max().item<float>(), 1e-6f);
  EXPECT_LT(Fr.grad().abs().max().item<float>(), 1e-6f);

  // Above the floor the same count has a gradient (-x / xhat times the softmax's), and it
  // matches the exact one in double: the zero above is the floor's doing.
  auto above = case_of(10.0f);  // reconstruction ~9e-5
  auto loss = poisson_nmf_loss(above.L_raw, above.F_raw, above.index, nonzeros_of(above.x), false);
  loss.backward();
  auto Ld = above.L_raw.detach().to(torch::kDouble).requires_grad_();
  auto Fd = above.F_raw.detach().to(torch::kDouble).requires_grad_();
  poisson_nmf_loss_reference(Ld, Fd, above.index, above.x.to(torch::kDouble)).backward();
  EXPECT_GT(above.L_raw.grad().abs().max().item<float>(), 0.5f);
  EXPECT_GT(above.F_raw.grad().abs().max().item<float>(), 0.5f);
  EXPECT_LT(rel(above.L_raw.grad().to(torch::kDouble), Ld.grad()), 1e-4);
  EXPECT_LT(rel(above.F_raw.grad().to(torch::kDouble), Fd.grad()), 1e-4);
}

// The loss off the CPU: LibTorch's operations over the non-zeros through autograd. In double it
// is the dense formula's value and gradients to rounding; in float it agrees with the kernels;
// the non-zeros found by nonzeros_on_device (any device) give what nonzeros_of's give; and a
// document twice in the batch counts twice, as in the dense formula.
TEST(PoissonLoss, NonzerosThroughAutogradMatchTheDenseFormulaAndTheKernels) {
  for (double density : {0.05, 0.5, 1.0}) {
    auto p = problem(50, 200, 10, 16, density, 11);
    p.index.index_put_({1}, p.index[0]);  // document index[0] twice
    auto Ld = p.L_raw.detach().to(torch::kDouble).requires_grad_(), Fd = p.F_raw.detach().to(torch::kDouble).requires_grad_();
    auto exact = poisson_nmf_loss_reference(Ld, Fd, p.index, p.x.to(torch::kDouble));
    exact.backward();
    auto Ln = p.L_raw.detach().to(torch::kDouble).requires_grad_(), Fn = p.F_raw.detach().to(torch::kDouble).requires_grad_();
    auto nz = poisson_nmf_loss_nonzeros(Ln, Fn, p.index, nonzeros_of(p.x));
    nz.backward();
    EXPECT_NEAR(nz.item<double>(), exact.item<double>(), 1e-12 * std::abs(exact.item<double>())) << density;
    EXPECT_LT(rel(Ln.grad(), Ld.grad()), 1e-10) << density;
    EXPECT_LT(rel(Fn.grad(), Fd.grad()), 1e-10) << density;

    // float, from the non-zeros nonzeros_on_device finds (row-major order, not the gather's)
    auto Lf = p.L_raw.detach().clone().requires_grad_(), Ff = p.F_raw.detach().clone().requires_grad_();
    const BatchCounts on_device = nonzeros_on_device(p.x);
    const BatchCounts gathered = nonzeros_of(p.x);
    ASSERT_EQ(on_device.vals.numel(), gathered.vals.numel()) << density;
    EXPECT_EQ(on_device.vals.sum().item<double>(), gathered.vals.sum().item<double>()) << density;
    auto f = poisson_nmf_loss_nonzeros(Lf, Ff, p.index, on_device);
    f.backward();
    auto kernels = poisson_nmf_loss(p.L_raw, p.F_raw, p.index, gathered, false);
    EXPECT_NEAR(f.item<double>(), exact.item<double>(), 1e-5 * std::abs(exact.item<double>())) << density;
    EXPECT_NEAR(f.item<double>(), kernels.item<double>(), 1e-5 * std::abs(exact.item<double>())) << density;
    // computed in double inside (P and Q), so at float rounding of the exact gradients (measured
    // 3e-8 to 7e-8), where the dense formula in float is 1e-5 to 1e-4 off (measured)
    auto Lr = p.L_raw.detach().clone().requires_grad_(), Fr = p.F_raw.detach().clone().requires_grad_();
    poisson_nmf_loss_reference(Lr, Fr, p.index, p.x).backward();
    EXPECT_LT(rel(Lf.grad().to(torch::kDouble), Ld.grad()), 1e-6) << density;
    EXPECT_LT(rel(Ff.grad().to(torch::kDouble), Fd.grad()), 1e-6) << density;
    EXPECT_LT(rel(Lf.grad().to(torch::kDouble), Ld.grad()), rel(Lr.grad().to(torch::kDouble), Ld.grad())) << density;
  }
}

// What it holds: nnz x k and k x m tensors (in double), not the batch x terms reconstruction of
// the dense formula. At 64 documents of about 50 distinct terms over 20,000 terms, k 10, tt's
// meter measures the forward and backward's peak of each: the dense formula's b x m float tensors
// are 5 MiB each; a k x m double tensor is 1.5 MiB, the non-zeros' 3,200 x 10 ones 250 KiB.
TEST(PoissonLoss, NonzerosThroughAutogradHoldFarLessThanTheDenseFormula) {
  auto p = problem(100, 20000, 10, 64, 50.0 / 20000, 5);
  auto& meter = tt::Meter::global();
  meter.install();
  auto peak_of = [&](bool dense) {
    auto L = p.L_raw.detach().clone().requires_grad_(), F = p.F_raw.detach().clone().requires_grad_();
    const BatchCounts counts = nonzeros_of(p.x);
    meter.reset_peak();
    const int64_t before = meter.current();
    auto loss = dense ? poisson_nmf_loss_reference(L, F, p.index, p.x) : poisson_nmf_loss_nonzeros(L, F, p.index, counts);
    loss.backward();
    return meter.peak() - before;
  };
  const int64_t dense = peak_of(true), nonzeros = peak_of(false);
  const int64_t reconstruction = 64 * 20000 * 4, topics_terms_double = 10 * 20000 * 8;
  std::printf("peak of the forward and backward: dense formula %.2f MiB, non-zeros %.2f MiB\n", dense / 1048576.0,
              nonzeros / 1048576.0);
  EXPECT_GE(dense, 3 * reconstruction) << "the dense formula's peak";
  // F in double, its softmax, their gradients and the index_select backward's buffer: about
  // five k x m doubles (measured 4.6 MiB); the non-zeros' tensors add a few hundred KiB
  EXPECT_LT(nonzeros, 4 * topics_terms_double) << "the non-zeros' peak (dense: " << dense << ")";
  EXPECT_LT(nonzeros * 3, dense) << "the non-zeros' peak " << nonzeros << " against the dense " << dense;
}
