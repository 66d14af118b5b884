#pragma once
// topic-npy: a documents x terms .npy matrix (tinytopics' NumpyDiskDataset). Two ways to
// hold it (option load):
//   memory  the file is read once, front to back through a reused buffer, into compressed
//           sparse rows (the rows' non-zeros: a 20,000 x 5,000 corpus of 256-word documents is
//           400 MB as float32 and ~60 MB of non-zeros), each row checked as it is read; every
//           epoch then reads memory, not the file (SparseCountsDataset);
//   map     memory-mapped read-only: a batch copies just its rows into a float32 [B, m] tensor,
//           checking each row as it is read; the file's pages stay page cache, never the
//           process's own memory. For non-zeros that do not fit in memory;
//   auto    (default) memory while the non-zeros fit in half the memory available when the
//           read starts (Meter::available), else map (the read stops as soon as they outgrow it).
#include <optional>

#include "topic_data.h"
#include "tt/npy.h"

namespace tt::topic {

// ConfigError naming the file unless `h` is a 2-D, C-order matrix of a count dtype (float32,
// float64, float16, int64, int32, int16, int8, uint8, bool: every dtype tt's .npy reader knows)
// with at least one row and column.
void check_counts_header(const std::string& path, const NpyHeader& h);

// The whole .npy's rows as compressed sparse rows, each row checked (ConfigError naming the
// first bad document); nullopt once the non-zeros (12 bytes each) would outgrow `budget` bytes.
// Chunks of rows are read and scanned on ATen's threads, each thread holding at most
// `chunk_bytes` of the file and as much of non-zeros; Interrupted at a Ctrl-C.
std::optional<CsrCounts> read_npy_counts(const std::string& path, int64_t budget,
                                         int64_t chunk_bytes = int64_t{16} << 20);

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
