#pragma once
// A fresh folder of its own under the temporary directory ($TMPDIR, else /tmp), removed with
// everything in it when the TempDir goes.
#include <filesystem>
#include <string>

#include "tt/export.h"

namespace tt {

class TT_API TempDir {
 public:
  // `prefix` starts the folder's name (prefix-XXXXXX); `who` names the caller in the tt::Error
  // thrown when the folder cannot be made ("fetch: cannot create ...; set TMPDIR to ...").
  TempDir(const std::string& prefix, const std::string& who);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tt
