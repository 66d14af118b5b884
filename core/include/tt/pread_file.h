#pragma once
// A file read at offsets with pread(2): for readers that check a file's structure before
// trusting it (archive_check.cpp, safetensors.cpp), nothing is read that is not asked for; for
// readers that stream a file once (topic-npy read into memory), a reused buffer instead of
// mapped pages faulted in one at a time.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tt::detail {

class PreadFile {
 public:
  explicit PreadFile(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~PreadFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  PreadFile(const PreadFile&) = delete;
  PreadFile& operator=(const PreadFile&) = delete;
  bool ok() const { return fd_ >= 0; }
  int64_t size() const { return static_cast<int64_t>(::lseek(fd_, 0, SEEK_END)); }
  // All n bytes at `at`, or false (end of file or an error; errno says which error).
  bool read(int64_t at, void* out, size_t n) const {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r, at += r, n -= static_cast<size_t>(r);
    }
    return true;
  }

 private:
  int fd_;
};

}  // namespace tt::detail
