#pragma once
// Data sources of the topic model: document-term counts as batches
// {"index": int64 doc ids [B], "x": float32 counts [B, m]}.
#include <torch/torch.h>

#include "tt/dataset.h"
#include "tt/options.h"

namespace tt::topic {

// What every topic-model data source offers besides batches. A batch has "index" (int64 doc
// ids [B]) and either "x" (float32 counts [B, m], dense sources) or the batch's non-zeros in
// coordinate form (sparse sources): "rows" (int64 [nnz], row within the batch), "cols"
// (int64 [nnz], term id), "vals" (float32 [nnz], count).
class TopicSource : public Dataset {
 public:
  virtual int64_t n_terms() const = 0;
  virtual torch::Tensor true_F() const { return {}; }                  // k x m ground truth, when known
  virtual std::vector<std::string> vocabulary() const { return {}; }    // term names, when known
  virtual std::vector<std::string> doc_labels() const { return {}; }    // e.g. Brown categories
  std::map<std::string, int64_t> info() const override { return {{"n_docs", size()}, {"n_terms", n_terms()}}; }
};

// Document-term counts held in memory: batches are {"index": doc ids, "x": count rows}.
class CountsDataset : public TopicSource {
 public:
  explicit CountsDataset(torch::Tensor counts) : x_(std::move(counts)) {}
  int64_t size() const override { return x_.size(0); }
  Batch get(const at::Tensor& indices) override;
  int64_t n_terms() const override { return x_.size(1); }
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
  torch::Tensor true_F() const override { return true_F_; }
  torch::Tensor true_L_, true_F_;
};

Schema synthetic_schema();
Datasets make_synthetic(const Options& o, uint64_t pipeline_seed);

}  // namespace tt::topic
