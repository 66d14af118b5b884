#include "atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tt/error.h"

namespace fs = std::filesystem;

namespace tt {

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  // A device or a pipe (/dev/stdout, a FIFO) is written in place: a rename over it would replace
  // it with a plain file (as root, /dev/full itself).
  std::error_code ec;
  const fs::file_status st = fs::status(target_, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st)) {
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) TT_FAIL_AS(WriteError, "cannot write ", target_.string(), ": ", std::strerror(errno));
    return;  // tmp_ stays empty: no rename
  }
  const fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
  tmp_ = dir / ("." + target_.filename().string() + ".tmp");
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) TT_FAIL_AS(WriteError, "cannot write ", target_.string(), ": ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (done_) return;
  if (fd_ >= 0) ::close(fd_);
  std::error_code ec;
  if (!tmp_.empty()) fs::remove(tmp_, ec);
}

void AtomicFile::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0 && error_.empty()) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      fail(std::string("write failed: ") + (w < 0 ? std::strerror(errno) : "nothing written"));
      break;
    }
    written_ += w, p += w, n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit(const std::string& what, const std::string& hint) {
  const bool in_place = tmp_.empty();
  // fsync of a device or pipe fails with EINVAL: it has nothing to make durable
  if (error_.empty() && !in_place && ::fsync(fd_) != 0) fail(std::string("fsync failed: ") + std::strerror(errno));
  if (::close(fd_) != 0) fail(std::string("close failed: ") + std::strerror(errno));
  fd_ = -1;
  std::error_code ec;
  if (error_.empty() && !in_place) {
    fs::rename(tmp_, target_, ec);
    if (ec) fail(ec.message());
  }
  if (!error_.empty()) {
    if (!in_place) fs::remove(tmp_, ec);
    done_ = true;
    TT_FAIL_AS(WriteError, what, " ", target_.string(), ": ", error_, " ", hint);
  }
  done_ = true;
  if (in_place) return;
  const fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace tt
