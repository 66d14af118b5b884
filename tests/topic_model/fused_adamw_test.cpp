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

// defer_rows: the absent rows' zero-gradient steps applied in closed form when a row is next
// used and every kDeferWindow steps. Against the dense update with materialized zeros, over
// several windows, with the learning rate changing every step, rows caught up before they are
// read, rows with tiny gradients (eps dominates: the step-by-step fallback), rows never
// touched (momentum zero) and repeated rows.
namespace {
void expect_close(const torch::Tensor& a, const torch::Tensor& b, double tol, const std::string& what) {
  const double scale = std::max(1e-30, b.abs().max().item<double>());
  EXPECT_LT((a - b).abs().max().item<double>() / scale, tol) << what;
}
}  // namespace

TEST(FusedAdamW, DeferredRowsMatchDenseUpdatesToRounding) {
  // The dense float32 update is itself rounded every step: both are measured against the same
  // dense update in float64, and the deferred one must be as close to it as the dense one.
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    torch::manual_seed(21);
    const int64_t n = 3000, k = 10, never = 2900;  // rows >= never get no gradient at all
    auto init = torch::rand({n, k}) * 0.1;
    auto a = init.clone().requires_grad_(), b = init.clone().requires_grad_();
    auto c = init.to(torch::kDouble).requires_grad_();
    tt::FusedAdamW deferred(std::vector<torch::Tensor>{a}, opts());
    tt::FusedAdamW dense(std::vector<torch::Tensor>{b}, opts());
    torch::optim::AdamW exact(std::vector<torch::Tensor>{c}, opts());
    deferred.defer_rows(a);
    EXPECT_TRUE(deferred.has_dense_rows(a));
    auto err = [&](const torch::Tensor& x, const torch::Tensor& rows) {
      return (x.detach().index_select(0, rows).to(torch::kDouble) - c.detach().index_select(0, rows)).abs().max()
          .item<double>();
    };
    double worst_deferred = 0, worst_dense = 0;
    const int steps = 3 * tt::FusedAdamW::kDeferWindow + 17;
    for (int s = 0; s < steps; ++s) {
      const double lr = 0.01 + 0.04 * 0.5 * (1 + std::cos(3.14159265 * s / steps));
      for (auto* o : std::vector<torch::optim::Optimizer*>{&deferred, &dense, &exact})
        static_cast<torch::optim::AdamWOptions&>(o->param_groups()[0].options()).lr(lr);
      auto rows = torch::randperm(never, torch::kLong).narrow(0, 0, 16);
      if (s % 7 == 0) rows = torch::cat({rows, rows.narrow(0, 0, 2)});
      auto vals = torch::randn({rows.size(0), k});
      // rows 0..99 have gradients around 1e-9: sqrt(v) ~ eps (the step-by-step fallback);
      // rows 100..199 around 1e-4: sqrt(v) ~ 3e-6, where the series in eps / sqrt(v) matters
      const auto n_rows = rows.size(0);
      vals.mul_(torch::where(rows < 100, torch::full({n_rows}, 1e-9),
                             torch::where(rows < 200, torch::full({n_rows}, 1e-4), torch::ones({n_rows})))
                    .unsqueeze(1));
      deferred.catch_up_rows(a, rows);  // as the model does before its forward reads them
      worst_deferred = std::max(worst_deferred, err(a, rows));
      worst_dense = std::max(worst_dense, err(b, rows));
      a.mutable_grad() = torch::sparse_coo_tensor(rows.unsqueeze(0), vals, {n, k});
      b.mutable_grad() = torch::zeros({n, k}).index_add_(0, rows, vals);
      c.mutable_grad() = b.grad().to(torch::kDouble);
      deferred.step();
      dense.step();
      exact.step();
    }
    EXPECT_GT(worst_dense, 0);
    EXPECT_LE(worst_deferred, 2 * worst_dense + 1e-7) << "rows as read, " << threads << " threads";
    deferred.flush();
    auto all = torch::arange(n), tiny = torch::arange(0, 100), small = torch::arange(100, 200),
         untouched = torch::arange(never, n);
    EXPECT_LE(err(a, all), 2 * err(b, all) + 1e-7) << "parameters";
    EXPECT_LE(err(a, tiny), 2 * err(b, tiny) + 1e-9) << "eps-dominated rows";
    EXPECT_LE(err(a, small), 2 * err(b, small) + 1e-9) << "rows where eps / sqrt(v) ~ 1e-3";
    EXPECT_LE(err(a, untouched), 2 * err(b, untouched) + 1e-9) << "untouched rows";
    EXPECT_LT(err(a, all), 1e-5);
    auto state = [](torch::optim::Optimizer& o) -> torch::optim::AdamWParamState& {
      return static_cast<torch::optim::AdamWParamState&>(*o.state().begin()->second);
    };
    EXPECT_EQ(state(deferred).step(), state(dense).step());
    for (auto which : {0, 1}) {
      auto sa = which ? state(deferred).exp_avg_sq() : state(deferred).exp_avg();
      auto sb = which ? state(dense).exp_avg_sq() : state(dense).exp_avg();
      auto sc = which ? state(exact).exp_avg_sq() : state(exact).exp_avg();
      const double ea = (sa.to(torch::kDouble) - sc).abs().max().item<double>();
      const double eb = (sb.to(torch::kDouble) - sc).abs().max().item<double>();
      EXPECT_LE(ea, 2 * eb + 1e-12) << (which ? "exp_avg_sq" : "exp_avg");
    }
    EXPECT_FALSE(torch::equal(a.detach(), init)) << "nothing trained";
  }
  at::set_num_threads(1);
}

// Saving flushes (the archive holds the dense state); a loaded optimizer re-bases on the
// loaded step count and goes on deferring.
TEST(FusedAdamW, DeferredRowsSaveTheDenseStateAndResume) {
  torch::manual_seed(22);
  const int64_t n = 500, k = 4;
  auto init = torch::rand({n, k});
  auto a = init.clone().requires_grad_(), b = init.clone().requires_grad_();
  tt::FusedAdamW deferred(std::vector<torch::Tensor>{a}, opts());
  tt::FusedAdamW dense(std::vector<torch::Tensor>{b}, opts());
  deferred.defer_rows(a);
  auto grads = [&](int s) {
    torch::manual_seed(100 + s);
    auto rows = torch::randperm(n, torch::kLong).narrow(0, 0, 8);
    auto vals = torch::randn({8, k});
    return std::make_pair(rows, vals);
  };
  auto step = [&](tt::FusedAdamW& d, torch::Tensor& pd, int s) {
    auto [rows, vals] = grads(s);
    d.catch_up_rows(pd, rows);
    pd.mutable_grad() = torch::sparse_coo_tensor(rows.unsqueeze(0), vals, {n, k});
    d.step();
    b.mutable_grad() = torch::zeros({n, k}).index_add_(0, rows, vals);
    dense.step();
  };
  for (int s = 0; s < 50; ++s) step(deferred, a, s);
  std::stringstream buf;
  torch::serialize::OutputArchive out;
  deferred.save(out);
  out.save_to(buf);
  expect_close(a.detach(), b.detach(), 1e-5, "flushed by save");
  auto c = a.detach().clone().requires_grad_();
  tt::FusedAdamW resumed(std::vector<torch::Tensor>{c}, opts());
  resumed.defer_rows(c);
  torch::serialize::InputArchive in;
  in.load_from(buf);
  resumed.load(in);
  for (int s = 50; s < 120; ++s) step(resumed, c, s);
  resumed.flush();
  expect_close(c.detach(), b.detach(), 1e-5, "resumed");
}
