#include <ATen/CPUGeneratorImpl.h>

#include "topic_data.h"
#include "tt/error.h"

namespace tt::topic {

Batch CountsDataset::get(const at::Tensor& indices) {
  Batch b;
  b.set("index", indices);
  b.set("x", x_.index_select(0, indices));
  return b;
}

std::string CountsDataset::describe() const {
  return std::to_string(x_.size(0)) + " docs x " + std::to_string(x_.size(1)) + " terms";
}

static torch::Tensor dirichlet_ones(int64_t rows, int64_t cols, at::Generator& gen) {
  // Dirichlet(1, ..., 1) rows: normalised Exp(1) draws
  auto e = -torch::log(at::rand({rows, cols}, gen, torch::kDouble).clamp_min(1e-300));
  return e / e.sum(1, true);
}

SyntheticDataset::SyntheticDataset(int64_t n, int64_t m, int64_t k, double avg_len, uint64_t seed)
    : CountsDataset(torch::Tensor()) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  true_L_ = dirichlet_ones(n, k, gen);
  true_F_ = dirichlet_ones(k, m, gen);
  auto lengths = at::poisson(torch::full({n}, avg_len, torch::kDouble), gen).to(torch::kLong);
  auto probs = true_L_.mm(true_F_);
  const int64_t max_len = std::max<int64_t>(1, lengths.max().item<int64_t>());
  auto words = at::multinomial(probs, max_len, /*replacement=*/true, gen);  // n x max_len term ids
  auto keep = (torch::arange(max_len, torch::kLong).unsqueeze(0) < lengths.unsqueeze(1)).to(torch::kFloat);
  x_ = torch::zeros({n, m}, torch::kFloat).scatter_add_(1, words, keep);
  true_L_ = true_L_.to(torch::kFloat);
  true_F_ = true_F_.to(torch::kFloat);
}

std::string SyntheticDataset::describe() const {
  return "synthetic " + CountsDataset::describe() + ", " + std::to_string(true_F_.size(0)) + " true topics, " +
         std::to_string(static_cast<int64_t>(x_.sum().item<double>())) + " words";
}

Schema synthetic_schema() {
  return Schema()
      .add("n_docs", Type::Int, "1000", "documents (n)")
      .add("n_terms", Type::Int, "1000", "vocabulary size (m)")
      .add("k", Type::Int, "10", "true topics")
      .add("avg_doc_length", Type::Float, "150", "mean words per document (Poisson)")
      .add("seed", Type::Int, "~", "generator seed (default: the pipeline seed)");
}

Datasets make_synthetic(const Options& o, uint64_t pipeline_seed) {
  for (const char* key : {"n_docs", "n_terms", "k"}) o.check(o.get_int(key) >= 1, key, "must be at least 1");
  o.check(o.get_float("avg_doc_length") > 0, "avg_doc_length", "must be positive");
  uint64_t seed = o.is_set("seed") ? static_cast<uint64_t>(o.get_int("seed")) : pipeline_seed;
  Datasets d;
  d.train = std::make_shared<SyntheticDataset>(o.get_int("n_docs"), o.get_int("n_terms"), o.get_int("k"),
                                               o.get_float("avg_doc_length"), seed);
  return d;
}

}  // namespace tt::topic
