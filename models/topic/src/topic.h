#pragma once
// The tinytopics model: Poisson NMF fitted by gradient descent on softmax-parameterized
// document-topic weights L (n x k) and topic-term weights F (k x m).
#include <torch/torch.h>

#include "tt/dataset.h"
#include "tt/model.h"
#include "tt/options.h"

namespace tt::topic {

// Document-term counts held in memory: batches are {"index": doc ids, "x": count rows}.
class CountsDataset : public Dataset {
 public:
  explicit CountsDataset(torch::Tensor counts) : x_(std::move(counts)) {}
  int64_t size() const override { return x_.size(0); }
  Batch get(const at::Tensor& indices) override;
  std::map<std::string, int64_t> info() const override { return {{"n_docs", x_.size(0)}, {"n_terms", x_.size(1)}}; }
  std::string describe() const override;
  const torch::Tensor& counts() const { return x_; }

 protected:
  torch::Tensor x_;
};

// Synthetic corpus as tinytopics' generate_synthetic_data: true L and F kept for alignment.
class SyntheticDataset : public CountsDataset {
 public:
  SyntheticDataset(int64_t n, int64_t m, int64_t k, double avg_doc_length, uint64_t seed);
  std::string describe() const override;
  torch::Tensor true_L, true_F;
};

Schema synthetic_schema();
Datasets make_synthetic(const Options& o, uint64_t pipeline_seed);

class TopicModel : public Model {
 public:
  TopicModel(int64_t n_docs, int64_t n_terms, int64_t k, double init_scale);
  ModelOutput forward_loss(const Batch& batch) override;
  void write_outputs(const std::filesystem::path& run_dir, State& state) override;
  std::string describe() const override;
  torch::Tensor L() const;  // softmax(L_raw, 1): document-topic proportions
  torch::Tensor F() const;  // softmax(F_raw, 1): topic-term distributions

 private:
  int64_t n_, m_, k_;
  torch::Tensor L_raw_, F_raw_;
};

Schema model_schema();
std::shared_ptr<Model> make_model(const Options& o, const Datasets& data);

}  // namespace tt::topic
