// The in-context learner's structure, on a randomly initialised model (no pretraining needed):
// query rows attend to support rows only, predictions are equivariant to relabelling the classes.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include "tabular_model.h"
#include "table.h"
#include "tt/error.h"
#include "tt/options.h"

using tt::tab::Shape;
using tt::tab::TabularIcl;

namespace {
struct Table3 {
  at::Tensor x, fmask, y, support;
};
// One table: 20 support rows (3 classes) then 12 query rows, 5 features of 8.
Table3 make_table(int64_t seed) {
  torch::manual_seed(seed);
  Table3 t;
  t.x = torch::randn({1, 32, 5}) * 3 + 1;
  t.fmask = torch::ones({1, 5}, torch::kBool);
  t.y = torch::randint(0, 3, {1, 32}, torch::kLong);
  t.y.slice(1, 0, 3).copy_(torch::tensor({0, 1, 2}).view({1, 3}));  // every class in the support set
  t.support = torch::zeros({1, 32}, torch::kBool);
  t.support.slice(1, 0, 20).fill_(true);
  return t;
}
std::shared_ptr<TabularIcl> tiny() {
  torch::manual_seed(7);
  Shape s;
  s.max_features = 8;
  s.d_cell = 4;
  s.d_model = 32;
  s.n_layers = 2;
  s.n_heads = 4;
  s.d_ff = 64;
  auto m = std::make_shared<TabularIcl>(s, nullptr, 1024);
  m->eval();
  return m;
}
}  // namespace

TEST(TabularModel, PermutingQueryRowsOnlyPermutesTheirPredictions) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(1);
  at::Tensor p = m->probabilities(t.x, t.fmask, t.y, t.support);
  // Reverse the query rows (20..31), keep the support rows.
  std::vector<int64_t> order(32);
  for (int64_t i = 0; i < 20; ++i) order[i] = i;
  for (int64_t i = 20; i < 32; ++i) order[i] = 51 - i;
  at::Tensor idx = torch::tensor(order);
  at::Tensor p2 = m->probabilities(t.x.index_select(1, idx), t.fmask, t.y.index_select(1, idx), t.support);
  EXPECT_TRUE(torch::allclose(p2, p.index_select(1, idx), 1e-5, 1e-6));
  // Rows sum to one over the classes; a class with no support row gets nothing.
  EXPECT_TRUE(torch::allclose(p[0].slice(0, 20).sum(-1), torch::ones({12}), 1e-5, 1e-5));
  EXPECT_EQ(p[0].slice(0, 20).slice(1, 3).abs().max().item<float>(), 0.f);
}

TEST(TabularModel, AQueryPredictionIgnoresOtherQueryRowsAndTheirLabels) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(2);
  at::Tensor p = m->probabilities(t.x, t.fmask, t.y, t.support);
  // Change every query row but the first (features and labels): row 20's prediction stays.
  at::Tensor x2 = t.x.clone(), y2 = t.y.clone();
  x2.slice(1, 21).normal_(0, 10);
  y2.slice(1, 20).fill_(1);
  at::Tensor p2 = m->probabilities(x2, t.fmask, y2, t.support);
  EXPECT_TRUE(torch::allclose(p2[0][20], p[0][20], 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(p2[0][21], p[0][21], 1e-5, 1e-6));  // the changed rows do change
  // A changed support row changes the prediction (the check above can fail).
  at::Tensor x3 = t.x.clone();
  x3.slice(1, 0, 10).normal_(0, 10);
  EXPECT_FALSE(torch::allclose(m->probabilities(x3, t.fmask, t.y, t.support)[0][20], p[0][20], 1e-5, 1e-6));
}

TEST(TabularModel, RelabellingTheClassesPermutesThePredictedProbabilities) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(3);
  at::Tensor p = m->probabilities(t.x, t.fmask, t.y, t.support);
  const std::vector<int64_t> sigma = {2, 0, 1};  // class c becomes sigma[c]
  at::Tensor y2 = torch::tensor(sigma).index_select(0, t.y.view({-1})).view_as(t.y);
  at::Tensor p2 = m->probabilities(t.x, t.fmask, y2, t.support);
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_TRUE(torch::allclose(p2[0].slice(0, 20).select(1, sigma[c]), p[0].slice(0, 20).select(1, c), 1e-5, 1e-6))
        << "class " << c;
  // Class ids far apart (0,1,2 -> 9,4,7) give the same probabilities at those ids.
  const std::vector<int64_t> far = {9, 4, 7};
  at::Tensor y3 = torch::tensor(far).index_select(0, t.y.view({-1})).view_as(t.y);
  at::Tensor p3 = m->probabilities(t.x, t.fmask, y3, t.support);
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_TRUE(torch::allclose(p3[0].slice(0, 20).select(1, far[c]), p[0].slice(0, 20).select(1, c), 1e-5, 1e-6));
}

TEST(TabularModel, PaddingFeaturesAndScalingColumnsChangeNothing) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(4);
  at::Tensor p = m->probabilities(t.x, t.fmask, t.y, t.support);
  // The same table padded to 8 columns with the extra ones masked out.
  at::Tensor xp = torch::cat({t.x, torch::randn({1, 32, 3})}, 2);
  at::Tensor fp = torch::cat({t.fmask, torch::zeros({1, 3}, torch::kBool)}, 1);
  EXPECT_TRUE(torch::allclose(m->probabilities(xp, fp, t.y, t.support), p, 1e-5, 1e-6));
  // Per-table standardization: an affine change of a column's units changes nothing.
  at::Tensor xs = t.x * torch::tensor({100.f, 0.01f, 1.f, 5.f, 2.f}) + 1000;
  EXPECT_TRUE(torch::allclose(m->probabilities(xs, t.fmask, t.y, t.support), p, 1e-3, 1e-4));
  // More features than the model takes: a clear error.
  at::Tensor wide = torch::randn({1, 32, 9});
  try {
    m->probabilities(wide, torch::ones({1, 9}, torch::kBool), t.y, t.support);
    FAIL() << "expected an error";
  } catch (const tt::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 8 (model.max_features)"), std::string::npos) << e.what();
  }
}

TEST(TabularModel, LossIsTheQueryRowsNllAndTrainsOnOneTable) {
  auto m = tiny();
  m->train();
  auto t = make_table(5);
  tt::Batch b;
  b.set("x", t.x);
  b.set("feature_mask", t.fmask);
  b.set("y", t.y);
  b.set("support", t.support);
  b.set("n_classes", torch::full({1}, 3, torch::kLong));
  // The query rows' negative log-likelihood, row by row: -log p(label) from the predicted
  // class probabilities, averaged over the query rows (20..31). Support rows' labels are inputs,
  // not targets, and do not count.
  auto query_nll = [&](const at::Tensor& y) {
    torch::NoGradGuard ng;
    const at::Tensor p = m->probabilities(t.x, t.fmask, y, t.support).to(torch::kDouble);
    double sum = 0;
    int64_t rows = 0;
    for (int64_t i = 20; i < 32; ++i) {
      const int64_t label = y[0][i].item<int64_t>();
      if (label < 0 || label == 4) continue;  // unlabelled; a class no support row has (below)
      sum -= std::log(p[0][i][label].item<double>());
      ++rows;
    }
    EXPECT_GT(rows, 0);
    return sum / static_cast<double>(rows);
  };
  const double first = m->forward_loss(b).loss.item<double>();
  EXPECT_NEAR(first, query_nll(t.y), 1e-5 * first);
  EXPECT_NEAR(first, std::log(3.0), 0.6);  // about uniform at initialisation
  // A query row without a label (-1), or labelled with a class no support row has (4, which
  // the model cannot predict), is left out of the mean: the loss is the others' NLL.
  {
    at::Tensor y = t.y.clone();
    y[0][30] = -1;
    y[0][31] = 4;
    tt::Batch partial = b;
    partial.set("y", y);
    const double loss = m->forward_loss(partial).loss.item<double>();
    EXPECT_NEAR(loss, query_nll(y), 1e-5 * loss);
    EXPECT_NE(loss, first);
  }
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(3e-3));
  for (int i = 0; i < 60; ++i) {
    opt.zero_grad();
    m->forward_loss(b).loss.backward();
    opt.step();
  }
  const double last = m->forward_loss(b).loss.item<double>();
  EXPECT_LT(last, 0.5 * first);
  EXPECT_NEAR(last, query_nll(t.y), 1e-5 * last);
}

// The feature-order ensemble (model.ensemble): the mean of its members' probabilities. With one
// feature every order is the same, so any ensemble equals a single pass; with several features
// the members differ, the mean stays a distribution, and a one-member ensemble is the file's order.
TEST(TabularModel, FeatureOrderEnsembleAveragesItsMembers) {
  auto m = tiny();
  auto table = [](int64_t F) {
    tt::tab::Table t;
    t.class_names = {"a", "b", "c"};
    for (int64_t j = 0; j < F; ++j) t.feature_names.push_back("f" + std::to_string(j));
    torch::manual_seed(3);
    const at::Tensor x = torch::randn({30, F});
    t.x.assign(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    for (int64_t i = 0; i < 30; ++i) t.y.push_back(i % 3);
    t.rows = 30;
    return t;
  };
  const auto one = table(1), five = table(5);
  std::vector<int64_t> ctx(20), qs(10);
  for (int64_t i = 0; i < 20; ++i) ctx[i] = i;
  for (int64_t i = 0; i < 10; ++i) qs[i] = 20 + i;
  m->set_ensemble(1);
  const at::Tensor p1 = m->predict_table(one.subset(ctx), one.subset(qs));
  const at::Tensor q1 = m->predict_table(five.subset(ctx), five.subset(qs));
  m->set_ensemble(4);
  EXPECT_TRUE(torch::allclose(m->predict_table(one.subset(ctx), one.subset(qs)), p1, 1e-6, 1e-9));
  const at::Tensor q4 = m->predict_table(five.subset(ctx), five.subset(qs));
  EXPECT_FALSE(torch::allclose(q4, q1, 1e-4, 1e-6));
  EXPECT_TRUE(torch::allclose(q4.sum(1), torch::ones({10}, torch::kDouble), 1e-6, 1e-6));
}

// preprocess: quantile maps each feature through the context's empirical CDF, so the predictions
// (nearly: queries are interpolated) do not change when a feature goes through a strictly increasing function (exp, a cube); the
// standard preprocessing does change. Mixed alternates the two: with one feature it has two
// members, standard and quantile, and its probabilities are their mean.
TEST(TabularModel, QuantilePreprocessingIgnoresMonotoneTransformsAndMixedAveragesBoth) {
  using P = tt::tab::TabularIcl::Preprocess;
  auto m = tiny();
  auto table = [](int64_t F, bool warp) {
    tt::tab::Table t;
    t.class_names = {"a", "b"};
    for (int64_t j = 0; j < F; ++j) t.feature_names.push_back("f" + std::to_string(j));
    torch::manual_seed(5);
    at::Tensor x = torch::randn({40, F});
    if (warp) x = torch::cat({x.slice(1, 0, 1).exp(), x.slice(1, 1).pow(3)}, 1).contiguous();
    t.x.assign(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    for (int64_t i = 0; i < 40; ++i) t.y.push_back(x[i][0].item<float>() > (warp ? 1.0f : 0.0f) ? 1 : 0);
    t.rows = 40;
    return t;
  };
  std::vector<int64_t> ctx(30), qs(10);
  for (int64_t i = 0; i < 30; ++i) ctx[i] = i;
  for (int64_t i = 0; i < 10; ++i) qs[i] = 30 + i;
  const auto plain = table(3, false), warped = table(3, true);
  m->set_ensemble(3, P::Quantile);
  const at::Tensor a = m->predict_table(plain.subset(ctx), plain.subset(qs));
  const at::Tensor b = m->predict_table(warped.subset(ctx), warped.subset(qs));
  // Context rows map exactly; a query value between two context values is interpolated
  // linearly in value space, which a warp bends a little.
  const double quantile_change = (a - b).abs().max().item<double>();
  m->set_ensemble(3, P::Standard);
  const double standard_change = (m->predict_table(plain.subset(ctx), plain.subset(qs)) -
                                  m->predict_table(warped.subset(ctx), warped.subset(qs))).abs().max().item<double>();
  EXPECT_LT(quantile_change, 1e-3);
  EXPECT_GT(standard_change, 20 * quantile_change) << quantile_change;

  const auto one = table(1, false);
  m->set_ensemble(1, P::Standard);
  const at::Tensor s = m->predict_table(one.subset(ctx), one.subset(qs));
  m->set_ensemble(1, P::Quantile);
  const at::Tensor q = m->predict_table(one.subset(ctx), one.subset(qs));
  EXPECT_FALSE(torch::allclose(s, q, 1e-4, 1e-6));
  m->set_ensemble(8, P::Mixed);  // one feature: only two distinct members
  EXPECT_TRUE(torch::allclose(m->predict_table(one.subset(ctx), one.subset(qs)), (s + q) / 2, 1e-6, 1e-9));
}

// The schema refuses a value out of its range or not among its choices, naming the option, what it
// may be and the value; the check that compares two options stays in make_model. An unset shape
// option is the preset's.
TEST(TabularModel, SchemaRefusesBadValuesAndMakeModelTheInconsistentShape) {
  auto build = [](const std::string& yaml) -> std::string {
    try {
      auto m = tt::tab::make_model(tt::Options::parse(YAML::Load(yaml), tt::tab::model_schema(), "model", "p.yaml"), {});
      return m->describe();
    } catch (const tt::Error& e) {
      return e.what();
    }
  };
  auto has = [](const std::string& text, const std::string& part) {
    EXPECT_NE(text.find(part), std::string::npos) << text;
  };
  has(build("{preprocess: ranks}"), "model.preprocess must be one of standard | quantile | mixed, got 'ranks'");
  has(build("{size: huge}"), "model.size must be one of small | large, got 'huge'");
  const std::string narrow = build("{d_model: 8, n_heads: 2}");  // (core prints the bound 10 as "1e1" today)
  has(narrow, "model.d_model must be >= ");
  has(narrow, ", got 8");
  has(build("{ensemble: 0}"), "model.ensemble must be >= 1, got 0");
  has(build("{d_model: 30}"), "model.d_model (30) must be a multiple of n_heads (4)");
  has(build("{d_model: 32, n_layers: 1}"), "max_features 32, d_cell 16, d_model 32, 1 layers, 4 heads, d_ff 192");
}
