#pragma once
// A TabPFN/TabICL-style in-context learner built from core's hookable blocks (tt/nn.h), so the
// technique plugins act on it by name: "cell" (per-feature embedding), "row" (row
// representation), "label", "blocks.<i>.{ln1,attn.{qkv,proj},ln2,mlp.{fc1,fc2}}" (a
// tt::nn::BlockStack), "ln_f", "readout_q", "readout_k".
//
// A table's rows go in together: support rows (labels known) and query rows.
//   1. features are standardized per table with the support rows' mean and deviation (clipped
//      to +-8), padded with zeros up to max_features and masked;
//   2. per-feature embedding: each cell's (value, present) -> cell (Linear 2 -> d_cell) -> GELU;
//      row representation: the row's cells concatenated -> row (Linear max_features*d_cell -> d_model);
//   3. label embedding, equivariant by construction: a support row gets label(mean of its class's
//      support-row representations), a query row a learned query vector. The class's identity
//      never enters, only which support rows share it, so relabelling the classes permutes the
//      output probabilities exactly;
//   4. the in-context transformer: pre-norm blocks whose attention masks keys to support rows
//      (key_padding = support): support rows attend to support rows, query rows attend to support
//      rows only, never to each other (a query's prediction is independent of the other queries,
//      and memory is linear in the query count with the chunked kernel);
//   5. readout, an attention over the support rows with the labels as values:
//      p(class c | query) = sum over support rows s of class c of softmax_s(q . k_s / sqrt(d)),
//      computed by the blocks' attention kernel (so chunked attention covers it too).
// Up to 10 classes; the loss is the mean negative log-likelihood over query rows whose class
// occurs in the support set.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "table.h"
#include "tt/dataset.h"
#include "tt/model.h"
#include "tt/nn.h"
#include "tt/options.h"

namespace tt::tab {

struct Shape {
  int64_t max_features = 32, d_cell = 16, d_model = 96, n_layers = 4, n_heads = 4, d_ff = 192;
  std::string to_string() const;
};
Shape preset(const std::string& size);  // "small" (~0.3M parameters) or "large" (TabICL-like widths)

// tabular-icl's options. Their defaults, ranges and docs are declared once, in model_schema(); the
// shape's fields are unset unless the pipeline overrides the preset's value.
struct ModelOptions {
  std::string size;  // the preset
  std::optional<int64_t> max_features, d_cell, d_model, n_layers, n_heads, d_ff;
  int64_t eval_chunk, ensemble;
  std::string preprocess;
};

// What every block's attention masks with: true for the support rows of the current forward.
struct SupportMask {
  at::Tensor support;  // bool [B, N]
};

class IclBlock : public tt::nn::Block {
 public:
  IclBlock(const Shape& s, std::shared_ptr<SupportMask> mask);
  at::Tensor forward(const at::Tensor& x) override;
  tt::nn::MLPImpl* residual_mlp() override { return mlp.get(); }  // forward ends with h + mlp(ln2(h))
  tt::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  tt::nn::Attention attn{nullptr};
  tt::nn::MLP mlp{nullptr};

 private:
  std::shared_ptr<SupportMask> mask_;
};

class TabularIcl : public Model {
 public:
  TabularIcl(const Shape& s, std::shared_ptr<const Table> context, int64_t eval_chunk);
  // x [B, N, F<=max_features], feature_mask [B, F] bool, y [B, N] (query rows ignored),
  // support [B, N] bool -> class probabilities [B, N, 10] (rows sum to 1 over the support's classes).
  at::Tensor probabilities(const at::Tensor& x, const at::Tensor& feature_mask, const at::Tensor& y,
                           const at::Tensor& support);
  ModelOutput forward_loss(const Batch& batch) override;
  // With a tabular evaluation set (tabular-csv's test split): the training split as context, the
  // test rows as queries (val_accuracy, val_roc_auc, val_log_loss, val_brier, val_ece, val_examples);
  // otherwise (the prior) the mean query loss.
  std::map<std::string, double> evaluate(Dataset& data, int64_t batch_size) override;
  void predict(const std::filesystem::path& input, const std::filesystem::path& output) override;
  std::string describe() const override;

  // Probabilities [Q, classes] of `queries` given the whole `context` table, queries in chunks.
  at::Tensor predict_table(const Table& context, const Table& queries);

  const Shape& shape() const { return s_; }
  // Members of the feature-order ensemble at evaluation and prediction (model.ensemble).
  enum class Preprocess { Standard, Quantile, Mixed };
  void set_ensemble(int64_t n, Preprocess p = Preprocess::Standard) {
    ensemble_ = n;
    preprocess_ = p;
  }
  tt::nn::Linear cell{nullptr}, row{nullptr}, label{nullptr}, readout_q{nullptr}, readout_k{nullptr};
  tt::nn::BlockStack blocks{nullptr};
  tt::nn::LayerNorm ln_f{nullptr};
  at::Tensor query_token;

 private:
  Shape s_;
  std::shared_ptr<SupportMask> mask_;
  std::shared_ptr<const Table> context_;
  int64_t eval_chunk_;
  int64_t ensemble_ = 1;
  Preprocess preprocess_ = Preprocess::Standard;
};

Schema model_schema();
std::shared_ptr<Model> make_model(const Options& o, const Datasets& data);

}  // namespace tt::tab
