#include "tt/data_loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "tt/error.h"
#include "tt/log.h"
#include "tt/meter.h"

namespace tt {

DataLoader::DataLoader(std::shared_ptr<Dataset> data, int64_t batch_size, bool shuffle, uint64_t seed, bool prefetch)
    : data_(std::move(data)), batch_size_(batch_size), shuffle_(shuffle), seed_(seed), prefetch_(prefetch) {
  TT_CHECK(data_ && data_->size() > 0, "the training dataset is empty");
  TT_CHECK(batch_size_ > 0, "trainer.batch_size must be positive");
  stream_ = dynamic_cast<StreamDataset*>(data_.get());
  if (prefetch_) helper_ = std::make_unique<Helper>();
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::batches_per_epoch() const {
  if (owned_) return owned_batches_;
  const int64_t global = batch_size_ * world_;
  const int64_t full = data_->size() / global, rest = data_->size() % global;
  return full + (rest >= world_ ? 1 : 0);
}

void DataLoader::shard(int rank, int world_size, bool owned) {
  TT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "DataLoader::shard: rank ", rank, " of ", world_size);
  TT_CHECK(data_->size() >= world_size, "the training dataset has ", data_->size(), " examples, fewer than the ",
           world_size, " ranks: use fewer processes or more data");
  rank_ = rank;
  world_ = world_size;
  owned_ = owned && world_size > 1;
  if (owned_) {
    TT_CHECK(!stream_, "trainer.dist_rows: owned needs a map-style dataset (", data_->describe(), " is a stream)");
    const int64_t fewest = data_->size() / world_size;  // the last rank's share
    owned_batches_ = (fewest + batch_size_ - 1) / batch_size_;
  }
  // The epoch's last global batch, when it has fewer examples than ranks, is not trained (a rank
  // would get none); one process would train them.
  const int64_t rest = data_->size() % (batch_size_ * world_size);
  if (!owned_ && !stream_ && rank == 0 && rest > 0 && rest < world_size)
    log().warn("the epoch's last {} example(s) of {} are not trained: fewer than the {} ranks are left after {} "
               "global batches of {} (trainer.batch_size {} x {} ranks); one process would train them: a batch size "
               "that leaves none or at least {}, or another number of ranks, trains every example",
               rest, data_->size(), world_size, data_->size() / (batch_size_ * world_size), batch_size_ * world_size,
               batch_size_, world_size, world_size);
}

namespace {
// This rank's part [begin, end) of a global batch of n examples.
std::pair<int64_t, int64_t> part(int64_t n, int rank, int world) {
  return {n * rank / world, n * (rank + 1) / world};
}
}  // namespace

at::Tensor DataLoader::order(int64_t epoch) {
  std::lock_guard<std::mutex> lock(order_mu_);
  if (order_epoch_ != epoch) {
    if (shuffle_) {
      // Its own generator: the order depends only on (seed, epoch), not on how many random
      // numbers the model drew, so resuming mid-run reproduces it.
      auto gen = at::detail::createCPUGenerator(seed_ * 1000003ULL + static_cast<uint64_t>(epoch) + 1);
      order_ = at::randperm(data_->size(), gen, at::TensorOptions().dtype(at::kLong));
    } else {
      order_ = at::arange(data_->size(), at::TensorOptions().dtype(at::kLong));
    }
    order_epoch_ = epoch;
  }
  return order_;
}

DataLoader::Fetched DataLoader::fetch(int64_t epoch, int64_t index) {
  if (stream_) {
    if (epoch != stream_epoch_ || index != stream_next_) {
      TT_CHECK(index == 0, "the text stream is at batch ", stream_next_, " of epoch ", stream_epoch_,
               " and cannot jump to batch ", index, " of epoch ", epoch, " (streams are read in order)");
      stream_->start_epoch(epoch);
      stream_epoch_ = epoch;
    }
    Fetched f;
    f.batch = stream_->next(batch_size_ * world_);
    if (world_ > 1 && f.batch.size > 0) {  // rank-strided: every rank reads the slice, keeps its part
      auto [b, e] = part(f.batch.size, rank_, world_);
      TT_CHECK(b < e, "the stream ", data_->describe(), " gave ", f.batch.size, " examples at batch ", index,
               ", fewer than the ", world_, " ranks");
      f.batch = f.batch.slice(b, e);
    }
    TT_CHECK(f.batch.size > 0, "the stream ", data_->describe(), " ended at batch ", index, " of epoch ", epoch,
             " but was counted at ", batches_per_epoch(), " batches: did its files change during the run?");
    stream_next_ = index + 1;
    f.position = stream_->position();
    return f;
  }
  at::Tensor o = order(epoch);
  if (owned_) {  // this rank's examples in the shared order, cut in owned_batches_ parts
    at::Tensor mine = o.masked_select(o.remainder(world_) == rank_);
    const int64_t n = mine.numel(), b = index * n / owned_batches_, e = (index + 1) * n / owned_batches_;
    TT_CHECK(b < e, "batch ", index, " is past the end of the epoch");
    return {data_->get(mine.slice(0, b, e)), {}};
  }
  const int64_t global = batch_size_ * world_;
  int64_t begin = index * global, end = std::min(begin + global, data_->size());
  TT_CHECK(begin < end, "batch ", index, " is past the end of the epoch");
  if (world_ > 1) {
    auto [b, e] = part(end - begin, rank_, world_);
    TT_CHECK(b < e, "batch ", index, " has fewer examples than ranks");
    end = begin + e;
    begin += b;
  }
  return {data_->get(o.slice(0, begin, end)), {}};
}

void DataLoader::restore(int64_t epoch, int64_t index, const std::string& position) {
  TT_CHECK(stream_, "restore() applies to streams only");
  {
    std::lock_guard<std::mutex> lock(mu_);
    TT_CHECK(!requested_, "restore() must come before the first batch is read");
  }
  stream_->restore(position);
  stream_epoch_ = epoch;
  stream_next_ = index;
  position_ = position;
}

void DataLoader::request(int64_t epoch, int64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  req_epoch_ = epoch;
  req_index_ = index;
  requested_ = true;
  ready_ = false;
  helper_->post([this, epoch, index] {
    Meter::BackgroundScope background;  // not part of the step's activations or optimizer state
    Fetched b;
    std::exception_ptr err;
    try {
      b = fetch(epoch, index);
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(b);
    error_ = err;
    ready_ = true;
    cv_.notify_all();
  });
}

Batch DataLoader::get(int64_t epoch, int64_t index) {
  if (!prefetch_) {
    Fetched f = fetch(epoch, index);
    position_ = std::move(f.position);
    return std::move(f.batch);
  }
  Fetched b;
  bool have = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (requested_) {
      cv_.wait(lock, [this] { return ready_; });  // finish whatever is in flight
      requested_ = false;
      if (req_epoch_ == epoch && req_index_ == index) {
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
        b = std::move(result_);
        have = true;
      }
      result_ = Fetched();
      error_ = nullptr;
    }
  }
  if (have) {  // the step's from now on, with the epoch's order if the loader's thread made it
    for (const auto& [name, t] : b.batch.tensors) Meter::global().adopt(t);
    std::lock_guard<std::mutex> lock(order_mu_);
    if (order_.defined()) Meter::global().adopt(order_);
  } else {
    b = fetch(epoch, index);
  }
  const int64_t next = index + 1;
  if (next < batches_per_epoch()) request(epoch, next);
  else request(epoch + 1, 0);
  position_ = std::move(b.position);
  return std::move(b.batch);
}

}  // namespace tt
