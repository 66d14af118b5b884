#pragma once
// topic-pt: a documents x terms matrix in a .pt file, one tensor saved by Python's
// torch.save (tinytopics' TorchDiskDataset) or by torch::pickle_save, loaded into memory
// as float32 and checked row by row.
#include "topic_data.h"

namespace tt::topic {

// The checked float32 [n, m] counts of `path`; ConfigError naming the file for anything
// else (not a zip archive, not a tensor, not 2-D, not numeric, a bad row).
torch::Tensor read_pt_counts(const std::string& path);

class PtDataset : public CountsDataset {
 public:
  explicit PtDataset(const std::string& path) : CountsDataset(read_pt_counts(path)), path_(path) {}
  std::string describe() const override { return path_ + ": " + CountsDataset::describe(); }
 private:
  std::string path_;
};

Schema pt_schema();
Datasets make_pt(const Options& o, uint64_t pipeline_seed);

}  // namespace tt::topic
