#include "tt/data_loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "tt/error.h"

namespace tt {

DataLoader::DataLoader(std::shared_ptr<Dataset> data, int64_t batch_size, bool shuffle, uint64_t seed)
    : data_(std::move(data)), batch_size_(batch_size), shuffle_(shuffle), seed_(seed) {
  TT_CHECK(data_ && data_->size() > 0, "the training dataset is empty");
  TT_CHECK(batch_size_ > 0, "trainer.batch_size must be positive");
}

int64_t DataLoader::batches_per_epoch() const { return (data_->size() + batch_size_ - 1) / batch_size_; }

const at::Tensor& DataLoader::order(int64_t epoch) {
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

Batch DataLoader::get(int64_t epoch, int64_t index) {
  const at::Tensor& o = order(epoch);
  int64_t begin = index * batch_size_, end = std::min(begin + batch_size_, data_->size());
  TT_CHECK(begin < end, "batch ", index, " is past the end of the epoch");
  return data_->get(o.slice(0, begin, end));
}

}  // namespace tt
