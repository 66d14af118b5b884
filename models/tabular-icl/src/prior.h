#pragma once
// The synthetic prior the in-context learner is pretrained on: every example is a whole small
// classification table drawn from a random structural causal model (TabPFN's MLP prior):
//   a random MLP (1-4 layers, random widths, an activation per layer from identity, tanh, ReLU,
//   leaky ReLU, sine, |x|, sigmoid, square; sparse Gaussian weights; Gaussian noise added at every
//   layer, scale drawn per layer) run on Gaussian or uniform root causes; features and the target
//   are distinct nodes taken at random from the root causes and all layers (node_target_share of the
//   tables), else the target is a small random MLP of 1-max_informative of the features plus noise (the tables
//   where the features tell the class: one output cut into ordered bands, or for argmax_share of
//   them one output per class and the largest wins); a share of the tables are linear
//   (identity activations throughout). After the target is drawn, a warp_share of the features
//   are observed through a random monotone warp (exp skew, a power, or steps at quantiles), as
//   real columns are skewed or ordinal. For class_cause_share of the tables the class comes first
//   and causes the features instead: each class a mean in a space of a few latent factors, the
//   features noisy linear mixtures of the factors (others of nuisance factors only), so that
//   several correlated features carry the same evidence and the Bayes rule is the linear
//   discriminant's, which weighs them once, where a vote by distance counts each. The target is cut into 2..max_classes classes at random quantiles (every class
//   at least a few rows) and the class ids permuted. Feature count uniform in
//   [min_features, max_features]; the support share of the rows uniform in [support_min, support_max].
// Batch tensors (B tables): x [B, rows, max_features] float (columns past the table's count are 0),
// feature_mask [B, max_features] bool, y [B, rows] int64, support [B, rows] bool, n_classes [B] int64,
// id_seed [B] int64 (the seed of the table's random feature identities in training: a function of
// the table's seed, so that a table has the same ones on any rank and in any micro-batch).
#include <cstdint>
#include <memory>

#include "tt/dataset.h"
#include "tt/options.h"

namespace tt::tab {

// tabular-prior's options. Their defaults, ranges and docs are declared once, in prior_schema();
// code that draws tables without a pipeline starts from
// Options::defaults(prior_schema(), "data").to<PriorOptions>().
struct PriorOptions {
  int64_t tables, validation_tables;  // make_prior: tables per epoch, and of the validation set
  int64_t rows;
  int64_t min_features, max_features;
  int64_t min_classes, max_classes;
  double support_min, support_max;
  double linear_share;       // tables whose SCM is linear
  double node_target_share;  // tables whose target is a graph node (else a function of features)
  double argmax_share;       // feature-function tables with 3+ classes: class = argmax of C functions
  double warp_share;         // features observed through a random monotone warp
  double class_cause_share;  // tables whose class causes the features (a latent-factor mixture)
  int64_t max_informative;   // most features a feature-function target depends on
  int64_t max_layers, max_width;
};

// One table from the prior, drawn with `seed` (the same seed, the same table).
Batch sample_prior_table(const PriorOptions& o, uint64_t seed);
// Tables seed_base+0 .. seed_base+count-1 stacked into one batch.
Batch sample_prior(const PriorOptions& o, uint64_t seed_base, int64_t count);

class PriorDataset : public Dataset {
 public:
  PriorDataset(PriorOptions o, int64_t tables, uint64_t seed) : o_(o), tables_(tables), seed_(seed) {}
  int64_t size() const override { return tables_; }
  Batch get(const at::Tensor& indices) override;  // table i is drawn with seed (seed, i)
  std::map<std::string, int64_t> info() const override { return {{"max_features", o_.max_features}}; }
  std::string describe() const override;
  const PriorOptions& options() const { return o_; }

 private:
  PriorOptions o_;
  int64_t tables_;
  uint64_t seed_;
};

// splitmix64 of a combination of two numbers: independent streams per table.
uint64_t mix(uint64_t a, uint64_t b);
// A table's feature-identity seed (id_seed) from the seed its rows were drawn from: in [0, 2^62).
inline int64_t id_seed_of(uint64_t table_seed) { return static_cast<int64_t>(mix(table_seed, 0x1D5EED) >> 2); }

Schema prior_schema();
Datasets make_prior(const Options& o, uint64_t seed);

}  // namespace tt::tab
