#pragma once
// tabular-csv: a CSV table split into train and test (stratified, seeded).
//   train: episodes for fine-tuning (TabTune's episodic tuning): each example is one episode of
//     support_size + query_size rows drawn without replacement from the training split (when the
//     split is smaller, its rows are divided in the same proportion), the classes relabelled by a
//     random permutation per episode; `episodes` examples per epoch, episode i drawn from (seed, i)
//     (the same episodes every epoch, in the loader's new order; data-parallel ranks and resumed
//     runs see exactly the episodes a single run would, with the same feature identities: id_seed;
//     an epoch repeats its episodes exactly, identities too: raise episodes for more views).
//     Batch tensors as the prior's (x, feature_mask, y, support, n_classes, id_seed).
//   validation: the test split with the training split as its context (EvalSet), which the
//     model's evaluate() reads as a whole.
#include <memory>
#include <optional>
#include <string>

#include "table.h"
#include "tt/dataset.h"
#include "tt/options.h"

namespace tt::tab {

// Stacks a context table (support rows first) and query rows into one batch of one table.
Batch table_batch(const Table& context, const Table& queries);

class EpisodeDataset : public Dataset {
 public:
  EpisodeDataset(std::shared_ptr<const Table> train, int64_t support, int64_t query, int64_t episodes, uint64_t seed);
  int64_t size() const override { return episodes_; }
  Batch get(const at::Tensor& indices) override;
  std::map<std::string, int64_t> info() const override;
  std::string describe() const override;
  std::shared_ptr<const Table> table() const { return train_; }

 private:
  std::shared_ptr<const Table> train_;
  int64_t support_, query_, episodes_;
  uint64_t seed_;
};

class EvalSet : public Dataset {
 public:
  EvalSet(std::shared_ptr<const Table> context, std::shared_ptr<const Table> queries)
      : context_(std::move(context)), queries_(std::move(queries)) {}
  int64_t size() const override { return queries_->rows; }
  Batch get(const at::Tensor& indices) override;  // those query rows with the whole context
  std::map<std::string, int64_t> info() const override;
  std::string describe() const override;
  const Table& context() const { return *context_; }
  const Table& queries() const { return *queries_; }
  std::shared_ptr<const Table> shared_context() const { return context_; }

 private:
  std::shared_ptr<const Table> context_, queries_;
};

// tabular-csv's options: how the file is read (CsvOptions: label, impute), the split and the
// episodes. Their defaults, ranges and docs are declared once, in csv_schema().
struct CsvDataOptions : CsvOptions {
  std::optional<std::string> path;
  double test_fraction;
  int64_t split_seed;
  int64_t support_size, query_size, episodes;
};

Schema csv_schema();
Datasets make_csv(const Options& o, uint64_t seed);

}  // namespace tt::tab
