#include <filesystem>

#include <fstream>
#include <nlohmann/json.hpp>

#include "evaluate.h"
#include "poisson_loss.h"
#include "topic_model.h"
#include "tt/error.h"
#include "tt/fused_adamw.h"
#include "tt/log.h"
#include "tt/npy.h"
#include "tt/state.h"

namespace tt::topic {

TopicModel::TopicModel(int64_t n_docs, int64_t n_terms, Config config, std::shared_ptr<TopicSource> data)
    : n_(n_docs), m_(n_terms), k_(config.k), config_(config), data_(std::move(data)) {
  // tinytopics: both initialised U(0, 0.1)
  L_raw_ = register_parameter("L_raw", torch::rand({n_, k_}) * config_.init_scale);
  F_raw_ = register_parameter("F_raw", torch::rand({k_, m_}) * config_.init_scale);
}

static torch::Tensor dense_rows(const Batch& batch, int64_t m) {
  if (batch.has("x")) return batch.at("x");
  auto x = torch::zeros({batch.size, m}, batch.at("vals").options().dtype(torch::kFloat));
  x.index_put_({batch.at("rows"), batch.at("cols")}, batch.at("vals"), /*accumulate=*/true);
  return x;
}

ModelOutput TopicModel::forward_loss(const Batch& batch) {
  const auto& idx = batch.at("index");
  // Poisson negative log-likelihood without the constant log(x!) term, summed over the batch
  torch::Tensor loss;
  if (fused()) {
    BatchCounts counts;
    if (batch.has("x")) {
      counts = nonzeros_of(batch.at("x"));
    } else {
      counts.rows = batch.at("rows");
      counts.cols = batch.at("cols");
      counts.vals = batch.at("vals");
    }
    if (deferring_ && is_training()) deferring_->catch_up_rows(L_raw_, idx);  // rows current before reading
    loss = poisson_nmf_loss(L_raw_, F_raw_, idx, counts, (config_.lazy || rows_gradient_) && is_training());
  } else {
    TT_CHECK(!config_.lazy, "model (topic): lazy: true needs the fused loss, which runs on the CPU only");
    loss = poisson_nmf_loss_reference(L_raw_, F_raw_, idx, dense_rows(batch, m_));
  }
  ModelOutput out;
  out.loss = loss;
  out.reduction = Reduction::Sum;
  out.items = batch.size;
  return out;
}

void TopicModel::on_optimizer(torch::optim::Optimizer& optimizer, bool gradients_read) {
  rows_gradient_ = config_.lazy;
  deferring_ = nullptr;
  if (config_.lazy || !fused() || gradients_read) return;
  if (auto* adamw = dynamic_cast<FusedAdamW*>(&optimizer)) {
    if (config_.defer) {
      adamw->defer_rows(L_raw_);
      deferring_ = adamw;
    } else {
      adamw->dense_rows(L_raw_);
    }
    rows_gradient_ = true;
  }
}

torch::Tensor TopicModel::L() const { return torch::softmax(L_raw_.detach(), 1); }
torch::Tensor TopicModel::F() const { return torch::softmax(F_raw_.detach(), 1); }

void TopicModel::write_outputs(const std::filesystem::path& run_dir, State& state) {
  const auto L_fit = L().to(torch::kCPU), F_fit = F().to(torch::kCPU);
  write_npy(run_dir / "L.npy", L_fit);
  write_npy(run_dir / "F.npy", F_fit);
  write_csv(run_dir / "L.csv", L_fit);
  write_csv(run_dir / "F.csv", F_fit);

  const auto vocab = data_->vocabulary();
  const auto terms = top_terms(F_fit, vocab, 10);
  write_top_terms(run_dir / "top_terms.txt", terms);
  if (!vocab.empty()) {
    for (size_t t = 0; t < terms.size(); ++t) {
      std::string line;
      for (size_t i = 0; i < std::min<size_t>(8, terms[t].size()); ++i) line += (i ? ", " : "") + terms[t][i].first;
      log().info("topic {:>2}: {}", t, line);
    }
  }

  if (config_.corpus_loss) {
    torch::NoGradGuard no_grad;
    auto rows = [this](int64_t b, int64_t e) {
      auto batch = data_->get(torch::arange(b, e, torch::kLong));
      return dense_rows(batch, m_);
    };
    const auto cl = corpus_loss(L_fit, F_fit, rows);
    state.metrics["corpus_loss"] = cl.sum;
    state.metrics["corpus_loss_per_doc"] = cl.mean_per_doc;
  }

  const auto truth = data_->true_F();
  if (truth.defined()) {
    const auto a = align_topics(truth.to(torch::kFloat), F_fit);
    state.metrics["aligned_cosine_mean"] = a.mean;
    state.metrics["aligned_cosine_min"] = a.min;
    nlohmann::json j{{"mean", a.mean}, {"min", a.min}, {"assignment", a.assignment}, {"cosine", a.cosine}};
    std::ofstream(run_dir / "alignment.json") << j.dump(2) << "\n";
    log().info("topic alignment with the true topics: mean cosine {:.4f}, min {:.4f}", a.mean, a.min);
  }
  plot_structure(L_fit, run_dir / "structure.png", "document-topic structure (" + std::to_string(k_) + " topics)",
                 2000, data_->doc_labels());
}

std::string TopicModel::describe() const {
  return "topic model: " + std::to_string(n_) + " docs x " + std::to_string(m_) + " terms, k=" + std::to_string(k_) +
         " (" + std::to_string(n_ * k_ + k_ * m_) + " parameters" + (fused() ? "" : ", reference loss") +
         (config_.lazy ? ", lazy L updates" : "") + ")";
}

Schema model_schema() {
  using C = TopicModel::Config;
  return Schema()
      .field("k", &C::k, 10, "number of topics (one topic explains nothing)").range(ge(2))
      .field("init_scale", &C::init_scale, 0.1, "L_raw and F_raw start U(0, init_scale) as in tinytopics")
      .range(gt(0))
      .field("fused", &C::fused, true,
             "compute the loss and its gradient directly over the non-zeros, on the CPU (false, and on a GPU: "
             "tinytopics' dense autograd)")
      .field("corpus_loss", &C::corpus_loss, true, "compute the whole-corpus loss at the end (one pass over the data)")
      .field("defer_updates", &C::defer, true,
             "AdamW's zero-gradient updates of the rows of L outside the batch are applied in closed form when "
             "a row is next used (same result to float rounding, O(batch) instead of O(n) per step); false: "
             "every row every step, bitwise as a dense gradient")
      .field("lazy", &C::lazy, false,
             "update only the batch's rows of L (sparse gradient, as sparse Adam); not tinytopics' semantics");
}

std::shared_ptr<Model> make_model(const Options& o, const Datasets& data) {
  auto source = std::dynamic_pointer_cast<TopicSource>(data.train);
  TT_CHECK_AS(ConfigError, source,
              "model (topic) needs a document-term dataset (topic-synthetic, topic-npy, topic-pt, topic-mtx, "
              "topic-text); this dataset is not one");
  const auto c = o.to<TopicModel::Config>();
  o.check(c.k <= source->n_terms(), "k",
          "(" + std::to_string(c.k) + ") must not exceed the number of terms (" + std::to_string(source->n_terms()) + ")");
  o.check(!c.lazy || c.fused, "lazy", "needs fused: true");
  return std::make_shared<TopicModel>(source->size(), source->n_terms(), c, source);
}

}  // namespace tt::topic
