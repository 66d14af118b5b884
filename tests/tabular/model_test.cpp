// The in-context learner's structure, on a randomly initialised model (no pretraining needed):
// query rows attend to support rows only, predictions are equivariant to relabelling the classes.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>

#include "tabular_model.h"
#include "table.h"
#include "test_support.h"
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
// The table as the training batch forward_loss takes, claiming `classes` classes.
tt::Batch batch_of(const Table3& t, int64_t classes) {
  tt::Batch b;
  b.set("x", t.x);
  b.set("feature_mask", t.fmask);
  b.set("y", t.y);
  b.set("support", t.support);
  b.set("n_classes", torch::full({1}, classes, torch::kLong));
  return b;
}
std::shared_ptr<TabularIcl> tiny(int64_t eval_chunk = 1024, std::shared_ptr<const tt::tab::Table> context = nullptr) {
  torch::manual_seed(7);
  Shape s;
  s.d_cell = 4;
  s.d_id = 8;
  s.d_model = 32;
  s.n_layers = 2;
  s.n_heads = 4;
  s.d_ff = 64;
  auto m = std::make_shared<TabularIcl>(s, std::move(context), eval_chunk);
  m->eval();
  return m;
}
// The model's probabilities with the features' identities drawn from seed 3 (the same every call).
at::Tensor probs(TabularIcl& m, const at::Tensor& x, const at::Tensor& fmask, const at::Tensor& y,
                 const at::Tensor& support) {
  return m.probabilities(x, fmask, y, support, m.feature_ids(x.size(2), 3).unsqueeze(0));
}
}  // namespace

TEST(TabularModel, PermutingQueryRowsOnlyPermutesTheirPredictions) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(1);
  at::Tensor p = probs(*m, t.x, t.fmask, t.y, t.support);
  // Reverse the query rows (20..31), keep the support rows.
  std::vector<int64_t> order(32);
  for (int64_t i = 0; i < 20; ++i) order[i] = i;
  for (int64_t i = 20; i < 32; ++i) order[i] = 51 - i;
  at::Tensor idx = torch::tensor(order);
  at::Tensor p2 = probs(*m, t.x.index_select(1, idx), t.fmask, t.y.index_select(1, idx), t.support);
  EXPECT_TRUE(torch::allclose(p2, p.index_select(1, idx), 1e-5, 1e-6));
  // Rows sum to one over the classes; a class with no support row gets nothing.
  EXPECT_TRUE(torch::allclose(p[0].slice(0, 20).sum(-1), torch::ones({12}), 1e-5, 1e-5));
  EXPECT_EQ(p[0].slice(0, 20).slice(1, 3).abs().max().item<float>(), 0.f);
}

TEST(TabularModel, AQueryPredictionIgnoresOtherQueryRowsAndTheirLabels) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(2);
  at::Tensor p = probs(*m, t.x, t.fmask, t.y, t.support);
  // Change every query row but the first (features and labels): row 20's prediction stays.
  at::Tensor x2 = t.x.clone(), y2 = t.y.clone();
  x2.slice(1, 21).normal_(0, 10);
  y2.slice(1, 20).fill_(1);
  at::Tensor p2 = probs(*m, x2, t.fmask, y2, t.support);
  EXPECT_TRUE(torch::allclose(p2[0][20], p[0][20], 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(p2[0][21], p[0][21], 1e-5, 1e-6));  // the changed rows do change
  // A changed support row changes the prediction (the check above can fail).
  at::Tensor x3 = t.x.clone();
  x3.slice(1, 0, 10).normal_(0, 10);
  EXPECT_FALSE(torch::allclose(probs(*m, x3, t.fmask, t.y, t.support)[0][20], p[0][20], 1e-5, 1e-6));
}

TEST(TabularModel, RelabellingTheClassesPermutesThePredictedProbabilities) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(3);
  at::Tensor p = probs(*m, t.x, t.fmask, t.y, t.support);
  const std::vector<int64_t> sigma = {2, 0, 1};  // class c becomes sigma[c]
  at::Tensor y2 = torch::tensor(sigma).index_select(0, t.y.view({-1})).view_as(t.y);
  at::Tensor p2 = probs(*m, t.x, t.fmask, y2, t.support);
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_TRUE(torch::allclose(p2[0].slice(0, 20).select(1, sigma[c]), p[0].slice(0, 20).select(1, c), 1e-5, 1e-6))
        << "class " << c;
  // Class ids far apart (0,1,2 -> 9,4,7) give the same probabilities at those ids.
  const std::vector<int64_t> far = {9, 4, 7};
  at::Tensor y3 = torch::tensor(far).index_select(0, t.y.view({-1})).view_as(t.y);
  at::Tensor p3 = probs(*m, t.x, t.fmask, y3, t.support);
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_TRUE(torch::allclose(p3[0].slice(0, 20).select(1, far[c]), p[0].slice(0, 20).select(1, c), 1e-5, 1e-6));
}

TEST(TabularModel, PaddingPermutingAndScalingFeaturesChangeNothing) {
  auto m = tiny();
  torch::NoGradGuard ng;
  auto t = make_table(4);
  const at::Tensor ids = m->feature_ids(8, 11).unsqueeze(0);  // [1, 8, d_id]
  at::Tensor p = m->probabilities(t.x, t.fmask, t.y, t.support, ids.slice(1, 0, 5));
  // The same table padded to 8 columns with the extra ones masked out.
  at::Tensor xp = torch::cat({t.x, torch::randn({1, 32, 3})}, 2);
  at::Tensor fp = torch::cat({t.fmask, torch::zeros({1, 3}, torch::kBool)}, 1);
  EXPECT_TRUE(torch::allclose(m->probabilities(xp, fp, t.y, t.support, ids), p, 1e-5, 1e-6));
  // The features in another order, each with its identity: no weight belongs to a position.
  const at::Tensor order = torch::tensor({3, 0, 4, 2, 1});
  EXPECT_TRUE(torch::allclose(
      m->probabilities(t.x.index_select(2, order), t.fmask, t.y, t.support, ids.slice(1, 0, 5).index_select(1, order)),
      p, 1e-5, 1e-6));
  // ... while other identities are another view of the table (the check above can fail).
  EXPECT_FALSE(torch::allclose(m->probabilities(t.x, t.fmask, t.y, t.support, ids.slice(1, 3, 8)), p, 1e-4, 1e-6));
  // Per-table standardization: an affine change of a column's units changes nothing.
  at::Tensor xs = t.x * torch::tensor({100.f, 0.01f, 1.f, 5.f, 2.f}) + 1000;
  EXPECT_TRUE(torch::allclose(m->probabilities(xs, t.fmask, t.y, t.support, ids.slice(1, 0, 5)), p, 1e-3, 1e-4));
  // Any feature count: 1 and 300 features go through the same weights.
  for (int64_t F : {1, 300}) {
    const at::Tensor q = probs(*m, torch::randn({1, 32, F}), torch::ones({1, F}, torch::kBool), t.y, t.support);
    EXPECT_TRUE(torch::allclose(q[0].slice(0, 20).sum(-1), torch::ones({12}), 1e-5, 1e-5)) << F;
  }
}

// infer() encodes the support rows once (each block's keys and values kept) and runs the queries
// and the support's own attention in chunks: the same probabilities as one forward over the
// stacked table, whatever the chunk.
TEST(TabularModel, InferWithTheSupportsKeyValueCacheEqualsTheFullForward) {
  auto t = make_table(6);
  for (int64_t chunk : {1024, 7}) {
    auto model = tiny(chunk);
    TabularIcl& m = *model;
    torch::NoGradGuard ng;
    const at::Tensor ids = m.feature_ids(5, 2);
    const at::Tensor full = m.probabilities(t.x, t.fmask, t.y, t.support, ids.unsqueeze(0))[0].slice(0, 20);
    const at::Tensor cached = m.infer(t.x[0].slice(0, 0, 20), t.y[0].slice(0, 0, 20), t.x[0].slice(0, 20), ids);
    EXPECT_TRUE(torch::allclose(cached, full, 1e-5, 1e-6)) << "chunk " << chunk << "\n" << (cached - full).abs().max();
  }
}

TEST(TabularModel, LossIsTheQueryRowsNllAndTrainsOnOneTable) {
  auto m = tiny();  // in eval mode forward_loss takes the identities of seed 0, as query_nll does
  auto t = make_table(5);
  tt::Batch b = batch_of(t, 3);
  // The query rows' negative log-likelihood, row by row: -log p(label) from the predicted
  // class probabilities, averaged over the query rows (20..31). Support rows' labels are inputs,
  // not targets, and do not count.
  auto query_nll = [&](const at::Tensor& y) {
    torch::NoGradGuard ng;
    const at::Tensor p = m->probabilities(t.x, t.fmask, y, t.support, m->feature_ids(5, 0).unsqueeze(0)).to(torch::kDouble);
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
  // In training every forward draws fresh feature identities (another view of the same table);
  // in evaluation they are fixed.
  m->train();
  EXPECT_NE(m->forward_loss(b).loss.item<double>(), m->forward_loss(b).loss.item<double>());
  m->eval();
  EXPECT_EQ(m->forward_loss(b).loss.item<double>(), first);
  // The gradient reaches every weight: 60 steps fit the one table (its identities fixed).
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

// A training table's feature identities come from its id_seed and the loss is each table's mean
// averaged over the tables: a table trains the same in any micro-batch and on any rank (the
// trainer weighs a micro-batch by its share of the tables), whatever each table's query count.
TEST(TabularModel, ATableTrainsTheSameInAnyMicroBatchOrRankWhateverItsQueryCount) {
  auto m = tiny();
  m->train();
  const Table3 a = make_table(5), b = make_table(6);
  Table3 few = b;  // 26 support rows, 6 query rows: half a's query count
  few.support.slice(1, 20, 26).fill_(true);
  const auto with_seed = [](tt::Batch batch, int64_t seed) {
    batch.set("id_seed", torch::full({1}, seed, torch::kLong));
    return batch;
  };
  const tt::Batch one = with_seed(batch_of(a, 3), 11), two = with_seed(batch_of(few, 3), 12);
  // The same id_seed, the same identities (in training without one, every forward draws anew).
  const double alone_a = m->forward_loss(one).loss.item<double>(), alone_b = m->forward_loss(two).loss.item<double>();
  EXPECT_EQ(m->forward_loss(one).loss.item<double>(), alone_a);
  EXPECT_NE(m->forward_loss(with_seed(batch_of(a, 3), 13)).loss.item<double>(), alone_a);
  // Both tables in one batch: the mean of the two tables' own losses (pooling their query rows
  // would weigh a by 12 rows and few by 6).
  tt::Batch both;
  for (const char* k : {"x", "feature_mask", "y", "support", "n_classes", "id_seed"})
    both.set(k, torch::cat({one.at(k), two.at(k)}, 0));
  EXPECT_NEAR(m->forward_loss(both).loss.item<double>(), 0.5 * (alone_a + alone_b), 1e-6);
}

// Training takes at most 10 classes per table; a batch with more is refused with the fix.
TEST(TabularModel, TrainingATableOfMoreThanTenClassesIsAClearError) {
  auto m = tiny();
  auto t = make_table(8);
  tt::Batch b = batch_of(t, 11);
  EXPECT_HAS(tt::test::config_error([&] { m->forward_loss(b); }),
             "a training table has 11 classes; training and fine-tuning take at most 10: "
             "run it as inference (trainer.max_steps: 0)");
  b.set("n_classes", torch::full({1}, 10, torch::kLong));
  EXPECT_NO_THROW(m->forward_loss(b));
}

namespace {
tt::tab::Table random_table(int64_t rows, int64_t F, int64_t C, uint64_t seed) {
  tt::tab::Table t;
  t.source = "random.csv";
  for (int64_t c = 0; c < C; ++c) t.class_names.push_back("c" + std::to_string(c));
  for (int64_t j = 0; j < F; ++j) t.feature_names.push_back("f" + std::to_string(j));
  torch::manual_seed(seed);
  const at::Tensor x = torch::randn({rows, F});
  t.x.assign(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  for (int64_t i = 0; i < rows; ++i) t.y.push_back(i % C);
  t.rows = rows;
  return t;
}
std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t i = begin; i < end; ++i) r.push_back(i);
  return r;
}
at::Tensor tensor_of(const tt::tab::Table& t) {
  return torch::from_blob(const_cast<float*>(t.x.data()), {t.rows, t.features()}, torch::kFloat).clone();
}
}  // namespace

// The ensemble (model.ensemble): member e sees the table with the feature identities of seed e;
// the prediction is the mean of the members' probabilities.
TEST(TabularModel, EnsembleAveragesMembersWithTheirOwnFeatureIdentities) {
  auto m = tiny();
  const auto five = random_table(30, 5, 3, 3);
  const auto ctx = five.subset(range(0, 20)), qs = five.subset(range(20, 30));
  at::Tensor y = torch::tensor(ctx.y);
  auto member = [&](uint64_t seed) {
    return m->infer(tensor_of(ctx), y, tensor_of(qs), m->feature_ids(5, seed)).slice(1, 0, 3).to(torch::kDouble);
  };
  m->set_ensemble(1);
  const at::Tensor p1 = m->predict_table(ctx, qs);
  EXPECT_TRUE(torch::allclose(p1, member(0), 1e-9, 1e-12));
  m->set_ensemble(3);
  const at::Tensor p3 = m->predict_table(ctx, qs);
  EXPECT_TRUE(torch::allclose(p3, (member(0) + member(1) + member(2)) / 3, 1e-9, 1e-12));
  EXPECT_FALSE(torch::allclose(p3, p1, 1e-4, 1e-6));
  EXPECT_TRUE(torch::allclose(p3.sum(1), torch::ones({10}, torch::kDouble), 1e-6, 1e-6));
}

// A table wider than model.member_features: each member a random subset of that many features,
// the subsets covering every feature, as many members as that takes (more than model.ensemble);
// beyond model.max_members a clear error naming the table and the options.
TEST(TabularModel, WideTablesGiveEachMemberAFeatureSubsetCoveringThemAll) {
  const auto wide = random_table(40, 250, 3, 4);
  const auto members = tt::tab::plan_members(wide, 2, 100, {TabularIcl::View::Standard}, 64);
  ASSERT_EQ(members.size(), 3u);  // ceil(250 / 100)
  std::vector<int> seen(250, 0);
  for (const auto& mb : members) {
    EXPECT_EQ(mb.features.size(), 100u);
    std::set<int64_t> distinct(mb.features.begin(), mb.features.end());
    EXPECT_EQ(distinct.size(), 100u);
    for (int64_t f : mb.features) ++seen[f];
  }
  for (int64_t f = 0; f < 250; ++f) EXPECT_GE(seen[f], 1) << "feature " << f;
  auto m = tiny();
  m->set_ensemble(2, {TabularIcl::View::Standard}, 100, 64);
  const at::Tensor p = m->predict_table(wide.subset(range(0, 30)), wide.subset(range(30, 40)));
  EXPECT_EQ(p.sizes(), (std::vector<int64_t>{10, 3}));
  EXPECT_TRUE(torch::allclose(p.sum(1), torch::ones({10}, torch::kDouble), 1e-6, 1e-6));
  m->set_ensemble(2, {TabularIcl::View::Standard}, 100, 2);
  const std::string refused =
      tt::test::config_error([&] { m->predict_table(wide.subset(range(0, 30)), wide.subset(range(30, 40))); });
  EXPECT_HAS(refused, "random.csv has 250 features and 3 classes: the ensemble needs 3 members "
                      "(model.ensemble is 2; seeing every feature in subsets of model.member_features (100) takes 3)");
  EXPECT_HAS(refused, "model.max_members (2)");
}

// More than 10 classes: each member tells the classes as 10 balanced groups, every pair of classes
// apart in at least two members; a class's probability is the normalized geometric mean of its
// groups' probabilities.
TEST(TabularModel, ManyClassesAreToldApartByGroupedMembers) {
  const auto t = random_table(104, 6, 26, 5);
  const auto members = tt::tab::plan_members(t, 4, 100, {TabularIcl::View::Standard}, 64);
  ASSERT_GE(members.size(), 4u);
  for (const auto& mb : members) {
    std::vector<int> size(10, 0);
    for (int64_t g : mb.group) ++size[g];
    EXPECT_EQ(*std::min_element(size.begin(), size.end()), 2);  // 26 classes: groups of 2 and 3
    EXPECT_EQ(*std::max_element(size.begin(), size.end()), 3);
  }
  for (int64_t a = 0; a < 26; ++a)
    for (int64_t b = a + 1; b < 26; ++b) {
      int apart = 0;
      for (const auto& mb : members) apart += mb.group[a] != mb.group[b];
      EXPECT_GE(apart, 2) << a << " " << b;
    }
  auto m = tiny();
  m->set_ensemble(4);
  const auto ctx = t.subset(range(0, 78)), qs = t.subset(range(78, 104));
  const at::Tensor p = m->predict_table(ctx, qs);
  ASSERT_EQ(p.sizes(), (std::vector<int64_t>{26, 26}));
  // by hand: each member's group probabilities, the log of each class's group, mean, softmax
  at::Tensor sum = torch::zeros({26, 26}, torch::kDouble);
  for (size_t e = 0; e < members.size(); ++e) {
    at::Tensor y = torch::empty({78}, torch::kLong);
    for (int64_t i = 0; i < 78; ++i) y[i] = members[e].group[ctx.y[i]];
    const at::Tensor g = m->infer(tensor_of(ctx), y, tensor_of(qs), m->feature_ids(6, e)).to(torch::kDouble);
    for (int64_t c = 0; c < 26; ++c) sum.select(1, c) += g.select(1, members[e].group[c]).clamp_min(1e-12).log();
  }
  EXPECT_TRUE(torch::allclose(p, torch::softmax(sum / static_cast<double>(members.size()), 1), 1e-9, 1e-12));
}

// preprocess: quantile maps each feature through the context's empirical CDF, so the predictions
// (nearly: queries are interpolated) do not change when a feature goes through a strictly increasing function (exp, a cube); the
// standard preprocessing does change. Mixed alternates the two: with one feature it has two
// members, standard and quantile, and its probabilities are their mean.
TEST(TabularModel, QuantilePreprocessingIgnoresMonotoneTransformsAndMixedAveragesBoth) {
  using V = tt::tab::TabularIcl::View;
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
  m->set_ensemble(3, {V::Quantile});
  const at::Tensor a = m->predict_table(plain.subset(ctx), plain.subset(qs));
  const at::Tensor b = m->predict_table(warped.subset(ctx), warped.subset(qs));
  // Context rows map exactly; a query value between two context values is interpolated
  // linearly in value space, which a warp bends a little.
  const double quantile_change = (a - b).abs().max().item<double>();
  m->set_ensemble(3, {V::Standard});
  const double standard_change = (m->predict_table(plain.subset(ctx), plain.subset(qs)) -
                                  m->predict_table(warped.subset(ctx), warped.subset(qs))).abs().max().item<double>();
  EXPECT_LT(quantile_change, 1e-3);
  EXPECT_GT(standard_change, 20 * quantile_change) << quantile_change;

  const auto one = table(1, false);
  m->set_ensemble(1, {V::Standard});
  const at::Tensor s = m->predict_table(one.subset(ctx), one.subset(qs));
  m->set_ensemble(1, {V::Quantile});
  const at::Tensor q = m->predict_table(one.subset(ctx), one.subset(qs));
  EXPECT_FALSE(torch::allclose(s, q, 1e-4, 1e-6));
  // mixed, two members: standard with seed 0's identities, quantile with seed 1's
  m->set_ensemble(2, {V::Quantile});
  const at::Tensor q_seed1 = 2 * m->predict_table(one.subset(ctx), one.subset(qs)) - q;
  m->set_ensemble(2, {V::Standard, V::Quantile});
  EXPECT_TRUE(torch::allclose(m->predict_table(one.subset(ctx), one.subset(qs)), (s + q_seed1) / 2, 1e-6, 1e-9));
}

// preprocess: pca rotates the features onto the context's principal components: uncorrelated on
// the context rows, largest first, as many as hold pca_variance of the variance (two for a table
// of rank two, a constant column contributing nothing), queries projected with the context's
// mean and scale. The view does not depend on the order of the columns (the components' signs are
// fixed by their largest loading), so a pca member's prediction does not either, while a standard
// member's does (a feature's identity follows its position).
TEST(TabularModel, PcaViewKeepsTheLeadingUncorrelatedComponentsWhateverTheColumnOrder) {
  using V = tt::tab::TabularIcl::View;
  const int64_t rows = 40;
  auto table = [&](const std::vector<int64_t>& order) {
    torch::manual_seed(11);
    const at::Tensor a = torch::randn({rows}) * 3 + 1, b = torch::randn({rows}) * 0.5 - 2;
    const at::Tensor cols[5] = {a, b, a + b, 2 * a - b, torch::full({rows}, 7.0f)};
    tt::tab::Table t;
    t.source = "rank2.csv";
    t.class_names = {"no", "yes"};
    std::vector<at::Tensor> picked;
    for (int64_t j : order) {
      picked.push_back(cols[j]);
      t.feature_names.push_back("f" + std::to_string(j));
    }
    const at::Tensor x = torch::stack(picked, 1).contiguous();
    t.x.assign(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    for (int64_t i = 0; i < rows; ++i) t.y.push_back((a[i] + b[i]).item<float>() > -1.0f ? 1 : 0);
    t.rows = rows;
    return t;
  };
  auto as_tensor = [](const tt::tab::Table& t) {
    return torch::from_blob(const_cast<float*>(t.x.data()), {t.rows, t.features()}, torch::kFloat).clone();
  };
  const auto plain = table({0, 1, 2, 3, 4}), shuffled = table({3, 4, 1, 0, 2});
  const auto ctx = plain.subset(range(0, 30)), qs = plain.subset(range(30, 40));
  const auto [pc, pq] = tt::tab::principal_components(ctx, qs, 0.99, 100);
  ASSERT_EQ(pc.feature_names, (std::vector<std::string>{"pc1", "pc2"}));
  ASSERT_EQ(pq.features(), 2);
  const at::Tensor z = as_tensor(pc).to(torch::kDouble);
  const at::Tensor cov = (z - z.mean(0)).t().mm(z - z.mean(0)) / 30;
  EXPECT_LT(z.mean(0).abs().max().item<double>(), 1e-5);
  EXPECT_LT(cov[0][1].abs().item<double>(), 1e-4);
  EXPECT_GT(cov[0][0].item<double>(), cov[1][1].item<double>());
  EXPECT_NEAR((cov[0][0] + cov[1][1]).item<double>(), 4.0, 1e-4);  // four standardized columns, all of rank two
  // queries projected as the context: the context's rows as queries give the context's components
  const auto same = tt::tab::principal_components(ctx, ctx, 0.99, 100).second;
  EXPECT_TRUE(torch::allclose(as_tensor(same), as_tensor(pc), 1e-5, 1e-5));
  EXPECT_EQ(tt::tab::principal_components(ctx, qs, 0.99, 1).first.features(), 1);  // at most `most`
  EXPECT_EQ(tt::tab::principal_components(ctx, qs, 0.5, 100).first.features(), 1);  // the first holds over half
  // the column order changes nothing in the view, nor in a pca member's prediction
  const auto sctx = shuffled.subset(range(0, 30)), sqs = shuffled.subset(range(30, 40));
  const auto [spc, spq] = tt::tab::principal_components(sctx, sqs, 0.99, 100);
  EXPECT_TRUE(torch::allclose(as_tensor(spc), as_tensor(pc), 1e-4, 1e-4));
  EXPECT_TRUE(torch::allclose(as_tensor(spq), as_tensor(pq), 1e-4, 1e-4));
  auto m = tiny();
  m->set_ensemble(2, {V::Pca});
  EXPECT_TRUE(torch::allclose(m->predict_table(ctx, qs), m->predict_table(sctx, sqs), 1e-4, 1e-6));
  m->set_ensemble(2, {V::Standard});
  EXPECT_FALSE(torch::allclose(m->predict_table(ctx, qs), m->predict_table(sctx, sqs), 1e-4, 1e-6));
}

// model.readout_temperature divides infer()'s readout logits: the same as a model at temperature 1
// whose readout_q is scaled by 1 / t; below 1 the class probabilities are sharper (lower entropy).
TEST(TabularModel, ReadoutTemperatureDividesTheReadoutLogits) {
  auto m = tiny();
  m->eval();
  const auto t = random_table(40, 5, 3, 9);
  const at::Tensor xc = tensor_of(t.subset(range(0, 30))), xq = tensor_of(t.subset(range(30, 40)));
  at::Tensor y = torch::empty({30}, torch::kLong);
  for (int64_t i = 0; i < 30; ++i) y[i] = t.y[i];
  const at::Tensor ids = m->feature_ids(5, 0);
  const at::Tensor p1 = m->infer(xc, y, xq, ids);
  m->set_readout_temperature(0.5);
  const at::Tensor p_half = m->infer(xc, y, xq, ids);
  m->set_readout_temperature(1.0);
  {
    torch::NoGradGuard no_grad;
    m->readout_q->weight.mul_(2);
    m->readout_q->bias.mul_(2);
  }
  EXPECT_TRUE(torch::allclose(m->infer(xc, y, xq, ids), p_half, 1e-5, 1e-6));
  auto entropy = [](const at::Tensor& p) { return -(p * p.clamp_min(1e-12).log()).sum(1).mean().item<double>(); };
  EXPECT_LT(entropy(p_half), entropy(p1));
  EXPECT_FALSE(torch::allclose(p_half, p1, 1e-4, 1e-6));
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
  has(build("{preprocess: ranks}"), "model.preprocess must be standard, quantile, pca or quantile-pca, or several of them "
                                    "joined by + (mixed: standard+quantile), got 'ranks'");
  has(build("{preprocess: standard+}"), "got 'standard+'");
  has(build("{pca_variance: 0}"), "model.pca_variance must be in (0, 1], got 0");
  has(build("{readout_temperature: 0}"), "model.readout_temperature must be ");
  has(build("{size: huge}"), "model.size must be one of small | large, got 'huge'");
  const std::string narrow = build("{d_model: 8, n_heads: 2}");  // (core prints the bound 10 as "1e1" today)
  has(narrow, "model.d_model must be >= ");
  has(narrow, ", got 8");
  has(build("{ensemble: 0}"), "model.ensemble must be >= 1, got 0");
  has(build("{d_model: 30}"), "model.d_model (30) must be a multiple of n_heads (4)");
  has(build("{d_model: 32, n_layers: 1}"), "d_cell 16, d_id 32, d_model 32, 1 layers, 4 heads, d_ff 192");
}

// A --predict file's label column may hold a class the training table lacks: that row is
// predicted as the others are (the predictions file has every row) and left out of the score, and a
// warning names the label and its rows.
TEST(TabularModel, PredictKeepsRowsWhoseLabelIsNoTrainingClass) {
  const auto dir = tt::test::temp_dir("tabular_model");
  tt::test::write_text(dir / "train.csv", "a,b,kind\n0,1,x\n1,0,y\n0,2,x\n2,0,y\n");
  tt::test::write_text(dir / "rows.csv", "a,b,kind\n0,1,x\n3,3,z\n1,0,y\n4,4,z\n");
  auto context = std::make_shared<const tt::tab::Table>(tt::tab::read_csv((dir / "train.csv").string(), {}));
  tt::tab::CsvOptions o;
  o.require_label = false;
  const tt::tab::Table q = tt::tab::read_csv_like((dir / "rows.csv").string(), *context, o);
  EXPECT_EQ(q.y, (std::vector<int64_t>{0, -1, 1, -1}));
  EXPECT_EQ(q.unknown_labels, (std::map<std::string, int64_t>{{"z", 2}}));
  auto m = tiny(1024, context);
  m->set_ensemble(1);
  testing::internal::CaptureStderr();  // the log's lines
  m->predict(dir / "rows.csv", dir / "pred.csv");
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_HAS(said, "2 of the 4 rows of " + (dir / "rows.csv").string() +
                       " have a label that is no class of the training table: 'z' (2 rows); predicted, but left out "
                       "of the score");
  EXPECT_HAS(said, "(of the 2 rows labelled with a class of the training table)");
  std::ifstream pred(dir / "pred.csv");
  std::vector<std::string> lines;
  for (std::string l; std::getline(pred, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "p_x,p_y,predicted");
}

// The predictions file's write is checked: a full device is a WriteError naming the file and the
// reason (not "predictions: /dev/full" and exit 0).
TEST(TabularModel, PredictToAFullDeviceIsAWriteErrorNamingTheFile) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto dir = tt::test::temp_dir("tabular_model");
  tt::test::write_text(dir / "train.csv", "a,b,kind\n0,1,x\n1,0,y\n0,2,x\n2,0,y\n");
  auto context = std::make_shared<const tt::tab::Table>(tt::tab::read_csv((dir / "train.csv").string(), {}));
  auto m = tiny(1024, context);
  m->set_ensemble(1);
  const std::string said =
      tt::test::message_of<tt::WriteError>([&] { m->predict(dir / "train.csv", "/dev/full"); }, "a WriteError");
  EXPECT_HAS(said, "cannot write /dev/full: write failed: No space left on device");
  // a regular file is written whole
  m->predict(dir / "train.csv", dir / "pred.csv");
  EXPECT_EQ(tt::test::read_file(dir / "pred.csv").substr(0, 18), "p_x,p_y,predicted\n");
}

// A class label holding a comma or a quote is quoted in predictions.csv as RFC 4180 writes it
// (quotes doubled), so the file keeps one field per class plus the predicted one.
TEST(TabularModel, PredictionsQuoteClassLabelsHoldingCommasOrQuotes) {
  const auto dir = tt::test::temp_dir("tabular_model");
  tt::test::write_text(dir / "train.csv", "a,b,kind\n0,1,\"v,c\"\n1,0,\"q\"\"t\"\n0,2,\"v,c\"\n2,0,\"q\"\"t\"\n");
  auto context = std::make_shared<const tt::tab::Table>(tt::tab::read_csv((dir / "train.csv").string(), {}));
  ASSERT_EQ(context->class_names, (std::vector<std::string>{"q\"t", "v,c"}));
  auto m = tiny(1024, context);
  m->set_ensemble(1);
  m->predict(dir / "train.csv", dir / "pred.csv");
  std::ifstream pred(dir / "pred.csv");
  std::vector<std::string> lines;
  for (std::string l; std::getline(pred, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "\"p_q\"\"t\",\"p_v,c\",predicted");
  for (size_t i = 1; i < lines.size(); ++i) {
    const bool quoted = lines[i].size() > 6 && (lines[i].substr(lines[i].size() - 6) == ",\"v,c\"" ||
                                                lines[i].substr(lines[i].size() - 7) == ",\"q\"\"t\"");
    EXPECT_TRUE(quoted) << lines[i];
  }
}
