// The prior's statistics, CSV loading (and every bad input the issue names), the stratified split,
// episodes, and the metrics against hand-computed values.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "metrics.h"
#include "prior.h"
#include "synth_table_tool.h"
#include "table.h"
#include "tabular_data.h"
#include "tabular_test_util.h"
#include "test_support.h"
#include "tt/error.h"
#include "tt/options.h"

using tt::tab::CsvOptions;
using tt::tab::EpisodeDataset;
using tt::tab::PriorOptions;
using tt::tab::Split;
using tt::tab::Table;
using tt::tab::classification_metrics;
using tt::tab::csv_schema;
using tt::tab::make_csv;
using tt::tab::make_prior;
using tt::tab::prior_schema;
using tt::tab::read_csv;
using tt::tab::read_csv_like;
using tt::tab::roc_auc;
using tt::tab::sample_prior_table;
using tt::tab::split_table_tool;
using tt::tab::stratified_split;
using tt::tab::synth_table_tool;
using tt::test::config_error;

namespace {
// The prior's options as a pipeline that sets none of them gets them.
PriorOptions prior_defaults() { return tt::Options::defaults(prior_schema(), "data").to<PriorOptions>(); }

// A plain 7-nearest-neighbour vote (support rows standardized) on a prior table's query rows,
// beside predicting the support's majority class: counts of correct queries, summed over tables.
struct Votes {
  double knn = 0, majority = 0, queries = 0;
  void add(const tt::Batch& b, int64_t C) {
    const int64_t F = b.at("feature_mask").sum().item<int64_t>();
    const at::Tensor x = b.at("x")[0].slice(1, 0, F), y = b.at("y")[0], s = b.at("support")[0];
    at::Tensor xs = x.index({s}), xq = x.index({s.logical_not()});
    const at::Tensor ys = y.index({s}), yq = y.index({s.logical_not()});
    const at::Tensor mean = xs.mean(0), sd = xs.std(0) + 1e-6;
    xs = (xs - mean) / sd;
    xq = (xq - mean) / sd;
    const at::Tensor near = std::get<1>(torch::cdist(xq, xs).topk(std::min<int64_t>(7, xs.size(0)), 1, false));
    knn += (torch::one_hot(ys.index({near}), C).sum(1).argmax(1) == yq).sum().item<double>();
    majority += (yq == torch::bincount(ys, {}, C).argmax()).sum().item<double>();
    queries += static_cast<double>(yq.numel());
  }
};
}  // namespace

// The features must tell the class in most tables, or pretraining learns nothing but the class
// frequencies: a plain 7-nearest-neighbour vote (support rows standardized) on the query rows of
// binary tables must beat predicting the support's majority class by a clear margin.
TEST(TabularPrior, FeaturesPredictTheClassBetterThanTheMajority) {
  PriorOptions o = prior_defaults();
  o.rows = 256;
  o.max_features = 32;
  o.max_classes = 2;
  Votes v;
  for (int64_t t = 0; t < 150; ++t) v.add(sample_prior_table(o, 7000 + t), 2);
  const double knn = v.knn / v.queries, majority = v.majority / v.queries;
  EXPECT_GT(knn, majority + 0.08) << "7-NN " << knn << " vs majority " << majority;
}

// warp_share: with 0 every feature is a smooth node of the causal graph (all 256 values
// distinct, mild skew); with 1 every feature is warped, so about a third are steps (at most 10
// distinct values) and others are strongly skewed (exp). The same seeds give the same feature
// counts either way (drawn before the warps).
TEST(TabularPrior, WarpShareMakesSteppedAndSkewedColumns) {
  auto count = [](double warp) {
    PriorOptions o = prior_defaults();
    o.rows = 256;
    o.min_features = 4;
    o.max_features = 8;
    o.warp_share = warp;
    int64_t columns = 0, stepped = 0, skewed = 0;
    for (int64_t t = 0; t < 60; ++t) {
      tt::Batch b = sample_prior_table(o, 9000 + t);
      const int64_t F = b.at("feature_mask").sum().item<int64_t>();
      for (int64_t j = 0; j < F; ++j) {
        const at::Tensor c = b.at("x")[0].select(1, j).to(torch::kDouble);
        ++columns;
        if (std::get<0>(at::_unique(c)).numel() <= 10) ++stepped;
        const at::Tensor z = (c - c.mean()) / (c.std() + 1e-12);
        if (z.pow(3).mean().abs().item<double>() > 2.0) ++skewed;
      }
    }
    return std::make_tuple(columns, stepped, skewed);
  };
  const auto [n0, stepped0, skewed0] = count(0.0);
  const auto [n1, stepped1, skewed1] = count(1.0);
  EXPECT_EQ(n0, n1);
  EXPECT_EQ(stepped0, 0);
  EXPECT_GT(stepped1, n1 / 5) << "of " << n1 << " columns";
  EXPECT_LT(stepped1, n1 / 2) << "of " << n1 << " columns";
  EXPECT_GT(skewed1, skewed0 + n1 / 10) << "of " << n1 << " columns (" << skewed0 << " skewed unwarped)";
}

// argmax_share: the feature-function tables with 3+ classes take the class as the argmax of one
// random function per class. Two-class tables draw nothing for it (the same seed gives the same
// table at any share); tables with more classes change, every class keeps at least
// max(2, rows / (4 C)) rows, and the features still tell the class (7-NN well above the majority).
TEST(TabularPrior, ArgmaxShareGivesBalancedMulticlassTablesAndLeavesBinaryOnesAlone) {
  PriorOptions bands = prior_defaults(), argmax = prior_defaults();
  for (PriorOptions* o : {&bands, &argmax}) {
    o->rows = 256;
    o->min_features = 2;
    o->max_features = 8;
    o->node_target_share = 0;
  }
  bands.argmax_share = 0;
  argmax.argmax_share = 1;
  int64_t binary = 0, multi = 0, changed = 0, all_classes = 0;
  Votes v;
  for (int64_t t = 0; t < 120; ++t) {
    const tt::Batch a = sample_prior_table(bands, 4000 + t), b = sample_prior_table(argmax, 4000 + t);
    const int64_t C = b.at("n_classes").item<int64_t>();
    ASSERT_EQ(C, a.at("n_classes").item<int64_t>());
    const at::Tensor y = b.at("y")[0];
    if (C == 2) {
      ++binary;
      EXPECT_TRUE(torch::equal(a.at("y"), b.at("y"))) << "table " << t;
      continue;
    }
    ++multi;
    changed += !torch::equal(a.at("y"), b.at("y"));
    const at::Tensor counts = torch::bincount(y, {}, C);
    all_classes += counts.min().item<int64_t>() >= std::max<int64_t>(2, 256 / (4 * C));
    v.add(b, C);
  }
  ASSERT_GT(binary, 0);
  ASSERT_GT(multi, 60);
  EXPECT_EQ(changed, multi);
  EXPECT_GE(all_classes, multi * 95 / 100) << "of " << multi;
  EXPECT_GT(v.knn / v.queries, v.majority / v.queries + 0.2)
      << "7-NN " << v.knn / v.queries << " vs majority " << v.majority / v.queries;
}

// class_cause_share (default 0): at 1 every table's class causes its features through a few
// latent factors, so correlated features carry the same evidence: the linear discriminant (the
// support rows' pooled within-class covariance, shrunk a little) beats a 7-nearest-neighbour vote
// clearly on the query rows (0.72 against 0.66 of them), every class keeps at least
// max(2, rows / (4 C)) rows, and the features are correlated (the mean absolute correlation
// between a table's columns above 0.3, where independent columns of 256 rows give about 0.05).
TEST(TabularPrior, ClassCauseShareGivesTablesWhereTheLinearDiscriminantBeatsNeighbours) {
  PriorOptions on = prior_defaults();
  on.class_cause_share = 1;
  on.rows = 256;
  on.min_features = 4;
  on.max_features = 24;
  on.max_classes = 4;
  on.warp_share = 0;
  const int64_t tables = 80;
  int64_t all_classes = 0;
  double lda = 0, queries = 0, corr = 0;
  Votes v;
  for (int64_t t = 0; t < tables; ++t) {
    const tt::Batch c = sample_prior_table(on, 6000 + t);
    const int64_t C = c.at("n_classes").item<int64_t>(), F = c.at("feature_mask").sum().item<int64_t>();
    const at::Tensor x = c.at("x")[0].slice(1, 0, F).to(torch::kDouble), y = c.at("y")[0], s = c.at("support")[0];
    all_classes += torch::bincount(y, {}, C).min().item<int64_t>() >= std::max<int64_t>(2, 256 / (4 * C));
    v.add(c, C);
    const at::Tensor xs = x.index({s}), ys = y.index({s}), xq = x.index({s.logical_not()}), yq = y.index({s.logical_not()});
    const at::Tensor onehot = torch::one_hot(ys, C).to(torch::kDouble);
    const at::Tensor counts = onehot.sum(0).clamp_min(1), means = onehot.t().mm(xs) / counts.unsqueeze(1);
    const at::Tensor within = xs - onehot.mm(means);
    at::Tensor cov = within.t().mm(within) / static_cast<double>(xs.size(0));
    cov = 0.9 * cov + 0.1 * cov.diagonal().mean() * torch::eye(F, torch::kDouble);
    const at::Tensor prec = torch::inverse(cov);
    const at::Tensor score = xq.mm(prec).mm(means.t()) - 0.5 * (means.mm(prec) * means).sum(1) +
                             (counts / counts.sum()).log();  // [Q, C]
    lda += (score.argmax(1) == yq).sum().item<double>();
    queries += static_cast<double>(yq.numel());
    const at::Tensor z = (x - x.mean(0)) / (x.std(0) + 1e-12), r = z.t().mm(z) / static_cast<double>(x.size(0) - 1);
    corr += ((r.abs().sum() - F) / static_cast<double>(F * (F - 1))).item<double>();
  }
  EXPECT_GE(all_classes, tables * 95 / 100) << "of " << tables;
  EXPECT_GT(lda / queries, v.knn / v.queries + 0.03) << "LDA " << lda / queries << " vs 7-NN " << v.knn / v.queries;
  EXPECT_GT(v.knn / v.queries, v.majority / v.queries + 0.1) << "7-NN " << v.knn / v.queries << " vs majority " << v.majority / v.queries;
  EXPECT_GT(corr / static_cast<double>(tables), 0.3) << "mean absolute correlation between a table's features";
}

TEST(TabularPrior, TablesHaveFeatureAndClassCountsInRangeAndDrawnSupportShares) {
  PriorOptions o = prior_defaults();
  o.rows = 128;
  o.min_features = 3;
  o.max_features = 12;
  o.min_classes = 2;
  o.max_classes = 10;
  o.support_min = 0.4;
  o.support_max = 0.8;
  std::set<int64_t> features_seen, classes_seen;
  int64_t tables = 300, at_least_two = 0, linear_like = 0;
  for (int64_t i = 0; i < tables; ++i) {
    tt::Batch b = sample_prior_table(o, 1000 + i);
    ASSERT_EQ(b.at("x").sizes(), (std::vector<int64_t>{1, 128, 12}));
    const int64_t F = b.at("feature_mask").sum().item<int64_t>();
    const int64_t C = b.at("n_classes").item<int64_t>();
    ASSERT_GE(F, 3);
    ASSERT_LE(F, 12);
    ASSERT_GE(C, 2);
    ASSERT_LE(C, 10);
    features_seen.insert(F);
    classes_seen.insert(C);
    // Columns past F are zero; those up to F vary.
    EXPECT_EQ(b.at("x")[0].slice(1, F).abs().sum().item<float>(), 0.f);
    EXPECT_GT(b.at("x")[0].slice(1, 0, F).std(0).min().item<float>(), 0.f) << "table " << i;
    const at::Tensor y = b.at("y")[0];
    EXPECT_GE(y.min().item<int64_t>(), 0);
    EXPECT_LT(y.max().item<int64_t>(), C);
    const auto distinct = std::get<0>(at::_unique(y)).numel();
    EXPECT_LE(distinct, C);
    at_least_two += distinct >= 2;
    linear_like += distinct == C;
    const double share = b.at("support")[0].sum().item<double>() / 128.0;
    EXPECT_GE(share, 0.4 - 1.0 / 128);
    EXPECT_LE(share, 0.8 + 1.0 / 128);
  }
  EXPECT_EQ(features_seen.size(), 10u);  // every count 3..12 drawn
  EXPECT_EQ(classes_seen.size(), 9u);    // every count 2..10 drawn
  EXPECT_GE(at_least_two, tables * 97 / 100);
  EXPECT_GE(linear_like, tables * 80 / 100);  // classes are cut at quantiles: nearly always all present
  // Same seed, same table; another seed, another.
  EXPECT_TRUE(torch::equal(sample_prior_table(o, 5).at("x"), sample_prior_table(o, 5).at("x")));
  EXPECT_FALSE(torch::equal(sample_prior_table(o, 5).at("y"), sample_prior_table(o, 6).at("y")));
}

namespace {
std::string write(const std::string& name, const std::string& text) {
  auto p = tt::test::temp_dir("tabular_csv") / name;
  std::ofstream(p) << text;
  return p.string();
}
}  // namespace

TEST(TabularCsv, ReadsFeaturesAndLabelsByNameOrLast) {
  const auto f = write("ok.csv", "a,b,kind,c\n1,2,cat,3\n4,5,dog,6\n7,8,cat,9\n");
  CsvOptions o;
  o.label = "kind";
  Table t = read_csv(f, o);
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(t.feature_names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(t.class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(t.y, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(t.x, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  Table last = read_csv(write("num.csv", "x,y\n1,10\n2,9\n3,10\n4,2\n"), {});
  EXPECT_EQ(last.class_names, (std::vector<std::string>{"2", "9", "10"}));  // numeric order
  EXPECT_EQ(last.y, (std::vector<int64_t>{2, 1, 2, 0}));
}

TEST(TabularCsv, BadInputIsAClearError) {
  CsvOptions o;
  o.categorical = "none";
  EXPECT_HAS(config_error([&] { read_csv(write("text.csv", "a,b,y\n1,2,0\n3,red,1\n"), o); }),
             "text.csv:3 column 'b' is not numeric ('red'): features are numbers where data.categorical is none (set "
             "it to auto to read a column of text as categories, or drop the column)");
  std::string many = "a,y\n";
  for (int i = 0; i < 1001; ++i) many += std::to_string(i) + "," + std::to_string(i) + "\n";
  EXPECT_HAS(config_error([&] { read_csv(write("many.csv", many), o); }), "has 1001 classes; tabular-icl takes at most 1000");
  o.label = "species";
  EXPECT_HAS(config_error([&] { read_csv(write("nolabel.csv", "a,b,y\n1,2,0\n"), o); }),
             "has no column 'species' (data.label); its columns are: a, b, y");
  o.label.reset();
  EXPECT_HAS(config_error([&] { read_csv(write("empty.csv", ""), o); }), "empty.csv is empty");
  EXPECT_HAS(config_error([&] { read_csv(write("header.csv", "a,b,y\n"), o); }), "has a header but no data rows");
  EXPECT_HAS(config_error([&] { read_csv(write("short.csv", "a,b,y\n1,2,0\n1,2\n"), o); }), "short.csv:3 has 2 fields");
  EXPECT_HAS(config_error([&] { read_csv("/nonexistent/x.csv", o); }), "cannot open '/nonexistent/x.csv' (data.path)");
  // a folder was "empty: expected a header row"
  EXPECT_HAS(config_error([&] { read_csv(tt::test::temp_dir("tabular_folder").string(), o); }),
             "(data.path) is a directory: give the CSV file in it");
  // which column was taken for the label, and the fix, where it has a single class or a class of one row
  EXPECT_HAS(config_error([&] { read_csv(write("one-class.csv", "a,y\n1,0\n2,0\n"), o); }),
             "column 'y' has a single class: nothing to learn (it is the label as the last column, data.label not set");
  {
    const Table t = read_csv(write("first-label.csv", "y,a\n0.5,1\n1,2\n1,3\n"), o);
    EXPECT_HAS(config_error([&] { stratified_split(t, 0.3, 0); }),
               "the classes are column 'a': if that is not the class column, set data.label");
  }
  const auto gap = write("gap.csv", "a,b,y\n1,,0\n3,4,1\n5,8,0\n");
  EXPECT_HAS(config_error([&] { read_csv(gap, o); }), "gap.csv:2 column 'b' has a missing value");
  o.impute = "mean";
  EXPECT_EQ(read_csv(gap, o).x[1], 6.f);  // the mean of 4 and 8
  // pandas' default missing markers are missing; hexadecimal is not a number (strtod read it)
  for (const char* marker : {"NULL", "N/A", "n/a", "#N/A", "None", "-nan", "<NA>"}) {
    const Table t = read_csv(write("marker.csv", std::string("a,b,y\n1,") + marker + ",0\n3,4,1\n5,8,0\n"), o);
    EXPECT_EQ(t.x[1], 6.f) << marker;
  }
  o.impute = "none";
  EXPECT_HAS(config_error([&] { read_csv(write("hex.csv", "a,b,y\n1,0x1,0\n3,4,1\n"), o); }),
             "hex.csv:2 column 'b' is not numeric ('0x1')");
  // another separator, another encoding, a field over two lines: said, not "1 field" or a cut message
  EXPECT_HAS(config_error([&] { read_csv(write("semi.csv", "a;b;y\n1;2;0\n"), o); }),
             "has a single column: expected features and a label column (its lines have ';' and only ',' separates fields");
  EXPECT_HAS(config_error([&] { read_csv(write("tab.csv", "a,b,y\n1\t2\t0\n"), o); }),
             "tab.csv:2 has 1 fields where the header has 3 (its lines have tabs");
  EXPECT_HAS(config_error([&] { read_csv(write("utf16.csv", std::string("\xFF\xFE" "a\0,\0y\0\n\0", 10)), o); }),
             "is not UTF-8 text (UTF-16's byte-order mark): save it as UTF-8");
  EXPECT_HAS(config_error([&] { read_csv(write("nul.csv", std::string("a,y\n1,0\n2\0,1\n", 13)), o); }),
             "is not UTF-8 text (NUL bytes on line 3)");
  EXPECT_HAS(config_error([&] { read_csv(write("lines.csv", "a,y\n1,\"no\nline\"\n"), o); }),
             "lines.csv:2 has a quoted field that runs past the end of the line");
  // a quote inside a field is a character, as pandas reads it (5'11" tall)
  EXPECT_EQ(read_csv(write("inch.csv", "a,y\n1,5'11\"\n2,6'\n3,5'11\"\n"), o).class_names,
            (std::vector<std::string>{"5'11\"", "6'"}));
  // Any width is read; a table wider than the ensemble can cover (features / member_features
  // members, at most max_members) is refused when the model is built, naming the file and the fix.
  std::string wide = "";
  for (int j = 0; j < 40; ++j) wide += "f" + std::to_string(j) + ",";
  wide += "y\n";
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 40; ++j) wide += std::to_string(i * j % 7) + ",";
    wide += std::to_string(i % 2) + "\n";
  }
  const auto wide_csv = write("wide.csv", wide);
  auto wide_run = [&](const std::string& model) {
    return tt::test::run(tt::test::tt_run_bin() + " " +
                         write("wide.yaml", "name: wide\ndata: {name: tabular-csv, path: " + wide_csv + ", test_fraction: 0.5}\nmodel: " +
                                                model + "\ntrainer: {max_steps: 0}\n") +
                         " -q --run-dir " + (tt::test::temp_dir("tabular_csv") / "wide-run").string());
  };
  auto r = wide_run("{name: tabular-icl, member_features: 10, ensemble: 2}");  // 4 members of 10 features
  EXPECT_EQ(r.rc, 0) << r.output;
  r = wide_run("{name: tabular-icl, member_features: 10, ensemble: 2, max_members: 3}");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "wide.csv has 40 features and 2 classes: the ensemble needs 4 members (model.ensemble is 2; "
                       "seeing every feature in subsets of model.member_features (10) takes 4), more than model.max_members (3)");
  EXPECT_HAS(r.output, "raise model.max_members (or model.member_features), or select fewer features");
}

// Columns are found by name: a header naming two columns alike is refused (the training table and
// the --predict file), naming the column and the file, rather than one of them being ignored.
TEST(TabularCsv, DuplicateColumnNamesAreRefusedInTheTrainingTableAndThePredictFile) {
  EXPECT_HAS(config_error([&] { read_csv(write("dup.csv", "a,a,target\n1,2,0\n3,4,1\n"), {}); }),
             "dup.csv (data.path) has two columns named 'a' (columns 1 and 2)");
  const Table train = read_csv(write("dup_train.csv", "a,b,target\n1,2,0\n3,4,1\n"), {});
  CsvOptions o;
  o.require_label = false;
  EXPECT_HAS(config_error([&] { tt::tab::read_csv_like(write("dup_rows.csv", "a,b,b\n1,2,5\n3,4,6\n"), train, o); }),
             "dup_rows.csv (--predict) has two columns named 'b' (columns 2 and 3)");
}

// Numeric labels are classes by value: 1 and 1.0 are one class (named as the training table first
// spells it), in training and in a --predict file; text labels stay classes by spelling.
TEST(TabularCsv, NumericLabelsEqualAsNumbersAreOneClass) {
  const Table t = read_csv(write("num_spellings.csv", "a,y\n1,1.0\n2,2\n3,1\n4,10.0\n5,2.00\n6,1e1\n"), {});
  EXPECT_EQ(t.class_names, (std::vector<std::string>{"1.0", "2", "10.0"}));
  EXPECT_EQ(t.y, (std::vector<int64_t>{0, 1, 0, 2, 1, 2}));
  CsvOptions o;
  o.require_label = false;
  const Table q = read_csv_like(write("num_rows.csv", "a,y\n1,1\n2,2.0\n3,10\n4,3\n"), t, o);
  EXPECT_EQ(q.y, (std::vector<int64_t>{0, 1, 2, -1}));
  EXPECT_EQ(q.unknown_labels, (std::map<std::string, int64_t>{{"3", 1}}));
  const Table text = read_csv(write("mixed_labels.csv", "a,y\n1,1.0\n2,1\n3,cat\n"), {});
  EXPECT_EQ(text.class_names, (std::vector<std::string>{"1", "1.0", "cat"}));
  EXPECT_EQ(read_csv_like(write("mixed_rows.csv", "a,y\n1,1.00\n"), text, o).y, (std::vector<int64_t>{-1}));
}

// A regression target (many distinct fractional numbers) is named as such where the split or the
// class limit refuses it; labels that are whole numbers, or few, keep the class-count messages.
TEST(TabularCsv, AContinuousLabelColumnIsNamedAsARegressionTarget) {
  std::string reg = "a,y\n";
  for (int i = 0; i < 40; ++i) reg += std::to_string(i) + "," + std::to_string(10 + i * 0.37) + "\n";
  const Table t = read_csv(write("reg.csv", reg), {});
  std::string said = config_error([&] { tt::tab::stratified_split(t, 0.3, 0); });
  EXPECT_HAS(said, "reg.csv column 'y' looks continuous (40 distinct numeric values in 40 rows): tabular-icl is a "
                   "classifier, not a regressor; bin the column into classes, or name a class column with data.label");
  std::string wide = "a,y\n";
  for (int i = 0; i < 1500; ++i) wide += std::to_string(i) + "," + std::to_string(i * 0.5) + "\n";
  EXPECT_HAS(config_error([&] { read_csv(write("reg_wide.csv", wide), {}); }),
             "reg_wide.csv column 'y' looks continuous (1500 distinct numeric values in 1500 rows)");
  // whole numbers, or a few fractional classes: the class-count message as before
  std::string ints = "a,y\n";
  for (int i = 0; i < 40; ++i) ints += std::to_string(i) + "," + std::to_string(i) + "\n";
  EXPECT_HAS(config_error([&] { tt::tab::stratified_split(read_csv(write("ints.csv", ints), {}), 0.3, 0); }),
             "ints.csv: class '0' has 1 row; a stratified split needs at least 2");
  const Table few = read_csv(write("few.csv", "a,y\n1,0.5\n2,0.5\n3,1.5\n4,1.5\n5,2.5\n"), {});
  EXPECT_HAS(config_error([&] { tt::tab::stratified_split(few, 0.3, 0); }), "class '2.5' has 1 row");
}

TEST(TabularCsv, NumbersAtTheEdgesOfFloat) {
  // A subnormal label is a number like any other (std::stod refused it with a bare "stod").
  Table t = read_csv(write("subnormal.csv", "x,y\n1,1e-310\n2,0\n3,1e-310\n"), {});
  EXPECT_EQ(t.class_names, (std::vector<std::string>{"0", "1e-310"}));
  EXPECT_EQ(t.y, (std::vector<int64_t>{1, 0, 1}));
  // A feature float32 cannot hold is refused, not read as infinity.
  EXPECT_HAS(config_error([&] { read_csv(write("huge.csv", "a,y\n1,0\n6e60,1\n"), {}); }),
             "huge.csv:3 column 'a' has 6e60, beyond float32's range");
  EXPECT_EQ(read_csv(write("max.csv", "a,y\n1,0\n3.4e38,1\n-1e-40,0\n"), {}).x[1], 3.4e38f);
}

// A UTF-8 byte-order mark (spreadsheets write one) is not part of the first column's name, in the
// training table (data.label names that column) or in a --predict file, whose first column is a feature.
TEST(TabularCsv, ByteOrderMarkIsNotPartOfTheFirstColumnsName) {
  const std::string bom = "\xEF\xBB\xBF";
  CsvOptions o;
  o.label = "kind";
  const Table t = read_csv(write("bom-label.csv", bom + "kind,a,b\ncat,1,2\ndog,3,4\ncat,5,6\n"), o);
  EXPECT_EQ(t.label_name, "kind");
  EXPECT_EQ(t.y, (std::vector<int64_t>{0, 1, 0}));
  const Table f = read_csv(write("bom-feature.csv", bom + "a,b,kind\n1,2,cat\n3,4,dog\n"), {});
  EXPECT_EQ(f.feature_names, (std::vector<std::string>{"a", "b"}));
  CsvOptions predict;
  predict.require_label = false;
  EXPECT_EQ(read_csv_like(write("bom-rows.csv", bom + "a,b\n7,8\n"), f, predict).x, (std::vector<float>{7, 8}));
}

// data.categorical: auto (the default): a feature column with a value that is not a number is
// categorical, its values ordered (numbers by value, then text) and read as their ranks; a
// --predict file's values take the training table's codes, one it has not lies between its
// neighbours; data.impute: mean gives a missing category the training rows' most frequent one.
TEST(TabularCsv, TextColumnsAreCategoriesReadAsTheirRanksInTrainingAndPrediction) {
  CsvOptions o;
  o.impute = "mean";
  const Table t = read_csv(write("cat.csv", "color,size,y\nred,1,0\nblue,2,1\ngreen,3,0\nblue,4,1\n10,5,0\n"
                                            "2,6,1\nNA,7,0\nred,8,1\nred,9,1\n"),
                           o);
  ASSERT_EQ(t.categories.size(), 2u);
  EXPECT_EQ(t.categories[0], (std::vector<std::string>{"2", "10", "blue", "green", "red"}));
  EXPECT_TRUE(t.categories[1].empty()) << "a column of numbers stays numbers";
  std::vector<float> color;
  for (int64_t r = 0; r < t.rows; ++r) color.push_back(t.x[static_cast<size_t>(r * 2)]);
  EXPECT_EQ(color, (std::vector<float>{4, 2, 3, 2, 1, 0, 4, 4, 4}));  // NA: red, the most frequent
  EXPECT_EQ(t.impute, (std::vector<float>{4, 5}));
  // The training split's own most frequent category: rows 1, 3 and 4 (blue, blue, 10).
  Table split = t;
  impute_means_of(split, {1, 3, 4});
  EXPECT_EQ(split.impute[0], 2.f);
  EXPECT_EQ(split.x[6 * 2], 2.f);
  EXPECT_EQ(t.subset({0, 1}).categories, t.categories);

  CsvOptions predict;
  predict.require_label = false;
  const Table q = read_csv_like(write("cat-rows.csv", "size,color\n1,blue\n2,purple\n3,1\n4,\n5,zebra\n6,10\n"),
                                split, predict);
  std::vector<float> qc;
  for (int64_t r = 0; r < q.rows; ++r) qc.push_back(q.x[static_cast<size_t>(r * 2)]);
  // blue 2; purple between green (3) and red (4); 1 before 2; missing: the split's blue; zebra
  // after red; 10 its own
  EXPECT_EQ(qc, (std::vector<float>{2, 3.5f, -0.5f, 2, 4.5f, 1}));
  // A training table's column of numbers stays numbers: text there is refused, naming the table.
  const std::string e = config_error([&] { read_csv_like(write("cat-size.csv", "size,color\nbig,red\n"), split, predict); });
  EXPECT_HAS(e, "cat-size.csv:2 column 'size' is not numeric ('big'): the column is numbers in the training table");
  // Without impute, a missing category is refused as a missing number is.
  o.impute = "none";
  EXPECT_HAS(config_error([&] { read_csv(write("cat-gap.csv", "color,y\nred,0\n,1\n"), o); }),
             "cat-gap.csv:3 column 'color' has a missing value");
  // Hexadecimal is no number: with auto, its column is a category of that spelling.
  EXPECT_EQ(read_csv(write("cat-hex.csv", "a,y\n0x1,0\n2,1\n"), o).categories[0], (std::vector<std::string>{"2", "0x1"}));
}

// A --predict file's missing values take data.impute's values from the training table (its
// column means, as scikit-learn's SimpleImputer fitted on it), never the predicted file's own
// means; the training split keeps its table's. With impute: none they are refused, and the
// message says that data.impute is none.
TEST(TabularCsv, PredictRowsTakeTheTrainingTablesImputedMeans) {
  const auto rows = write("impute-rows.csv", "b,a\n100,\nNA,2\n");
  CsvOptions o;
  o.impute = "mean";
  const Table train = read_csv(write("impute-train.csv", "a,b,y\n1,,0\n3,4,1\n5,8,0\n7,6,1\n"), o);
  CsvOptions predict;  // as tabular-icl's predict reads a file: the label column optional
  predict.require_label = false;
  const Table q = read_csv_like(rows, train.subset({0, 1, 2}), predict);
  EXPECT_EQ(q.x, (std::vector<float>{4, 100, 2, 6}));  // a: the mean of 1, 3, 5, 7; b: of 4, 8, 6
  o.impute = "none";
  const Table plain = read_csv(write("impute-plain.csv", "a,b,y\n1,2,0\n3,4,1\n"), o);
  const std::string e = tt::test::config_error([&] { read_csv_like(rows, plain, predict); });
  EXPECT_HAS(e, "impute-rows.csv:2 column 'a' has a missing value ('')");
  EXPECT_HAS(e, "was read with data.impute: none (set data.impute: mean");
}

// data.impute: mean is fitted on the training split (scikit-learn's SimpleImputer fitted on the
// training rows): the gaps of training and test rows alike take the mean of the training rows'
// values, a test row's values never read into it (the whole file's mean did, a leak into the
// validation figures). A column with no value among the training rows is refused, naming it.
TEST(TabularCsv, MeanImputationReadsTheTrainingRowsOnly) {
  std::string text = "a,b,y\n";  // a: the row's number, missing in rows 0 and 1; 30 rows, two classes
  for (int i = 0; i < 30; ++i) text += (i < 2 ? std::string() : std::to_string(i * i)) + "," + std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  const std::string csv = write("impute-split.csv", text);
  const auto d = make_csv(tt::Options::parse(YAML::Load("{path: " + csv + ", impute: mean, test_fraction: 0.3}"),
                                             csv_schema(), "data", "pipeline.yaml"),
                          1);
  const auto& eval = dynamic_cast<const tt::tab::EvalSet&>(*d.validation);
  const Table& train = eval.context();
  const Table& test = eval.queries();
  double sum = 0, all = 0;
  int n = 0, gaps = 0;
  for (int i = 2; i < 30; ++i) all += i * i;
  for (int64_t r = 0; r < train.rows; ++r) {
    const int64_t i = train.line[r] - 2;  // the row's number: its file line less the header's
    if (i >= 2) sum += static_cast<double>(i * i), ++n;
  }
  const float expected = static_cast<float>(sum / n);
  ASSERT_NE(expected, static_cast<float>(all / 28)) << "the split must leave values of a among the test rows";
  EXPECT_FLOAT_EQ(train.impute.at(0), expected);
  EXPECT_FLOAT_EQ(test.impute.at(0), expected);
  for (const Table* t : {&train, &test})
    for (int64_t r = 0; r < t->rows; ++r) {
      const int64_t i = t->line[r] - 2;
      EXPECT_FLOAT_EQ(t->x[static_cast<size_t>(r * 2)], i < 2 ? expected : static_cast<float>(i * i)) << "row " << i;
      gaps += i < 2;
    }
  EXPECT_EQ(gaps, 2);

  CsvOptions o;
  o.impute = "mean";
  Table t = read_csv(write("impute-none.csv", "a,b,y\n1,,0\n3,4,1\n5,,0\n7,,1\n"), o);
  EXPECT_HAS(config_error([&] { tt::tab::impute_means_of(t, {0, 2, 3}); }),
             "column 'b' has no value in the training rows to impute from");
  tt::tab::impute_means_of(t, {0, 1});
  EXPECT_EQ(t.x, (std::vector<float>{1, 4, 3, 4, 5, 4, 7, 4}));  // a has no gap; b: row 1's 4

  // A table without gaps refits too: a --predict file's gaps take its training rows' means (they
  // kept the whole file's, test rows included)
  Table whole = read_csv(write("impute-whole.csv", "a,b,y\n1,2,0\n3,4,1\n5,6,0\n100,200,1\n"), o);
  tt::tab::impute_means_of(whole, {0, 1, 2});
  EXPECT_EQ(whole.impute, (std::vector<float>{3, 4}));
  CsvOptions predict;
  predict.require_label = false;
  const Table q = read_csv_like(write("impute-whole-rows.csv", "b,a\n,7\n"), whole.subset({0, 1, 2}), predict);
  EXPECT_EQ(q.x, (std::vector<float>{7, 4}));
}

// A --predict file without the training table's feature columns (a misspelt name) is refused
// before anything trains (exit 2), naming the file, the features it lacks, the columns it has
// instead and the fix.
TEST(TabularCsv, PredictFileWithoutTheFeatureColumnsIsRefusedBeforeTraining) {
  std::string table = "a,b,y\n";
  for (int i = 0; i < 40; ++i) table += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(i % 2) + "\n";
  const auto csv = write("columns.csv", table);
  const auto rows = write("columns-rows.csv", "a,B,note\n1,2,x\n");
  const auto run_dir = tt::test::temp_dir("tabular_csv") / "columns-run";
  const auto r = tt::test::run(
      tt::test::tt_run_bin() + " " +
      write("columns.yaml", "name: columns\ndata: {name: tabular-csv, path: " + csv +
                                ", support_size: 8, query_size: 8, episodes: 8}\nmodel: " + kTinyModel +
                                "}\noptimizer: {name: adamw, lr: 1.0e-3}\ntrainer: {max_steps: 8, batch_size: 2, threads: 1}\n") +
      " -q --run-dir " + run_dir.string() + " --predict " + rows);
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "columns-rows.csv lacks the feature column b of the training table " + csv);
  EXPECT_HAS(r.output, "columns it has that the training table has not: B, note");
  EXPECT_HAS(r.output, "Name the --predict file's columns as the training table's (a, b;");
  EXPECT_EQ(tt::test::summary_of(run_dir)["steps"], 0) << "trained before refusing";
}

namespace {
// Rows dealt to the classes in turn while each has rows left (class 0, 1, 2, 0, 1, 2, ...).
Table dealt(const std::vector<int64_t>& counts) {
  Table t;
  t.source = "dealt.csv";
  t.feature_names = {"a"};
  std::vector<int64_t> left(counts);
  for (size_t c = 0; c < counts.size(); ++c) t.class_names.push_back(std::to_string(c));
  for (bool any = true; any;) {
    any = false;
    for (size_t c = 0; c < left.size(); ++c)
      if (left[c] > 0) {
        --left[c];
        t.y.push_back(static_cast<int64_t>(c));
        t.x.push_back(static_cast<float>(t.y.size()));
        any = true;
      }
  }
  t.rows = static_cast<int64_t>(t.y.size());
  return t;
}
}  // namespace

TEST(TabularCsv, StratifiedSplitKeepsClassSharesAndDependsOnTheSeed) {
  Table t;
  t.feature_names = {"a"};
  t.class_names = {"0", "1", "2"};
  for (int i = 0; i < 100; ++i) {
    t.x.push_back(static_cast<float>(i));
    t.y.push_back(i < 50 ? 0 : (i < 80 ? 1 : 2));
  }
  t.rows = 100;
  Split s = stratified_split(t, 0.3, 0);
  EXPECT_EQ(s.train.size() + s.test.size(), 100u);
  std::vector<int> test_count(3, 0);
  for (auto i : s.test) ++test_count[t.y[i]];
  EXPECT_EQ(test_count, (std::vector<int>{15, 9, 6}));
  EXPECT_EQ(stratified_split(t, 0.3, 0).test, s.test);
  EXPECT_NE(stratified_split(t, 0.3, 1).test, s.test);
}

// tt-data split-table writes the rows stratified_split picks, each as the file has it (text,
// quotes, number formats), the header first and the rows in file order; blank lines are skipped.
TEST(TabularCsv, SplitTableWritesTheSplitsRowsAsTheFileHasThem) {
  const auto dir = tt::test::temp_dir("split-table");
  const auto path = (dir / "t.csv").string();
  std::vector<std::string> rows;
  {
    std::ofstream f(path);
    f << "a,\"b, text\",kind\n\n";
    for (int i = 0; i < 20; ++i) {
      rows.push_back(std::to_string(i) + ".50,\"" + std::to_string(20 - i) + "\"," + (i % 3 == 0 ? "yes" : "no"));
      f << rows.back() << "\n";
      if (i == 9) f << "  \n";
    }
  }
  const auto train = (dir / "train.csv").string(), test = (dir / "test.csv").string();
  ASSERT_EQ(split_table_tool({"--csv", path, "--label", "kind", "--test-fraction", "0.3", "--seed", "3", "--train-out",
                              train, "--test-out", test}),
            0);
  CsvOptions o;
  o.label = "kind";
  const Table t = read_csv(path, o);
  const Split split = stratified_split(t, 0.3, 3);
  auto lines = [](const std::string& p) {
    std::ifstream in(p);
    std::vector<std::string> v;
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  };
  for (const auto& [file, picked] : {std::pair{train, split.train}, std::pair{test, split.test}}) {
    std::vector<std::string> expected{"a,\"b, text\",kind"};
    for (int64_t r : picked) expected.push_back(rows[static_cast<size_t>(r)]);
    EXPECT_EQ(lines(file), expected) << file;
    EXPECT_EQ(read_csv(file, o).x, t.subset(picked).x) << file;
  }
  EXPECT_EQ(split.test.size(), 6u);
  // Out of range: CLI's check (exit 2); an unreadable table: the reader's clear error.
  EXPECT_EQ(split_table_tool({"--csv", path, "--test-fraction", "1.5", "--train-out", train, "--test-out", test}), 2);
  EXPECT_THROW(split_table_tool({"--csv", (dir / "missing.csv").string(), "--train-out", train, "--test-out", test}),
               tt::ConfigError);
  // An output that is the table (by another spelling too) or the other output is refused, the
  // table untouched.
  const std::string table = tt::test::read_file(path);
  const std::string same = (dir / "." / "t.csv").string();
  EXPECT_HAS(tt::test::config_error([&] {
               split_table_tool({"--csv", path, "--label", "kind", "--train-out", same, "--test-out", test});
             }),
             "--train-out " + same + " is the --csv table itself");
  EXPECT_HAS(tt::test::config_error([&] {
               split_table_tool({"--csv", path, "--label", "kind", "--train-out", train, "--test-out", path});
             }),
             "--test-out " + path + " is the --csv table itself");
  EXPECT_HAS(tt::test::config_error([&] {
               split_table_tool({"--csv", path, "--label", "kind", "--train-out", train, "--test-out", train});
             }),
             "--train-out and --test-out name one file");
  EXPECT_EQ(tt::test::read_file(path), table);
  // A byte-order mark before the header is not copied into the outputs (it was, into both).
  std::ofstream(dir / "bom.csv") << "\xEF\xBB\xBF" << table;
  ASSERT_EQ(split_table_tool({"--csv", (dir / "bom.csv").string(), "--label", "kind", "--test-fraction", "0.3", "--seed",
                              "3", "--train-out", train, "--test-out", test}),
            0);
  EXPECT_EQ(lines(train).front(), "a,\"b, text\",kind");
  EXPECT_EQ(lines(test).front(), "a,\"b, text\",kind");
}

// tt-data synth-table: the same seed writes the same table, another seed another; a header of
// f0..f{F-1},target and the classes 0..C-1 all present.
TEST(TabularPrior, SynthTableWritesTheSeedsTableAsCsv) {
  const auto dir = tt::test::temp_dir("synth-table");
  auto write = [&](const std::string& name, const char* seed) {
    const auto p = (dir / name).string();
    EXPECT_EQ(synth_table_tool({"--features", "7", "--classes", "4", "--rows", "200", "--seed", seed, "--out", p}), 0);
    return tt::test::read_file(p);
  };
  const std::string a = write("a.csv", "11"), b = write("b.csv", "11"), c = write("c.csv", "12");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.substr(0, a.find('\n')), "f0,f1,f2,f3,f4,f5,f6,target");
  const Table t = read_csv((dir / "a.csv").string(), CsvOptions{});
  EXPECT_EQ(t.rows, 200);
  EXPECT_EQ(t.features(), 7);
  EXPECT_EQ(t.class_names, (std::vector<std::string>{"0", "1", "2", "3"}));
}

// The tool refuses fewer than 2 rows per class, and writes at least 2 of every class (a stratified
// split needs them), deterministically: 1000 classes in 2000 rows is every class twice.
TEST(TabularPrior, SynthTableGivesEveryClassAtLeastTwoRows) {
  const auto dir = tt::test::temp_dir("synth-table");
  for (const char* rows : {"2000", "3000"}) {
    const auto p = (dir / (std::string("c1000_") + rows + ".csv")).string();
    ASSERT_EQ(synth_table_tool({"--features", "4", "--classes", "1000", "--rows", rows, "--seed", "7", "--out", p}), 0);
    const std::string first = tt::test::read_file(p);
    ASSERT_EQ(synth_table_tool({"--features", "4", "--classes", "1000", "--rows", rows, "--seed", "7", "--out", p}), 0);
    EXPECT_EQ(tt::test::read_file(p), first);
    const Table t = read_csv(p, CsvOptions{});
    EXPECT_EQ(t.classes(), 1000) << rows;
    std::vector<int64_t> count(1000, 0);
    for (int64_t c : t.y) ++count[static_cast<size_t>(c)];
    EXPECT_GE(*std::min_element(count.begin(), count.end()), 2) << rows;
    EXPECT_NO_THROW(tt::tab::stratified_split(t, 0.5, 0));
  }
}

// The split is scikit-learn's train_test_split(X, y, test_size, stratify=y, random_state=seed).
// Expected test rows from that algorithm (StratifiedShuffleSplit with _approximate_mode) run on
// numpy 1.24's RandomState; 400 random cases (2-10 classes, fractions 0.05-0.9, random seeds) were
// checked the same way when this was written.
TEST(TabularCsv, StratifiedSplitIsScikitLearnsTrainTestSplit) {
  // iris's class counts at 0.3, seed 0.
  EXPECT_EQ(stratified_split(dealt({50, 50, 50}), 0.3, 0).test,
            (std::vector<int64_t>{0, 1, 2, 4, 8, 9, 11, 13, 16, 18, 27, 29, 32, 34, 36, 41, 46, 52, 55, 57, 63, 65, 69,
                                  71, 72, 89, 94, 104, 106, 108, 109, 110, 111, 115, 117, 118, 119, 121, 128, 132,
                                  138, 141, 143, 148, 149}));
  // wine's: ceil(0.3 * 178) = 54 test rows, the remainders' ties broken by the generator.
  const Split w = stratified_split(dealt({59, 71, 48}), 0.3, 0);
  EXPECT_EQ(w.test, (std::vector<int64_t>{0, 1, 3, 4, 5, 9, 11, 13, 16, 18, 27, 32, 34, 35, 36, 44, 52, 53, 55,
                                          56, 57, 62, 63, 68, 69, 72, 82, 83, 92, 94, 104, 106, 107, 108, 109, 110,
                                          114, 115, 117, 118, 124, 127, 132, 135, 139, 140, 141, 154, 155, 156, 161,
                                          165, 167, 174}));
  EXPECT_EQ(w.train.size(), 124u);
  // Equal remainders among four classes (rng.choice picks which get the extra rows).
  EXPECT_EQ(stratified_split(dealt({5, 4, 3, 3}), 0.5, 7).test, (std::vector<int64_t>{1, 3, 4, 7, 8, 10, 13, 14}));
}

// What scikit-learn rejects, and a class with no training rows, which it does not.
TEST(TabularCsv, StratifiedSplitRejectsWhatScikitLearnRejectsAndAClassLeftOutOfTraining) {
  auto message = [](const Table& t, double frac, uint64_t seed) {
    return config_error([&] { stratified_split(t, frac, seed); });
  };
  EXPECT_HAS(message(dealt({10, 1, 10}), 0.3, 0), "dealt.csv: class '1' has 1 row; a stratified split needs at least 2");
  EXPECT_HAS(message(dealt({10, 10, 10}), 0.05, 0), "gives 28 training and 2 test rows for 3 classes");
  // Enough rows on each side in all, but every row of a rare class on the test side: the model
  // never sees it in its context (scikit-learn splits it so; tt refuses)
  EXPECT_HAS(message(dealt({99, 99, 2}), 0.9, 0),
             "data.test_fraction 0.9 puts every row of class '2' (2 of 200) on the test side");
  EXPECT_EQ(stratified_split(dealt({99, 99, 2}), 0.5, 0).train.size(), 100u);
  // A seed past numpy's 2^32 - 1 and a test_fraction outside (0, 1): tabular-csv's schema refuses them
  // (CsvSchemaRefusesValuesOutOfRangeOrChoices).
}

TEST(TabularCsv, EpisodesDrawSupportAndQueryRowsWithRelabelledClasses) {
  auto t = std::make_shared<Table>();
  t->feature_names = {"a", "b"};
  t->class_names = {"0", "1", "2"};
  for (int i = 0; i < 60; ++i) {
    t->x.push_back(static_cast<float>(i));
    t->x.push_back(static_cast<float>(i % 3));  // b is the class
    t->y.push_back(i % 3);
  }
  t->rows = 60;
  EpisodeDataset small(t, 256, 64, 10, 0);  // more than the table holds: 80/20 of its rows
  tt::Batch b = small.get(torch::arange(2));
  EXPECT_EQ(b.at("x").sizes(), (std::vector<int64_t>{2, 60, 2}));
  EXPECT_EQ(b.at("support")[0].sum().item<int64_t>(), 48);
  std::set<std::vector<int64_t>> mappings;
  for (int e = 0; e < 12; ++e) {
    tt::Batch ep = EpisodeDataset(t, 30, 10, 1, static_cast<uint64_t>(e)).get(torch::arange(1));
    // The relabelling is a permutation: feature b (the true class) maps to one label each.
    std::vector<int64_t> map(3, -1);
    for (int64_t i = 0; i < 40; ++i) {
      const auto cls = static_cast<int64_t>(ep.at("x")[0][i][1].item<float>());
      const int64_t lab = ep.at("y")[0][i].item<int64_t>();
      if (map[cls] < 0) map[cls] = lab;
      ASSERT_EQ(map[cls], lab);
    }
    mappings.insert(map);
  }
  EXPECT_GT(mappings.size(), 2u);
}

// An episode depends on its index only: asked for alone, in another order, or by another
// loader (a data-parallel rank, a resumed run), episode i is the same table.
TEST(TabularCsv, EpisodeIIsTheSameWhoeverAsksAndWhenever) {
  auto t = std::make_shared<Table>();
  t->feature_names = {"a"};
  t->class_names = {"0", "1"};
  for (int i = 0; i < 40; ++i) {
    t->x.push_back(static_cast<float>(i));
    t->y.push_back(i % 2);
  }
  t->rows = 40;
  EpisodeDataset one(t, 12, 4, 8, 3), other(t, 12, 4, 8, 3);
  const tt::Batch all = one.get(torch::tensor({5, 2, 7}));
  one.get(torch::arange(8));  // draws in between change nothing
  const tt::Batch two = other.get(torch::tensor({2}));
  EXPECT_TRUE(torch::equal(all.at("x")[1], two.at("x")[0]));
  EXPECT_TRUE(torch::equal(all.at("y")[1], two.at("y")[0]));
  EXPECT_TRUE(torch::equal(one.get(torch::tensor({7})).at("x")[0], all.at("x")[2]));
  EXPECT_FALSE(torch::equal(all.at("x")[0], all.at("x")[1]));
  EXPECT_FALSE(torch::equal(EpisodeDataset(t, 12, 4, 8, 4).get(torch::tensor({2})).at("x"), two.at("x")));
}

TEST(TabularMetrics, MatchHandComputedValues) {
  // Two classes, four rows.
  const std::vector<double> p = {0.9, 0.1, 0.4, 0.6, 0.3, 0.7, 0.8, 0.2};
  const std::vector<int64_t> y = {0, 1, 0, 1};
  auto m = classification_metrics(p, y, 2);
  EXPECT_DOUBLE_EQ(m["accuracy"], 0.5);
  EXPECT_DOUBLE_EQ(m["roc_auc"], 0.5);  // scores of class 1: pos {0.6, 0.2}, neg {0.1, 0.7}: 2 of 4 pairs
  EXPECT_NEAR(m["log_loss"], -(std::log(0.9) + std::log(0.6) + std::log(0.3) + std::log(0.2)) / 4, 1e-12);
  EXPECT_NEAR(m["brier"], (2 * 0.01 + 2 * 0.16 + 2 * 0.49 + 2 * 0.64) / 4, 1e-12);
  // ECE, 15 bins: confidences 0.9 (right), 0.6 (right), 0.7 (wrong), 0.8 (wrong), each alone in its bin.
  EXPECT_NEAR(m["ece"], (0.1 + 0.4 + 0.7 + 0.8) / 4, 1e-12);
  // Three classes: one-vs-rest macro AUC of a perfect ranking is 1.
  auto m3 = classification_metrics({0.8, 0.1, 0.1, 0.1, 0.8, 0.1, 0.2, 0.2, 0.6}, {0, 1, 2}, 3);
  EXPECT_DOUBLE_EQ(m3["roc_auc"], 1.0);
  EXPECT_DOUBLE_EQ(m3["accuracy"], 1.0);
  EXPECT_DOUBLE_EQ(roc_auc({1, 1, 2}, {false, true, true}), 0.75);  // a tie counts one half
}

namespace {
// The message of the error that `yaml` (a data section) raises in `make` (or already in the schema).
template <class Make>
std::string data_error(const tt::Schema& schema, const std::string& yaml, Make make) {
  try {
    make(tt::Options::parse(YAML::Load(yaml), schema, "data", "pipeline.yaml"), 1);
  } catch (const tt::Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

// The schema refuses a value out of its range, naming the option, the range and the value; the
// checks that compare two options stay in make_prior, naming the option and the fix.
TEST(TabularPrior, SchemaRefusesValuesOutOfRangeAndMakePriorTheInconsistentOnes) {
  const tt::Schema s = prior_schema();
  EXPECT_HAS(data_error(s, "{warp_share: 1.5}", make_prior), "data.warp_share must be in [0, 1], got 1.5");
  // (core prints the bound 10 as "1e1" today: the range's lower end and the value are checked)
  const std::string classes = data_error(s, "{max_classes: 11}", make_prior);
  EXPECT_HAS(classes, "data.max_classes must be in [2, ");
  EXPECT_HAS(classes, "], got 11");
  EXPECT_HAS(data_error(s, "{rows: 3}", make_prior), "data.rows must be >= 4, got 3");
  EXPECT_HAS(data_error(s, "{support_max: 1}", make_prior), "data.support_max must be in (0, 1), got 1");
  EXPECT_HAS(data_error(s, "{validation_tables: -1}", make_prior), "data.validation_tables must be >= 0, got -1");
  EXPECT_HAS(data_error(s, "{min_features: 9, max_features: 8}", make_prior),
             "pipeline.yaml:1:16: data.min_features must be between 1 and max_features");
  EXPECT_HAS(data_error(s, "{rows: 16, max_classes: 10}", make_prior),
             "data.max_classes needs at least 2 rows per class: raise rows");
  EXPECT_HAS(data_error(s, "{support_min: 0.8, support_max: 0.5}", make_prior),
             "data.support_min and support_max must satisfy 0 < support_min <= support_max < 1");
  EXPECT_EQ(data_error(s, "{tables: 3, validation_tables: 0, rows: 4, max_classes: 2}", make_prior), "(no error)");
}

TEST(TabularCsv, CsvSchemaRefusesValuesOutOfRangeOrChoices) {
  const tt::Schema s = csv_schema();
  const std::string csv = write("schema.csv", "a,y\n1,0\n2,1\n3,0\n4,1\n5,0\n6,1\n");
  const std::string path = "{path: " + csv + ", ";
  EXPECT_HAS(data_error(s, path + "impute: median}", make_csv), "data.impute must be one of none | mean, got 'median'");
  EXPECT_HAS(data_error(s, path + "test_fraction: 1}", make_csv), "data.test_fraction must be in (0, 1), got 1");
  EXPECT_HAS(data_error(s, path + "split_seed: 4294967296}", make_csv),
             "data.split_seed must be in [0, 4294967295], got 4294967296");
  EXPECT_HAS(data_error(s, path + "episodes: 0}", make_csv), "data.episodes must be >= 1, got 0");
  // where the section is, once: it read "default of data.path: data.path is required"
  EXPECT_EQ(data_error(s, "{label: y}", make_csv), "pipeline.yaml:1:1: data.path is required: the CSV file to learn from");
  EXPECT_EQ(data_error(s, path + "label: y, split_seed: 4294967295}", make_csv), "(no error)");
}
