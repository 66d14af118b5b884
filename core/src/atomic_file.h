#pragma once
// A file written whole or not at all: bytes go to a temp file beside the target, which replaces
// the target (rename, then an fsync of the folder) only when every write and the fsync worked.
// A failed write is remembered, not thrown (LibTorch's archive writer calls back from its
// destructor), and reported by commit() as a WriteError naming the target; the temp file is
// removed and what was at the target stays. A target that is a device or a pipe (/dev/stdout) is
// written in place, every write and the close checked. Core-internal: checkpoints and run
// outputs use it.
#include <cstddef>
#include <filesystem>
#include <string>

namespace tt {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);  // WriteError when the temp file cannot be made
  ~AtomicFile();                                        // an uncommitted temp file is removed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  // after a failure, the rest is dropped
  void fail(std::string why);              // records a failure seen by the caller
  int64_t written() const { return written_; }
  // `what` begins the message ("cannot write checkpoint"); `hint` ends it.
  void commit(const std::string& what, const std::string& hint);

 private:
  std::filesystem::path target_, tmp_;
  int fd_ = -1;
  int64_t written_ = 0;
  std::string error_;
  bool done_ = false;
};

}  // namespace tt
