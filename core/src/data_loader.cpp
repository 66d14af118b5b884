#include "tt/data_loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "tt/error.h"

namespace tt {

DataLoader::DataLoader(std::shared_ptr<Dataset> data, int64_t batch_size, bool shuffle, uint64_t seed, bool prefetch)
    : data_(std::move(data)), batch_size_(batch_size), shuffle_(shuffle), seed_(seed), prefetch_(prefetch) {
  TT_CHECK(data_ && data_->size() > 0, "the training dataset is empty");
  TT_CHECK(batch_size_ > 0, "trainer.batch_size must be positive");
  if (prefetch_) thread_ = std::thread([this] { worker(); });
}

DataLoader::~DataLoader() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t DataLoader::batches_per_epoch() const { return (data_->size() + batch_size_ - 1) / batch_size_; }

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

Batch DataLoader::fetch(int64_t epoch, int64_t index) {
  at::Tensor o = order(epoch);
  int64_t begin = index * batch_size_, end = std::min(begin + batch_size_, data_->size());
  TT_CHECK(begin < end, "batch ", index, " is past the end of the epoch");
  return data_->get(o.slice(0, begin, end));
}

void DataLoader::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || (requested_ && !ready_); });
    if (stop_) return;
    const int64_t e = req_epoch_, i = req_index_;
    lock.unlock();
    Batch b;
    std::exception_ptr err;
    try {
      b = fetch(e, i);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    result_ = std::move(b);
    error_ = err;
    ready_ = true;
    cv_.notify_all();
  }
}

void DataLoader::request(int64_t epoch, int64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  req_epoch_ = epoch;
  req_index_ = index;
  requested_ = true;
  ready_ = false;
  cv_.notify_all();
}

Batch DataLoader::get(int64_t epoch, int64_t index) {
  if (!prefetch_) return fetch(epoch, index);
  Batch b;
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
      result_ = Batch();
      error_ = nullptr;
    }
  }
  if (!have) b = fetch(epoch, index);
  const int64_t next = index + 1;
  if (next < batches_per_epoch()) request(epoch, next);
  else request(epoch + 1, 0);
  return b;
}

}  // namespace tt
