#pragma once
// topic-npy: a documents x terms .npy matrix (tinytopics' NumpyDiskDataset), memory-mapped
// read-only. A batch copies just its rows into a float32 [B, m] tensor, checking each row
// as it is read; the file's pages stay page cache, never the process's own memory.
#include "topic_data.h"
#include "tt/npy.h"

namespace tt::topic {

class NpyDataset : public TopicSource {
 public:
  // ConfigError naming the file for anything but a 2-D, C-order float32/float64/int32/int64
  // array with at least one row and column.
  explicit NpyDataset(const std::string& path);
  int64_t size() const override { return n_; }
  Batch get(const at::Tensor& indices) override;
  int64_t n_terms() const override { return m_; }
  std::string describe() const override;
 private:
  std::string path_;
  NpyMap map_;
  int64_t n_ = 0, m_ = 0;
};

Schema npy_schema();
Datasets make_npy(const Options& o, uint64_t pipeline_seed);

}  // namespace tt::topic
