#pragma once
// Datasets that models train on. Map-style: size() examples, fetched by index; the core's
// DataLoader shuffles, batches and records the position for checkpoints.
#include <map>
#include <memory>
#include <string>

#include "tt/batch.h"
#include "tt/export.h"

namespace tt {

class TT_API Dataset {
 public:
  virtual ~Dataset();
  virtual int64_t size() const = 0;
  // Examples at `indices` (int64, 1-D) as one batch.
  virtual Batch get(const at::Tensor& indices) = 0;
  // Dimensions the model is built from (e.g. {"n_docs": 1000, "n_terms": 5000}).
  virtual std::map<std::string, int64_t> info() const { return {}; }
  virtual std::string describe() const { return std::to_string(size()) + " examples"; }
};

struct Datasets {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> validation;  // may be null
};

}  // namespace tt
