#pragma once
// Optimizer state in a memory-mapped file, paged in one parameter at a time: the CPU-only
// counterpart of ZeRO-Infinity's NVMe offload.
//
// DiskOffload wraps the pipeline's optimizer (torch's Adam/AdamW, tt's FusedAdamW, or any
// optimizer implementing tt::StateTensors, such as adam8bit). Its step runs the wrapped
// optimizer on one parameter at a time; after a parameter's first step its state tensors are
// copied into the file and replaced by views of the mapping, and after every step of that
// parameter its pages are dropped from the process (madvise MADV_DONTNEED on the shared
// mapping: the kernel keeps them in the file). So neither the meter's tensor bytes nor the
// process's RSS hold the state, except one parameter's while it is stepped. The arithmetic is
// the wrapped optimizer's own: parameters equal those of a run without offload.
#include <torch/optim/optimizer.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

namespace tt::offload {

// A file mapped shared and read-write, of a fixed capacity (sparse: unused space takes no disk).
class MappedFile {
 public:
  MappedFile(std::filesystem::path path, int64_t capacity, bool keep);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  // `bytes` of fresh space, page-aligned; throws when the capacity is exhausted.
  char* allocate(int64_t bytes);
  void reset() { used_ = 0; }  // everything allocated so far may be reused
  // Drop [p, p + bytes) from the process's resident pages (the data stays in the file).
  void release(const char* p, int64_t bytes) const;
  // Map [p, p + bytes) writable in one call before it is used (MADV_POPULATE_WRITE, Linux
  // 5.14+), instead of one page fault per page; a no-op where the kernel refuses it.
  void prefault(char* p, int64_t bytes) const;
  int64_t used() const { return used_; }
  int64_t capacity() const { return capacity_; }
  const std::filesystem::path& path() const { return path_; }
  // A file not kept leaves the directory now (its mapping stays usable until destruction), so
  // that what a run lists as its outputs at its end holds only files that remain.
  void remove_name_unless_kept();

 private:
  std::filesystem::path path_;
  int64_t capacity_;
  bool keep_;
  int fd_ = -1;
  char* base_ = nullptr;
  int64_t used_ = 0;
};

class DiskOffload : public torch::optim::Optimizer {
 public:
  // Refuses (ConfigError) an optimizer whose state it cannot move.
  DiskOffload(std::shared_ptr<torch::optim::Optimizer> inner, const std::filesystem::path& file, bool keep_file);
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  torch::optim::Optimizer& inner() { return *inner_; }
  const MappedFile& file() const { return *file_; }
  MappedFile& file() { return *file_; }
  // Bytes of state now in the file.
  int64_t state_bytes() const { return file_->used(); }

 private:
  struct Region {
    char* begin = nullptr;
    int64_t bytes = 0;
  };
  // Before a parameter's first step, where the optimizer is torch's Adam or AdamW (tt's adamw
  // is one): its state made in the file, zeroed, as the optimizer would make it in memory.
  void create_in_file(const at::Tensor& p);
  void move_to_file(const at::Tensor& p);  // after the parameter's first step (other optimizers)
  void relocate_all();                     // after load
  std::shared_ptr<torch::optim::Optimizer> inner_;
  std::unique_ptr<MappedFile> file_;
  std::map<const void*, Region> regions_;  // TensorImpl of a parameter -> its state in the file
};

}  // namespace tt::offload
