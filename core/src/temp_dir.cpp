#include "tt/temp_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tt/error.h"

namespace fs = std::filesystem;

namespace tt {

TempDir::TempDir(const std::string& prefix, const std::string& who) {
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  std::string pattern = ((ec ? fs::path("/tmp") : tmp) / (prefix + "-XXXXXX")).string();
  TT_CHECK(::mkdtemp(pattern.data()) != nullptr, who, ": cannot create a temporary directory ", pattern, ": ",
           std::strerror(errno), "; set TMPDIR to a writable directory");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace tt
