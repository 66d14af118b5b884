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

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace tt
