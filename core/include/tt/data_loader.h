#pragma once
// Batches over a map-style Dataset: shuffled per epoch from (seed, epoch), so a resumed
// run sees the same order from its (epoch, batch) position; the last partial batch kept.
#include <ATen/core/Tensor.h>

#include <memory>

#include "tt/dataset.h"
#include "tt/export.h"

namespace tt {

class TT_API DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> data, int64_t batch_size, bool shuffle, uint64_t seed);
  int64_t batches_per_epoch() const;
  // Batch `index` of `epoch`.
  Batch get(int64_t epoch, int64_t index);
  Dataset& dataset() { return *data_; }

 private:
  const at::Tensor& order(int64_t epoch);
  std::shared_ptr<Dataset> data_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t order_epoch_ = -1;
  at::Tensor order_;
};

}  // namespace tt
