#pragma once
// A TabPFN/TabICL-style in-context learner built from core's hookable blocks (tt/nn.h), so the
// technique plugins act on it by name: "cell" (a cell's value embedding), "row" (the row
// representation), "label", "blocks.<i>.{ln1,attn.{qkv,proj},ln2,mlp.{fc1,fc2}}"
// (a tt::nn::BlockStack), "ln_f", "readout_q", "readout_k".
//
// A table's rows go in together: support rows (labels known) and query rows. No weight is tied to
// a feature's position or to the feature count:
//   1. features are standardized per table with the support rows' mean and deviation (clipped to
//      +-8); columns past a table's count (a batch of tables of different widths) are masked;
//   2. column-wise embedding: every cell's value -> cell (Linear 1 -> d_cell) -> GELU; every
//      feature gets an identity, a random unit d_id-vector drawn per table (fresh at every training
//      step, from the ensemble member's seed at inference: TabPFN v2's random feature embeddings),
//      orthogonal to the table's other features' where it has at most d_id of them; the row is the
//      sum over its features of identity (x) cell embedding (outer product, d_id x d_cell)
//      -> row (Linear d_id*d_cell -> d_model). With one-hot identities this is a
//      linear map of the concatenated cells (a position's own weights); random ones tie no weight
//      to a position or to the feature count. Permuting the features with their identities leaves
//      the row representation unchanged;
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
// Up to 10 classes in one forward pass; the loss is the mean negative log-likelihood over query
// rows whose class occurs in the support set.
//
// Inference on a whole table (predict_table) encodes the support rows once: each block's keys and
// values of the support rows are kept (a key/value cache) and every chunk of query rows attends to
// them, so the support's cost does not grow with the query count. An ensemble of members averages
// probabilities; each member draws its own feature identities, and
//   - a table wider than model.member_features gives each member a random subset of that many
//     features, the subsets covering every feature (TabPFN's feature subsampling);
//   - a table with more than 10 classes gives each member a random balanced grouping of the
//     classes into 10 (error-correcting output codes: every pair of classes is told apart by at
//     least two members); a class's probability is the normalized geometric mean over members of
//     its group's probability;
//   - the members take model.preprocess's views of the values in turn: by default the values
//     (standardized in step 1) and the principal components of their quantile transform (a
//     rotation that decorrelates the features, so a boundary along a mix of them lies along one
//     column), the components that hold model.pca_variance (0.99) of the variance; a pca member
//     sees the leading components, not a feature subset.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "table.h"
#include "tt/dataset.h"
#include "tt/model.h"
#include "tt/nn.h"
#include "tt/options.h"

namespace tt::tab {

struct Shape {
  int64_t d_cell = 16, d_id = 32, d_model = 96, n_layers = 4, n_heads = 4, d_ff = 192;
  std::string to_string() const;
};
Shape preset(const std::string& size);  // "small" (~0.4M parameters) or "large" (TabICL-like widths)

// tabular-icl's options. Their defaults, ranges and docs are declared once, in model_schema(); the
// shape's fields are unset unless the pipeline overrides the preset's value.
struct ModelOptions {
  std::string size;  // the preset
  std::optional<int64_t> d_cell, d_id, d_model, n_layers, n_heads, d_ff;
  int64_t eval_chunk, ensemble, member_features, max_members;
  std::string preprocess;
  double pca_variance, readout_temperature;
};

// What every block's attention masks with: true for the support rows of the current forward.
struct SupportMask {
  at::Tensor support;  // bool [B, N]
};

class IclBlock : public tt::nn::Block {
 public:
  IclBlock(const Shape& s, std::shared_ptr<SupportMask> mask);
  at::Tensor forward(const at::Tensor& x) override;
  // The key/value cache: keys and values [B, H, S, D] of the support rows x [B, S, d_model], and
  // the block's output for rows x that attend to them (no mask): forward's result for those rows.
  std::pair<at::Tensor, at::Tensor> keys_values(const at::Tensor& x);
  at::Tensor attend(const at::Tensor& x, const at::Tensor& k, const at::Tensor& v);
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
  // x [B, N, F], feature_mask [B, F] bool, y [B, N] (query rows ignored), support [B, N] bool,
  // ids [B, F, d_id] the features' identities (undefined: each table's drawn with a seed from
  // torch's generator, feature_ids for its unmasked features) ->
  // class probabilities [B, N, 10] (rows sum to 1 over the support's classes).
  at::Tensor probabilities(const at::Tensor& x, const at::Tensor& feature_mask, const at::Tensor& y,
                           const at::Tensor& support, at::Tensor ids = {});
  // One table, no gradient, the support encoded once (the key/value cache): context x [S, F] with
  // labels y [S] (< 10 classes), queries [Q, F], ids [F, d_id] -> probabilities [Q, 10], queries
  // and the support's own attention in chunks of eval_chunk rows. Equal to probabilities() on the
  // stacked table up to rounding at readout temperature 1 (set_readout_temperature).
  at::Tensor infer(const at::Tensor& context, const at::Tensor& y, const at::Tensor& queries, const at::Tensor& ids);
  // Identities [features, d_id] from `seed` (the same seed, the same identities): unit rows,
  // orthonormal when features <= d_id.
  at::Tensor feature_ids(int64_t features, uint64_t seed) const;
  // Each table's identities [B, F, d_id] (CPU): feature_ids(its unmasked features, seeds[b]) for
  // those features, zeros for the masked ones.
  at::Tensor table_ids(const at::Tensor& feature_mask, const at::Tensor& seeds) const;
  // Training: a batch's id_seed (the prior's and tabular-csv's episodes carry one) gives each table
  // its identities, so a table trains the same on any rank and in any micro-batch (a repeated
  // episode has the same ones: raise data.episodes for more views of the table).
  ModelOutput forward_loss(const Batch& batch) override;
  // With a tabular evaluation set (tabular-csv's test split): the training split as context, the
  // test rows as queries (val_accuracy, val_roc_auc, val_log_loss, val_brier, val_ece, val_examples);
  // otherwise (the prior) the mean query loss.
  std::map<std::string, double> evaluate(Dataset& data, int64_t batch_size) override;
  // --predict: a CSV of the training table's feature columns (by name; its label column optional):
  // class probabilities and the predicted class per row. Rows labelled with a class of the
  // training table are scored (logged); others are predicted all the same.
  void predict(const std::filesystem::path& input, const std::filesystem::path& output) override;
  // Reads the whole file as predict() will (its columns, values and labels) before training.
  void check_predict_input(const std::filesystem::path& input) const override;
  std::string describe() const override;

  // Probabilities [Q, classes] of `queries` given the whole `context` table: the ensemble's
  // members (see the top of this file), each through infer(). ConfigError naming the table when
  // it needs more than model.max_members members (too wide, or too many classes).
  at::Tensor predict_table(const Table& context, const Table& queries);

  const Shape& shape() const { return s_; }
  // The shape as built (the preset's where an option is unset): what checkpoints and exports record.
  std::map<std::string, std::string> derived_options() const override;
  // The ensemble at evaluation and prediction: model.ensemble members at least (more where the
  // table's width or classes need them, up to max_members), each seeing at most member_features
  // features.
  // A member's view of the table: the values (standardized inside the model), their quantile
  // transform, the principal components of the values or of their quantile transform (the
  // leading components that hold pca_variance of the variance, at most member_features).
  enum class View { Standard, Quantile, Pca, QuantilePca };
  // The views the members take in turn (model.preprocess: "standard", "mixed" = standard and
  // quantile, "pca+quantile-pca", ...).
  using Preprocess = std::vector<View>;
  void set_ensemble(int64_t n, Preprocess p = {View::Standard}, int64_t member_features = 100,
                    int64_t max_members = 64, double pca_variance = 0.99) {
    ensemble_ = n;
    preprocess_ = std::move(p);
    pca_variance_ = pca_variance;
    member_features_ = member_features;
    max_members_ = max_members;
  }
  // infer()'s readout logits are divided by t (1: as trained; model.readout_temperature).
  void set_readout_temperature(double t) { readout_temperature_ = t; }
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
  Preprocess preprocess_ = {View::Standard};
  double pca_variance_ = 0.99;
  double readout_temperature_ = 1.0;
  int64_t member_features_ = 100, max_members_ = 64;
  // The rows of a --predict file, read like the context (read_csv_like); ConfigError without a context.
  Table read_predict_rows(const std::filesystem::path& input) const;
  // Step 2: the row representations [B, N, d_model] of standardized values z [B, N, F], the
  // features' identities ids [B, F, d_id] and their mask fw [B, F] (1: a feature); the rows in
  // chunks of `chunk` where it is > 0 (inference).
  at::Tensor represent(const at::Tensor& z, const at::Tensor& ids, const at::Tensor& fw, int64_t chunk);
};

// One member of the inference ensemble.
struct Member {
  std::vector<int64_t> features;  // the columns it sees
  std::vector<int64_t> group;     // class -> the class it is told as (< kMaxClasses)
  TabularIcl::View view = TabularIcl::View::Standard;  // which view of the values it sees
};
// The members for table t (F features, C classes), from a fixed seed: at least `ensemble`; enough
// for the random feature subsets of `per_member` to cover every feature; with more than kMaxClasses
// classes, random balanced groupings until every pair of classes is told apart by two members.
// ConfigError naming the table when that takes more than max_members.
// The preprocessing views, each fitted on the context rows and applied to both tables:
// quantile_normal: each feature through the context's empirical CDF onto a standard normal (a
// quantile transform, TabPFN's "quantile" preprocessing): rank r of n -> Phi^-1((r + 0.5) / n),
// ties sharing their mean rank, query values interpolated between the context's.
std::pair<Table, Table> quantile_normal(const Table& ctx, const Table& qs);
// principal_components: the features standardized by the context (a constant one left at 0),
// projected on the leading right singular vectors of the context's standardized matrix (TabPFN v2
// adds such a global SVD view): as many as hold `variance` of its variance (at least one), at most
// `most`, largest first, each vector's sign set so that its largest loading is positive
// (scikit-learn's svd_flip), so the view does not depend on the LAPACK at hand. Columns pc1, pc2, ...
std::pair<Table, Table> principal_components(const Table& ctx, const Table& qs, double variance, int64_t most);
// Member e takes views[e % views.size()].
std::vector<Member> plan_members(const Table& t, int64_t ensemble, int64_t per_member,
                                 const TabularIcl::Preprocess& views, int64_t max_members);
// model.preprocess's value -> the views ("mixed" is "standard+quantile"); nullopt when it names
// anything else.
std::optional<TabularIcl::Preprocess> parse_preprocess(const std::string& value);

Schema model_schema();
std::shared_ptr<Model> make_model(const Options& o, const Datasets& data);

}  // namespace tt::tab
