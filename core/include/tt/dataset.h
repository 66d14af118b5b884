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

// A dataset read in order, as a stream (text corpora larger than memory). One epoch is one
// pass; next(n) returns up to n examples, and an empty batch (size 0) when the epoch is over.
// size() is the number of examples per epoch (a stream may count them in a first pass, in
// bounded memory) so that progress and schedules know the epoch's length.
// position()/restore() save and restore where the stream is (file, offset, shuffle buffer,
// random state): the trainer keeps it in checkpoints so a resumed run continues the stream
// exactly where it stopped. DataLoader drives it; get() is refused (streams are not indexable).
class TT_API StreamDataset : public Dataset {
 public:
  ~StreamDataset() override;
  Batch get(const at::Tensor& indices) override;  // throws: read a stream with next()
  virtual void start_epoch(int64_t epoch) = 0;     // rewind; shuffle from (seed, epoch)
  virtual Batch next(int64_t n) = 0;
  virtual std::string position() const = 0;        // opaque bytes
  virtual void restore(const std::string& position) = 0;  // bad bytes: tt::Error
};

struct Datasets {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> validation;  // may be null
};

}  // namespace tt
