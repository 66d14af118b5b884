#include <filesystem>

#include "topic_model.h"
#include "tt/error.h"
#include "tt/npy.h"

namespace tt::topic {

TopicModel::TopicModel(int64_t n_docs, int64_t n_terms, int64_t k, double init_scale)
    : n_(n_docs), m_(n_terms), k_(k) {
  // tinytopics: both initialised U(0, 0.1)
  L_raw_ = register_parameter("L_raw", torch::rand({n_, k_}) * init_scale);
  F_raw_ = register_parameter("F_raw", torch::rand({k_, m_}) * init_scale);
}

ModelOutput TopicModel::forward_loss(const Batch& batch) {
  const auto& idx = batch.at("index");
  const auto& x = batch.at("x");
  auto L = torch::softmax(L_raw_.index_select(0, idx), 1);
  auto F = torch::softmax(F_raw_, 1);
  auto xhat = L.mm(F);
  // Poisson negative log-likelihood without the constant log(x!) term, summed over the batch
  auto loss = (xhat - x * torch::log(torch::clamp_min(xhat, 1e-10))).sum();
  ModelOutput out;
  out.loss = loss;
  out.reduction = Reduction::Sum;
  out.items = batch.size;
  return out;
}

torch::Tensor TopicModel::L() const { return torch::softmax(L_raw_.detach(), 1); }
torch::Tensor TopicModel::F() const { return torch::softmax(F_raw_.detach(), 1); }

void TopicModel::write_outputs(const std::filesystem::path& run_dir, State&) {
  write_npy(run_dir / "L.npy", L().to(torch::kCPU));
  write_npy(run_dir / "F.npy", F().to(torch::kCPU));
}

std::string TopicModel::describe() const {
  return "topic model: " + std::to_string(n_) + " docs x " + std::to_string(m_) + " terms, k=" + std::to_string(k_) +
         " (" + std::to_string(n_ * k_ + k_ * m_) + " parameters)";
}

Schema model_schema() {
  return Schema()
      .add("k", Type::Int, "10", "number of topics")
      .add("init_scale", Type::Float, "0.1", "L_raw and F_raw start U(0, init_scale) as in tinytopics");
}

std::shared_ptr<Model> make_model(const Options& o, const Datasets& data) {
  o.check(o.get_int("k") >= 1, "k", "must be at least 1");
  o.check(o.get_float("init_scale") > 0, "init_scale", "must be positive");
  auto info = data.train->info();
  TT_CHECK_AS(ConfigError, info.count("n_docs") && info.count("n_terms"),
              "model (topic) needs a document-term dataset (data: topic-synthetic); this dataset gives none");
  return std::make_shared<TopicModel>(info["n_docs"], info["n_terms"], o.get_int("k"), o.get_float("init_scale"));
}

}  // namespace tt::topic
