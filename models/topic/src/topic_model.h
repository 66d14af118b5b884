#pragma once
// The tinytopics model: Poisson NMF fitted by gradient descent on softmax-parameterized
// document-topic weights L (n x k) and topic-term weights F (k x m).
#include <torch/torch.h>

#include "topic_data.h"
#include "tt/dataset.h"
#include "tt/fused_adamw.h"
#include "tt/model.h"
#include "tt/options.h"

namespace tt::topic {

class TopicModel : public Model {
 public:
  // The model's options, bound by model_schema() (defaults, ranges and docs are there).
  struct Config {
    int64_t k;
    double init_scale;
    bool fused;        // direct loss/gradient over the non-zeros (poisson_loss.h), CPU parameters only
    bool fused_step;   // with fused: the loss, gradients and AdamW in one step of the model's own
    bool lazy;         // sparse gradient for L: only the batch's rows are updated
    bool defer;        // dense semantics with the absent rows' updates deferred (FusedAdamW::defer_rows)
    bool corpus_loss;  // whole-corpus loss at the end
  };
  TopicModel(int64_t n_docs, int64_t n_terms, Config config, std::shared_ptr<TopicSource> data);
  ModelOutput forward_loss(const Batch& batch) override;
  void write_outputs(const std::filesystem::path& run_dir, State& state) override;
  std::string describe() const override;
  // A step is a few hundred microseconds (k x m softmax, B documents' non-zeros): the
  // prefetch thread is the second thread (tt/helper.h), not an OpenMP team.
  bool small_steps() const override { return true; }
  // AdamW (fused) takes L's gradient as the batch's rows and still updates every row
  // (FusedAdamW::dense_rows): no n x k gradient tensor is built each step — unless plugins
  // or gradient clipping read the gradients, which then stay dense.
  void on_optimizer(torch::optim::Optimizer& optimizer, bool gradients_read) override;
  // With fused_step (the default): the loss over the non-zeros, the gradients of F and of the
  // batch's rows of L, and FusedAdamW's update of both in one pass of plain loops over reused
  // buffers: no autograd graph, no gradient tensors, no sparse tensor for L's rows. The same
  // arithmetic in the same order as the autograd path (loss_forward, the topic-wise backward,
  // FusedAdamW's element update), so the two give the same parameters. Taken when the
  // optimizer is adamw with L's rows deferred or dense (on_optimizer) and the trainer offers it.
  FusedStep fused_step(const Batch& batch, torch::optim::Optimizer& optimizer) override;
  torch::Tensor L() const;  // softmax(L_raw, 1): document-topic proportions
  torch::Tensor F() const;  // softmax(F_raw, 1): topic-term distributions

 private:
  // The fused kernels are CPU code: on a GPU the model takes tinytopics' dense autograd loss.
  bool fused() const { return config_.fused && L_raw_.is_cpu(); }
  int64_t n_, m_, k_;
  Config config_;
  std::shared_ptr<TopicSource> data_;  // for ground truth, vocabulary and whole-corpus figures
  torch::Tensor L_raw_, F_raw_;
  bool rows_gradient_ = false;  // L's gradient as rows: lazy, or dense semantics in the optimizer
  FusedAdamW* deferring_ = nullptr;  // the optimizer deferring L's absent rows, set by on_optimizer
  FusedAdamW* rows_adamw_ = nullptr;  // the optimizer taking L's gradient as rows (deferred or dense)
  // The fused step's buffers, kept between steps (tensors, so the meter counts them): Q = softmax(F_raw)
  // and F's gradient (k x m, zero between steps), P (B x k), xhat and w (non-zeros, grown as needed).
  torch::Tensor Q_, gF_, P_, xhat_, w_;
};

Schema model_schema();
std::shared_ptr<Model> make_model(const Options& o, const Datasets& data);

}  // namespace tt::topic
