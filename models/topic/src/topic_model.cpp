#include <filesystem>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "evaluate.h"
#include "poisson_loss.h"
#include "topic_kernels.h"
#include "topic_model.h"
#include "tt/error.h"
#include "tt/fused_adamw.h"
#include "tt/helper.h"
#include "tt/json_text.h"
#include "tt/log.h"
#include "tt/npy.h"
#include "tt/report.h"
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

// A batch's non-zeros: those it carries, or those of its dense rows (scanned by tt's kernels on
// the CPU, by LibTorch elsewhere).
static BatchCounts counts_of(const Batch& batch) {
  if (batch.has("x")) {
    const auto& x = batch.at("x");
    return x.is_cpu() ? nonzeros_of(x) : nonzeros_on_device(x);
  }
  BatchCounts counts;
  counts.rows = batch.at("rows");
  counts.cols = batch.at("cols");
  counts.vals = batch.at("vals");
  return counts;
}

ModelOutput TopicModel::forward_loss(const Batch& batch) {
  const auto& idx = batch.at("index");
  // Poisson negative log-likelihood without the constant log(x!) term, summed over the batch
  torch::Tensor loss;
  if (fused()) {
    const BatchCounts counts = counts_of(batch);
    if (deferring_ && is_training()) deferring_->catch_up_rows(L_raw_, idx);  // rows current before reading
    loss = poisson_nmf_loss(L_raw_, F_raw_, idx, counts, (config_.lazy || rows_gradient_) && is_training());
  } else {
    TT_CHECK(!config_.lazy, "model (topic): lazy: true needs the fused loss, which runs on the CPU only");
    // off the CPU the same loss over the non-zeros through autograd; fused: false, tinytopics' formula
    loss = config_.fused ? poisson_nmf_loss_nonzeros(L_raw_, F_raw_, idx, counts_of(batch))
                         : poisson_nmf_loss_reference(L_raw_, F_raw_, idx, dense_rows(batch, m_));
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
  rows_adamw_ = nullptr;
  if (config_.lazy || !fused() || gradients_read) return;
  if (auto* adamw = dynamic_cast<FusedAdamW*>(&optimizer)) {
    if (config_.defer) {
      adamw->defer_rows(L_raw_);
      deferring_ = adamw;
    } else {
      adamw->dense_rows(L_raw_);
    }
    rows_adamw_ = adamw;
    rows_gradient_ = true;
  }
}

FusedStep TopicModel::fused_step(const Batch& batch, torch::optim::Optimizer& optimizer) {
  if (!config_.fused_step || !fused() || !is_training() || !rows_adamw_ || &optimizer != rows_adamw_ ||
      !rows_adamw_->fusable(L_raw_) || !rows_adamw_->fusable(F_raw_))
    return {};
  torch::NoGradGuard no_grad;
  const BatchCounts counts = counts_of(batch);
  const auto idx = batch.at("index").to(torch::kLong).contiguous();
  const int64_t B = idx.numel(), nnz = counts.vals.numel();
  const int64_t* id = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < B; ++i)
    TT_CHECK(id[i] >= 0 && id[i] < n_, "model (topic): document ", id[i], " out of range (", n_, " documents)");
  if (deferring_) deferring_->catch_up_rows(L_raw_, idx);  // rows current before reading
  if (!Q_.defined()) {
    Q_ = torch::empty({k_, m_}, torch::kFloat);
    gF_ = torch::zeros({k_, m_}, torch::kFloat);
  }
  if (!P_.defined() || P_.size(0) < B) P_ = torch::empty({B, k_}, torch::kFloat);
  if (!xhat_.defined() || xhat_.numel() < nnz) {
    const int64_t cap = std::max<int64_t>(nnz, xhat_.defined() ? 2 * xhat_.numel() : 0);
    xhat_ = torch::empty({cap}, torch::kFloat);
    w_ = torch::empty({cap}, torch::kDouble);
  }
  float* P = P_.data_ptr<float>();
  float* Q = Q_.data_ptr<float>();
  const int64_t* r = counts.rows.data_ptr<int64_t>();
  const int64_t* c = counts.cols.data_ptr<int64_t>();
  const double* w = w_.data_ptr<double>();
  std::vector<double> qsum(static_cast<size_t>(k_));
  const double loss = loss_forward(L_raw_.data_ptr<float>(), F_raw_.data_ptr<float>(), id, B, k_, m_, r, c,
                                   counts.vals.data_ptr<float>(), nnz, P, Q, qsum.data(), xhat_.data_ptr<float>(),
                                   w_.data_ptr<double>());
  FusedStep out;
  out.stepped = true;
  out.output.loss = torch::tensor(loss, torch::kFloat);  // as the autograd path's loss
  out.output.reduction = Reduction::Sum;
  out.output.items = B;
  if (!std::isfinite(loss)) return out;  // nothing updated: the trainer's on_nan decides
  // F: topic by topic, its gradient row (scatter, softmax backward) and at once AdamW's update of
  // that row, the row's gradient zeroed for the next step; P's gradient topic by topic.
  std::vector<double> gP(static_cast<size_t>(k_ * B), 0.0);
  const FusedAdamW::DenseStep f_step = rows_adamw_->begin_dense_step(F_raw_);
  float* gF = gF_.data_ptr<float>();
  tt::parallel_for(0, k_, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* g = gF + t * m_;
      kernels::topic_grads(1.0, P, Q, r, c, w, nnz, t, k_, m_, g, gP.data() + t * B);
      kernels::softmax_backward_rows(gF, Q, t, t + 1, m_);
      f_step.apply(t * m_, g, m_);
      std::fill(g, g + m_, 0.0f);
    }
  });
  // L: the batch's rows, distinct and ascending, then AdamW's step of L with them.
  std::vector<float> gL(static_cast<size_t>(B * k_));
  rows_backward(P, gP.data(), B, k_, gL.data());
  const RowGradients rg = row_gradients(id, gL.data(), B, k_);
  rows_adamw_->step_rows(L_raw_, rg.rows.data(), rg.values.data(), static_cast<int64_t>(rg.rows.size()));
  return out;
}

torch::Tensor TopicModel::L() const { return torch::softmax(L_raw_.detach(), 1); }
torch::Tensor TopicModel::F() const { return torch::softmax(F_raw_.detach(), 1); }

void TopicModel::write_outputs(const std::filesystem::path& run_dir, State& state) {
  const auto L_fit = L().to(torch::kCPU), F_fit = F().to(torch::kCPU);
  write_npy(run_dir / "L.npy", L_fit);
  write_npy(run_dir / "F.npy", F_fit);
  write_csv(run_dir / "L.csv", L_fit);
  const auto vocab = data_->vocabulary();
  if (vocab.empty()) {
    write_csv(run_dir / "F.csv", F_fit);
  } else {  // F's columns named: vocab.txt in column order, and F.csv's header
    write_lines(run_dir / "vocab.txt", vocab);
    write_csv(run_dir / "F.csv", F_fit, vocab);
  }
  const auto ids = data_->doc_ids();
  if (!ids.empty()) write_lines(run_dir / "doc_ids.txt", ids);  // L's rows named

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
    write_file_atomic(run_dir / "alignment.json", tt::json_text(j, 2) + "\n");
    log().info("topic alignment with the true topics: mean cosine {:.4f}, min {:.4f}", a.mean, a.min);
  }
  plot_structure(L_fit, run_dir / "structure.png", "document-topic structure (" + std::to_string(k_) + " topics)",
                 2000, data_->doc_labels());
}

std::string TopicModel::describe() const {
  const char* loss = fused() ? "" : config_.fused ? ", loss over the non-zeros through autograd" : ", reference loss";
  return "topic model: " + std::to_string(n_) + " docs x " + std::to_string(m_) + " terms, k=" + std::to_string(k_) +
         " (" + std::to_string(n_ * k_ + k_ * m_) + " parameters" + loss +
         (config_.lazy ? ", lazy L updates" : "") + ")";
}

Schema model_schema() {
  using C = TopicModel::Config;
  return Schema()
      .field("k", &C::k, 10, "number of topics (one topic explains nothing)").range(ge(2))
      .field("init_scale", &C::init_scale, 0.1, "L_raw and F_raw start U(0, init_scale) as in tinytopics")
      .range(gt(0))
      .field("fused", &C::fused, true,
             "compute the loss and its gradient over the non-zeros: tt's kernels on the CPU, LibTorch's operations "
             "through autograd on a GPU (false: tinytopics' dense autograd, a batch x terms reconstruction)")
      .field("fused_step", &C::fused_step, true,
             "with fused and adamw: the loss, the gradients and AdamW's update in one step of the model's own, "
             "without autograd or gradient tensors (the same arithmetic; false: the fused loss through autograd, "
             "then the optimizer); the trainer takes it when no plugin, gradient clipping, micro-batching or data "
             "parallelism needs the step's parts")
      .field("corpus_loss", &C::corpus_loss, true, "compute the whole-corpus loss at the end (one pass over the data)")
      .field("defer_updates", &C::defer, true,
             "AdamW's zero-gradient updates of the rows of L outside the batch are applied in closed form when "
             "a row is next used (same result to float rounding, O(batch) instead of O(n) per step); false: "
             "every row every step, bitwise as a dense gradient")
      .field("lazy", &C::lazy, false,
             "update only the batch's rows of L (sparse gradient, as sparse Adam); not tinytopics' semantics")
      .validate([](const Options& o) { o.check(!o.get_bool("lazy") || o.get_bool("fused"), "lazy", "needs fused: true"); });
}

std::shared_ptr<Model> make_model(const Options& o, const Datasets& data) {
  auto source = std::dynamic_pointer_cast<TopicSource>(data.train);
  TT_CHECK_AS(ConfigError, source,
              "model (topic) needs a document-term dataset (topic-synthetic, topic-npy, topic-pt, topic-mtx, "
              "topic-text); this dataset is not one");
  const auto c = o.to<TopicModel::Config>();
  o.check(c.k <= source->n_terms(), "k",
          "(" + std::to_string(c.k) + ") must not exceed the number of terms (" + std::to_string(source->n_terms()) + ")");
  return std::make_shared<TopicModel>(source->size(), source->n_terms(), c, source);
}

}  // namespace tt::topic
