#include "evaluate.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "test_support.h"
#include "tt/error.h"

namespace fs = std::filesystem;
using namespace tt::topic;

namespace {

// k x m rows drawn from Dirichlet(alpha).
torch::Tensor dirichlet_rows(int64_t k, int64_t m, double alpha) {
  auto g = at::_standard_gamma(torch::full({k, m}, alpha, torch::kDouble)).clamp_min(1e-30);
  return (g / g.sum(1, true)).to(torch::kFloat);
}

// The best total weight over all one-to-one matchings of min(r, c) pairs, by brute force.
double brute_force_best(const std::vector<std::vector<double>>& w) {
  const size_t r = w.size(), c = w[0].size();
  double best = -1e300;
  if (r <= c) {
    std::vector<size_t> cols(c);
    std::iota(cols.begin(), cols.end(), 0);
    do {
      double s = 0;
      for (size_t i = 0; i < r; ++i) s += w[i][cols[i]];
      best = std::max(best, s);
    } while (std::next_permutation(cols.begin(), cols.end()));
  } else {
    std::vector<size_t> rows(r);
    std::iota(rows.begin(), rows.end(), 0);
    do {
      double s = 0;
      for (size_t j = 0; j < c; ++j) s += w[rows[j]][j];
      best = std::max(best, s);
    } while (std::next_permutation(rows.begin(), rows.end()));
  }
  return best;
}

// Checks a matching is one-to-one with min(r, c) pairs; returns its total weight.
double matching_weight(const std::vector<std::vector<double>>& w, const std::vector<int64_t>& a) {
  const size_t r = w.size(), c = w[0].size();
  EXPECT_EQ(a.size(), r);
  std::vector<int> used(c, 0);
  double s = 0;
  size_t pairs = 0;
  for (size_t i = 0; i < r; ++i) {
    if (a[i] < 0) continue;
    EXPECT_LT(a[i], static_cast<int64_t>(c));
    EXPECT_EQ(used[a[i]]++, 0) << "column " << a[i] << " used twice";
    s += w[i][a[i]];
    ++pairs;
  }
  EXPECT_EQ(pairs, std::min(r, c));
  return s;
}

std::vector<std::vector<double>> random_matrix(size_t r, size_t c, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<std::vector<double>> w(r, std::vector<double>(c));
  for (auto& row : w)
    for (auto& x : row) x = u(rng);
  return w;
}

struct DataRow {
  int64_t pos, doc, top;
  std::vector<double> p;
};

std::vector<DataRow> read_structure_data(const fs::path& path) {
  std::ifstream in(path);
  std::vector<DataRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    DataRow r;
    ls >> r.pos >> r.doc >> r.top;
    double x;
    while (ls >> x) r.p.push_back(x);
    rows.push_back(r);
  }
  return rows;
}

// Rows come grouped by dominant topic (ascending), and by decreasing weight within a group.
void expect_grouped(const std::vector<DataRow>& rows, int64_t k) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    ASSERT_EQ(static_cast<int64_t>(r.p.size()), k);
    EXPECT_EQ(r.pos, static_cast<int64_t>(i));
    EXPECT_EQ(std::max_element(r.p.begin(), r.p.end()) - r.p.begin(), r.top);
    if (i == 0) continue;
    const auto& q = rows[i - 1];
    EXPECT_LE(q.top, r.top) << "row " << i;
    if (q.top == r.top) {
      EXPECT_GE(q.p[q.top], r.p[r.top]) << "row " << i;
    }
  }
}

bool gnuplot_on_path() { return tt::test::run("command -v gnuplot").rc == 0; }

}  // namespace

TEST(TopicEval, AlignRecoversPermutation) {
  torch::manual_seed(1);
  const int64_t k = 12, m = 300;
  auto true_F = dirichlet_rows(k, m, 0.1);
  auto perm = torch::randperm(k, torch::kLong);
  auto learned = true_F.index_select(0, perm) + 1e-4 * torch::rand({k, m});
  learned = learned / learned.sum(1, true);

  auto a = align_topics(true_F, learned);
  ASSERT_EQ(a.assignment.size(), static_cast<size_t>(k));
  ASSERT_EQ(a.cosine.size(), static_cast<size_t>(k));
  // learned row j is true row perm[j]
  for (int64_t j = 0; j < k; ++j) EXPECT_EQ(a.assignment[perm[j].item<int64_t>()], j);
  for (double c : a.cosine) EXPECT_GT(c, 0.99);
  EXPECT_GT(a.min, 0.99);
  EXPECT_LE(a.min, a.mean);
  EXPECT_LE(a.mean, 1.0 + 1e-9);

  auto aligned_F = permute_topics(learned, a, 0);
  EXPECT_TRUE(torch::equal(aligned_F, learned.index_select(0, torch::argsort(perm))));
  EXPECT_TRUE(torch::allclose(aligned_F, true_F, 0, 0.02));
  // L's topics are columns: the same reordering along dim 1
  auto L = torch::softmax(torch::randn({7, k}), 1);
  auto L_learned = L.index_select(1, perm);
  EXPECT_TRUE(torch::equal(permute_topics(L_learned, a, 1), L));
  EXPECT_TRUE(torch::equal(permute_topics(L_learned, a, -1), L));
}

TEST(TopicEval, AlignIdentityIsExact) {
  torch::manual_seed(2);
  auto F = dirichlet_rows(5, 40, 0.5);
  auto a = align_topics(F, F);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a.assignment[i], i);
    EXPECT_NEAR(a.cosine[i], 1.0, 1e-12);
  }
  EXPECT_NEAR(a.mean, 1.0, 1e-12);
}

TEST(TopicEval, HungarianMatchesBruteForce) {
  for (unsigned seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    auto w = random_matrix(6, 6, rng);
    auto a = max_weight_assignment(w);
    EXPECT_NEAR(matching_weight(w, a), brute_force_best(w), 1e-9) << "seed " << seed;
  }
}

TEST(TopicEval, HungarianWithTiesAndIntegers) {
  // many equal weights: any optimum is fine, its value must be the best
  for (unsigned seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(100 + seed);
    std::uniform_int_distribution<int> d(0, 3);
    std::vector<std::vector<double>> w(6, std::vector<double>(6));
    for (auto& row : w)
      for (auto& x : row) x = d(rng);
    EXPECT_NEAR(matching_weight(w, max_weight_assignment(w)), brute_force_best(w), 1e-12) << "seed " << seed;
  }
}

TEST(TopicEval, HungarianRectangular) {
  for (unsigned seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(200 + seed);
    auto wide = random_matrix(4, 7, rng);
    EXPECT_NEAR(matching_weight(wide, max_weight_assignment(wide)), brute_force_best(wide), 1e-9);
    auto tall = random_matrix(7, 3, rng);
    auto a = max_weight_assignment(tall);
    EXPECT_EQ(std::count(a.begin(), a.end(), -1), 4);
    EXPECT_NEAR(matching_weight(tall, a), brute_force_best(tall), 1e-9);
  }
  EXPECT_TRUE(max_weight_assignment({}).empty());
  EXPECT_THROW(max_weight_assignment({{1.0, 2.0}, {1.0}}), tt::Error);
  EXPECT_THROW(max_weight_assignment({{1.0, NAN}}), tt::Error);
}

TEST(TopicEval, AlignMoreLearnedTopics) {
  torch::manual_seed(3);
  const int64_t m = 200;
  auto true_F = dirichlet_rows(5, m, 0.1);
  auto extra = dirichlet_rows(3, m, 0.1);
  // learned: extra topics interleaved with a permutation of the true ones
  std::vector<int64_t> rows_of_true = {4, 0, 3, 1, 2};
  auto learned = torch::cat({true_F.index_select(0, torch::tensor(rows_of_true)), extra}, 0);
  auto shuffle = torch::tensor(std::vector<int64_t>{5, 0, 1, 6, 2, 3, 7, 4});  // learned row i = stacked row shuffle[i]
  learned = learned.index_select(0, shuffle);

  auto a = align_topics(true_F, learned);
  ASSERT_EQ(a.assignment.size(), 5u);
  for (int64_t t = 0; t < 5; ++t) {
    int64_t j = a.assignment[t];
    ASSERT_GE(j, 0);
    int64_t stacked = shuffle[j].item<int64_t>();
    ASSERT_LT(stacked, 5);
    EXPECT_EQ(rows_of_true[stacked], t);
    EXPECT_NEAR(a.cosine[t], 1.0, 1e-6);
  }
  auto aligned = permute_topics(learned, a, 0);
  EXPECT_EQ(aligned.size(0), 8);
  EXPECT_TRUE(torch::allclose(aligned.narrow(0, 0, 5), true_F));
}

TEST(TopicEval, AlignFewerLearnedTopics) {
  torch::manual_seed(4);
  const int64_t m = 150;
  auto true_F = dirichlet_rows(6, m, 0.1);
  auto learned = true_F.index_select(0, torch::tensor(std::vector<int64_t>{5, 1, 3}));
  auto a = align_topics(true_F, learned);
  ASSERT_EQ(a.assignment.size(), 6u);
  std::vector<int64_t> expect = {-1, 1, -1, 2, -1, 0};
  EXPECT_EQ(a.assignment, expect);
  for (int64_t t = 0; t < 6; ++t) {
    if (expect[t] < 0) {
      EXPECT_TRUE(std::isnan(a.cosine[t]));
    } else {
      EXPECT_NEAR(a.cosine[t], 1.0, 1e-6);
    }
  }
  EXPECT_NEAR(a.mean, 1.0, 1e-6);
  EXPECT_NEAR(a.min, 1.0, 1e-6);
  auto aligned = permute_topics(learned, a, 0);
  EXPECT_TRUE(torch::equal(aligned, true_F.index_select(0, torch::tensor(std::vector<int64_t>{1, 3, 5}))));
}

TEST(TopicEval, AlignRejectsDifferentVocabularies) {
  auto a = torch::rand({3, 10}), b = torch::rand({3, 11});
  EXPECT_THROW(align_topics(a, b), tt::Error);
  EXPECT_THROW(align_topics(torch::rand({10}), b), tt::Error);
  auto al = align_topics(a, a);
  EXPECT_THROW(permute_topics(torch::rand({2, 10}), al, 0), tt::Error);  // too few topics for the alignment
  EXPECT_THROW(permute_topics(a, al, 2), tt::Error);
}

TEST(TopicEval, TopTermsOrderAndVocabulary) {
  auto F = torch::tensor({0.1, 0.4, 0.05, 0.3, 0.15, 0.5, 0.1, 0.2, 0.1, 0.1}, torch::kFloat).reshape({2, 5});
  std::vector<std::string> vocab = {"apple", "bank", "cat", "dog", "eel"};
  auto t = top_terms(F, vocab, 3);
  ASSERT_EQ(t.size(), 2u);
  ASSERT_EQ(t[0].size(), 3u);
  EXPECT_EQ(t[0][0].first, "bank");
  EXPECT_EQ(t[0][1].first, "dog");
  EXPECT_EQ(t[0][2].first, "eel");
  EXPECT_NEAR(t[0][0].second, 0.4, 1e-6);
  EXPECT_NEAR(t[0][1].second, 0.3, 1e-6);
  EXPECT_NEAR(t[0][2].second, 0.15, 1e-6);
  EXPECT_EQ(t[1][0].first, "apple");
  EXPECT_EQ(t[1][1].first, "cat");
  EXPECT_EQ(t[1][2].first, "bank");  // ties: lower term id first

  auto fallback = top_terms(F, {}, 10);  // n > m: every term
  ASSERT_EQ(fallback[0].size(), 5u);
  EXPECT_EQ(fallback[0][0].first, "term1");
  EXPECT_EQ(fallback[1][4].first, "term4");
  EXPECT_TRUE(top_terms(F, vocab, 0)[0].empty());
  EXPECT_THROW(top_terms(F, {"a", "b"}, 3), tt::Error);

  auto dir = tt::test::temp_dir("topic-eval");
  write_top_terms(dir / "top_terms.txt", t);
  EXPECT_EQ(tt::test::read_file(dir / "top_terms.txt"),
            "topic 0: bank (0.4), dog (0.3), eel (0.15)\n"
            "topic 1: apple (0.5), cat (0.2), bank (0.1)\n");
  fs::remove_all(dir);
}

TEST(TopicEval, CorpusLossMatchesDense) {
  torch::manual_seed(5);
  const int64_t n = 37, m = 23, k = 4;
  auto L = torch::softmax(torch::randn({n, k}), 1);
  auto F = torch::softmax(torch::randn({k, m}) * 2, 1);
  auto X = torch::poisson(L.mm(F) * 30).to(torch::kFloat);
  auto Ld = L.to(torch::kDouble), Fd = F.to(torch::kDouble), Xd = X.to(torch::kDouble);
  auto xhat = Ld.mm(Fd);
  double dense = (xhat - Xd * torch::log(torch::clamp_min(xhat, 1e-10))).sum().item<double>();

  for (int64_t block : {1, 5, 16, 36, 37, 100}) {
    std::vector<std::pair<int64_t, int64_t>> calls;
    auto rows = [&](int64_t b, int64_t e) {
      calls.emplace_back(b, e);
      return X.narrow(0, b, e - b);
    };
    auto loss = corpus_loss(L, F, rows, block);
    EXPECT_NEAR(loss.sum, dense, 1e-5 * std::fabs(dense)) << "block " << block;
    EXPECT_NEAR(loss.mean_per_doc, dense / n, 1e-5 * std::fabs(dense / n));
    EXPECT_EQ(loss.n_docs, n);
    // contiguous blocks of at most `block` rows covering every document once
    int64_t next = 0;
    for (auto [b, e] : calls) {
      EXPECT_EQ(b, next);
      EXPECT_LE(e - b, block);
      next = e;
    }
    EXPECT_EQ(next, n);
  }
  EXPECT_THROW(corpus_loss(L, F, [&](int64_t b, int64_t e) { return X.narrow(0, b, e - b).narrow(1, 0, 5); }, 8),
               tt::Error);
  EXPECT_THROW(corpus_loss(L, F.t(), [&](int64_t b, int64_t e) { return X.narrow(0, b, e - b); }), tt::Error);
}

TEST(TopicEval, CorpusLossZeroPredictionsAreClamped) {
  // xhat = 0 where x = 0 contributes nothing; where x > 0 it costs x * log(1e10)
  auto L = torch::tensor({1.0f, 0.0f}).reshape({1, 2});
  auto F = torch::tensor({1.0f, 0.0f, 0.0f, 1.0f}).reshape({2, 2});
  auto X = torch::tensor({2.0f, 3.0f}).reshape({1, 2});
  auto loss = corpus_loss(L, F, [&](int64_t, int64_t) { return X; });
  EXPECT_NEAR(loss.sum, 1.0 + 3.0 * std::log(1e10), 1e-3);
}

TEST(TopicEval, StructureDataGroupedByDominantTopic) {
  torch::manual_seed(6);
  const int64_t n = 300, k = 4;
  auto L = dirichlet_rows(n, k, 0.3);
  auto dir = tt::test::temp_dir("topic-eval");
  plot_structure(L, dir / "structure.png", "structure", 2000);  // the data file is written with or without gnuplot
  auto rows = read_structure_data(dir / "structure.dat");
  ASSERT_EQ(rows.size(), static_cast<size_t>(n));
  expect_grouped(rows, k);
  std::vector<int64_t> docs;
  for (const auto& r : rows) docs.push_back(r.doc);
  std::sort(docs.begin(), docs.end());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(docs[i], i);
  EXPECT_TRUE(fs::exists(dir / "structure.gp"));
  fs::remove_all(dir);
}

TEST(TopicEval, StructureSubsamplesWithinGroups) {
  torch::manual_seed(7);
  const int64_t n = 5000, k = 6;
  auto L = dirichlet_rows(n, k, 0.3);
  auto dir = tt::test::temp_dir("topic-eval");
  plot_structure(L, dir / "structure.png", "subsampled", 500);
  auto rows = read_structure_data(dir / "structure.dat");
  EXPECT_GE(rows.size(), 500u);
  EXPECT_LE(rows.size(), static_cast<size_t>(500 + k));
  expect_grouped(rows, k);
  // each group keeps roughly its share of documents, and no document twice
  auto top = L.argmax(1);
  std::vector<int64_t> seen;
  for (int64_t t = 0; t < k; ++t) {
    double share = (top == t).sum().item<double>() / n;
    double kept = std::count_if(rows.begin(), rows.end(), [t](const DataRow& r) { return r.top == t; });
    EXPECT_NEAR(kept / rows.size(), share, 0.01) << "topic " << t;
  }
  for (const auto& r : rows) seen.push_back(r.doc);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  fs::remove_all(dir);
}

TEST(TopicEval, StructureGroupsByLabel) {
  torch::manual_seed(8);
  const int64_t n = 120, k = 3;
  auto L = dirichlet_rows(n, k, 0.5);
  std::vector<std::string> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 3 == 0 ? "news" : i % 3 == 1 ? "fiction" : "humor");
  auto dir = tt::test::temp_dir("topic-eval");
  bool plotted = plot_structure(L, dir / "s.png", "by label", 2000, labels);
  auto rows = read_structure_data(dir / "s.dat");
  ASSERT_EQ(rows.size(), static_cast<size_t>(n));
  // labels in sorted order (fiction, humor, news), each grouped by dominant topic
  std::vector<std::string> order = {"fiction", "humor", "news"};
  for (size_t b = 0; b < 3; ++b) {
    std::vector<DataRow> block(rows.begin() + b * 40, rows.begin() + (b + 1) * 40);
    for (size_t i = 0; i < block.size(); ++i) {
      EXPECT_EQ(labels[block[i].doc], order[b]);
      block[i].pos = static_cast<int64_t>(i);
    }
    expect_grouped(block, k);
  }
  EXPECT_NE(tt::test::read_file(dir / "s.gp").find("'fiction'"), std::string::npos);
  if (gnuplot_on_path()) {
    EXPECT_TRUE(plotted);
  }
  EXPECT_THROW(plot_structure(L, dir / "x.png", "bad", 2000, {"a"}), tt::Error);
  fs::remove_all(dir);
}

TEST(TopicEval, StructurePlotWritesPng) {
  if (!gnuplot_on_path()) GTEST_SKIP() << "gnuplot is not on PATH";
  torch::manual_seed(9);
  auto dir = tt::test::temp_dir("topic-eval");
  for (int64_t k : {5, 30}) {  // 30: beyond the named colours, no key
    auto L = dirichlet_rows(400, k, 0.2);
    auto png = dir / ("structure-" + std::to_string(k) + ".png");
    ASSERT_TRUE(plot_structure(L, png, "it's a structure plot, k=" + std::to_string(k), 2000));
    ASSERT_TRUE(fs::exists(png));
    EXPECT_GT(fs::file_size(png), 1000u);
    std::string bytes = tt::test::read_file(png);
    EXPECT_EQ(bytes.substr(1, 3), "PNG");
  }
  fs::remove_all(dir);
}
