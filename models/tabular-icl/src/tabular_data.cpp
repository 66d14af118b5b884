#include "tabular_data.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "prior.h"  // id_seed_of
#include "tt/error.h"

namespace tt::tab {

Batch table_batch(const Table& context, const Table& queries) {
  const int64_t F = context.features(), S = context.rows, Q = queries.rows;
  at::Tensor x = torch::empty({1, S + Q, F});
  std::copy(context.x.begin(), context.x.end(), x.data_ptr<float>());
  std::copy(queries.x.begin(), queries.x.end(), x.data_ptr<float>() + S * F);
  at::Tensor y = torch::full({1, S + Q}, -1, torch::kLong);
  std::copy(context.y.begin(), context.y.end(), y.data_ptr<int64_t>());
  if (!queries.y.empty()) std::copy(queries.y.begin(), queries.y.end(), y.data_ptr<int64_t>() + S);
  at::Tensor support = torch::zeros({1, S + Q}, torch::kBool);
  support.slice(1, 0, S).fill_(true);
  Batch b;
  b.set("x", x);
  b.set("feature_mask", torch::ones({1, F}, torch::kBool));
  b.set("y", y);
  b.set("support", support);
  b.set("n_classes", torch::full({1}, context.classes(), torch::kLong));
  return b;
}

EpisodeDataset::EpisodeDataset(std::shared_ptr<const Table> train, int64_t support, int64_t query, int64_t episodes,
                               uint64_t seed)
    : train_(std::move(train)), support_(support), query_(query), episodes_(episodes), seed_(seed) {
  if (support_ + query_ > train_->rows) {  // a small table: its rows in the same proportion
    const double share = static_cast<double>(support_) / static_cast<double>(support_ + query_);
    support_ = std::clamp<int64_t>(std::llround(share * static_cast<double>(train_->rows)), 1, train_->rows - 1);
    query_ = train_->rows - support_;
  }
}

Batch EpisodeDataset::get(const at::Tensor& indices) {
  const int64_t B = indices.numel(), F = train_->features(), N = support_ + query_, C = train_->classes();
  at::Tensor x = torch::empty({B, N, F});
  at::Tensor y = torch::empty({B, N}, torch::kLong);
  at::Tensor support = torch::zeros({B, N}, torch::kBool);
  support.slice(1, 0, support_).fill_(true);
  at::Tensor id_seed = torch::empty({B}, torch::kLong);
  std::vector<int64_t> rows(static_cast<size_t>(train_->rows));
  const at::Tensor idx = indices.to(torch::kLong).contiguous();
  for (int64_t b = 0; b < B; ++b) {
    // Episode i is a function of (seed, i) alone: any rank, a resumed run or a prefetching
    // loader that asks for episode i gets the same rows and relabelling.
    const auto i = static_cast<uint64_t>(idx.data_ptr<int64_t>()[b]);
    const uint64_t episode_seed = seed_ * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1;
    std::mt19937_64 rng(episode_seed);
    id_seed.data_ptr<int64_t>()[b] = id_seed_of(episode_seed);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    std::vector<int64_t> relabel(static_cast<size_t>(C));
    std::iota(relabel.begin(), relabel.end(), 0);
    std::shuffle(relabel.begin(), relabel.end(), rng);
    float* xp = x.data_ptr<float>() + b * N * F;
    int64_t* yp = y.data_ptr<int64_t>() + b * N;
    for (int64_t i = 0; i < N; ++i) {
      std::copy_n(train_->x.begin() + rows[i] * F, F, xp + i * F);
      yp[i] = relabel[train_->y[rows[i]]];
    }
  }
  Batch out;
  out.set("x", x);
  out.set("feature_mask", torch::ones({B, F}, torch::kBool));
  out.set("y", y);
  out.set("support", support);
  out.set("n_classes", torch::full({B}, C, torch::kLong));
  out.set("id_seed", id_seed);
  return out;
}

std::map<std::string, int64_t> EpisodeDataset::info() const {
  return {{"features", train_->features()}, {"classes", train_->classes()}, {"rows", train_->rows}};
}

std::string EpisodeDataset::describe() const {
  return detail::cat(episodes_, " episodes of ", support_, " support + ", query_, " query rows from ", train_->rows,
                     " training rows of ", train_->source);
}

Batch EvalSet::get(const at::Tensor& indices) {
  at::Tensor idx = indices.to(torch::kLong).contiguous();
  return table_batch(*context_, queries_->subset(std::vector<int64_t>(idx.data_ptr<int64_t>(),
                                                                       idx.data_ptr<int64_t>() + idx.numel())));
}

std::map<std::string, int64_t> EvalSet::info() const {
  return {{"features", context_->features()}, {"classes", context_->classes()}, {"rows", queries_->rows}};
}

std::string EvalSet::describe() const {
  return detail::cat(queries_->rows, " test rows of ", queries_->source, " (context: ", context_->rows, " training rows)");
}

Schema csv_schema() {
  using C = CsvDataOptions;
  // label and impute are members of the base CsvOptions: bound as CsvDataOptions's, as the others.
  return Schema()
      .field("path", &C::path, std::nullopt, "the CSV file: a header row, feature columns (numbers, or categories: data.categorical), a label column")
      .field<C, std::optional<std::string>>("label", &CsvOptions::label, std::nullopt,
                                            "the label column's name (default: the last column)")
      .field<C, std::string>("impute", &CsvOptions::impute, "none",
                             "missing values (empty, NA, NaN, null, ?, and pandas' other default markers): none = an "
                             "error, mean = the column's mean over the training rows, a categorical column's most "
                             "frequent category (the test rows' and a --predict file's too)")
      .choices({"none", "mean"})
      .field<C, std::string>("categorical", &CsvOptions::categorical, "auto",
                             "auto = a feature column with a value that is not a number is categorical: its values "
                             "ordered (numbers by value, then text) and read as their ranks 0, 1, ... (a --predict "
                             "file's category the training table has not lies between its neighbours; data.impute: "
                             "mean gives a missing one the most frequent category); none = an error")
      .choices({"auto", "none"})
      .field("test_fraction", &C::test_fraction, 0.3, "share of each class held out for testing (stratified)")
      .range(gt(0), lt(1))
      .field("split_seed", &C::split_seed, 0, "seed of the stratified split (numpy's and scikit-learn's seeds: < 2^32)")
      .range(ge(0), le(4294967295.0))
      .field("support_size", &C::support_size, 256, "fine-tuning: support rows per episode (TabTune's support_size)")
      .range(ge(1))
      .field("query_size", &C::query_size, 64, "fine-tuning: query rows per episode (TabTune's query_size)")
      .range(ge(1))
      .field("episodes", &C::episodes, 64, "fine-tuning: episodes per epoch (each epoch has the same ones, their feature identities too)").range(ge(1));
}

Datasets make_csv(const Options& o, uint64_t seed) {
  const auto c = o.to<CsvDataOptions>();
  o.check(c.path.has_value(), "path", "is required: the CSV file to learn from");
  Table all = read_csv(*c.path, c);
  const Split split = stratified_split(all, c.test_fraction, static_cast<uint64_t>(c.split_seed));
  o.check(split.train.size() >= 2, "test_fraction", "leaves fewer than 2 training rows");
  impute_means_of(all, split.train);  // the training rows' means: the test rows' values stay unread
  auto train = std::make_shared<const Table>(all.subset(split.train));
  auto test = std::make_shared<const Table>(all.subset(split.test));
  Datasets d;
  d.train = std::make_shared<EpisodeDataset>(train, c.support_size, c.query_size, c.episodes, seed);
  d.validation = std::make_shared<EvalSet>(train, test);
  return d;
}

}  // namespace tt::tab
