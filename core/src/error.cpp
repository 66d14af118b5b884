#include "tt/error.h"
#include "tt/fetch_hint.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

namespace tt {

std::string first_line(const std::string& message, size_t max) {
  std::string line = message.substr(0, message.find('\n'));
  if (line.size() <= max) return line;
  // cut at a space, marked: a cut mid-word read as the message's own text (a stray "(")
  const size_t room = max > 8 ? max - 4 : max;
  size_t cut = line.rfind(' ', room);
  if (cut == std::string::npos || cut < room / 2) cut = room;
  return line.substr(0, cut) + (max > 8 ? " ..." : "");
}

std::string describe_path(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute()) return "'" + path + "'";
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec);
  return "'" + path + "' (relative to the current directory " + (ec ? std::string("?") : cwd.string()) + ")";
}

std::string fetch_hint(const std::string& path) {
  static const std::pair<const char*, const char*> kMade[] = {
      {"brown_train.txt", "brown"}, {"brown_val.txt", "brown"}, {"brown_docs.tsv", "brown"},
      {"iris.csv", "tabular"},      {"wine.csv", "tabular"},    {"breast_cancer.csv", "tabular"}};
  const std::string name = std::filesystem::path(path).filename().string();
  for (const auto& [file, set] : kMade)
    if (name == file) return std::string("; `tt-data fetch ") + set + "` makes it";
  return "";
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    const bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  const fs::path x = fs::weakly_canonical(fs::absolute(a, ec), ec), y = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return x == y;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace tt
