#include "tt/error.h"

#include <filesystem>
#include <system_error>

namespace tt {

std::string describe_path(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute()) return "'" + path + "'";
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec);
  return "'" + path + "' (relative to the current directory " + (ec ? std::string("?") : cwd.string()) + ")";
}

}  // namespace tt
