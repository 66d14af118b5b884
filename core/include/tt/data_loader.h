#pragma once
// Batches over a map-style Dataset: shuffled per epoch from (seed, epoch), so a resumed
// run sees the same order from its (epoch, batch) position; the last partial batch kept.
// Over a StreamDataset: batches in order from next(); the stream's position after each
// batch handed out is kept (position()) for checkpoints, and restore() puts it back.
// With prefetch on, a background thread (a tt::Helper, which the trainer may also lend to
// the model's loops) fetches the next batch while the current one trains, so only the
// current and the next batch are resident.
#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "tt/dataset.h"
#include "tt/export.h"
#include "tt/helper.h"

namespace tt {

class TT_API DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> data, int64_t batch_size, bool shuffle, uint64_t seed, bool prefetch = false);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches_per_epoch() const;
  // Distributed sampling: batch i of an epoch is the i-th slice of world_size x batch_size
  // examples of the shared order (seed, epoch), split evenly across ranks; this loader hands
  // out rank's part only, so each rank reads only its shard (a map-style dataset fetches only
  // its indices; a stream reads the whole slice and keeps its part). A last global batch with
  // fewer examples than ranks is dropped so that every rank has work. Before any get().
  // owned: rank r keeps the examples i with i % world_size == r for the whole run (shuffled
  // among themselves per epoch), in the same number of batches on every rank.
  void shard(int rank, int world_size, bool owned = false);
  // Batch `index` of `epoch` (then starts fetching the one after it, when prefetching).
  Batch get(int64_t epoch, int64_t index);
  Dataset& dataset() { return *data_; }
  // The prefetch thread, or nullptr without prefetch.
  Helper* helper() { return helper_.get(); }

  bool streaming() const { return stream_ != nullptr; }
  // Streams: where the stream stands after the last batch get() returned ("" for map-style).
  const std::string& position() const { return position_; }
  // Streams: continue at batch `index` of `epoch` from a saved position (before any get()).
  void restore(int64_t epoch, int64_t index, const std::string& position);

 private:
  struct Fetched {
    Batch batch;
    std::string position;
  };
  Fetched fetch(int64_t epoch, int64_t index);
  at::Tensor order(int64_t epoch);
  void request(int64_t epoch, int64_t index);

  std::shared_ptr<Dataset> data_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  int rank_ = 0, world_ = 1;
  bool owned_ = false;
  int64_t owned_batches_ = 0;

  std::mutex order_mu_;
  int64_t order_epoch_ = -1;
  at::Tensor order_;

  // streams: read strictly in order
  StreamDataset* stream_ = nullptr;
  int64_t stream_epoch_ = -1, stream_next_ = 0;
  std::string position_;

  // prefetching: one slot, filled by a job on the helper thread
  bool prefetch_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false, ready_ = false;
  int64_t req_epoch_ = -1, req_index_ = -1;
  Fetched result_;
  std::exception_ptr error_;
  std::unique_ptr<Helper> helper_;  // last: destroyed first, finishing its job while the rest is alive
};

}  // namespace tt
