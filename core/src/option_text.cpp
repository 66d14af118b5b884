// The option values written as text: sizes in bytes ("1.5GiB"), memory budgets, their display,
// and the nearest valid name for a misspelt one.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "tt/error.h"
#include "tt/options.h"

namespace tt {

static size_t levenshtein(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = levenshtein(word, c);
    // a candidate that contains the word (or vice versa) is a good guess too
    if (c.find(word) != std::string::npos || word.find(c) != std::string::npos) d = std::min(d, size_t{2});
    if (d < best_d) best_d = d, best = c;
  }
  size_t limit = std::max<size_t>(2, word.size() / 2);
  return best_d <= limit ? best : std::string();
}

int64_t parse_bytes(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' ||
                          s[i] == 'E' || s[i] == '+' || s[i] == '-'))
    ++i;
  // "1e9" vs the unit "EiB": units start with a letter other than e followed by a digit
  std::string num = s.substr(0, i), unit = s.substr(i);
  char* end = nullptr;
  const double v = num.empty() ? NAN : std::strtod(num.c_str(), &end);
  TT_CHECK_AS(ConfigError, !num.empty() && *end == '\0' && std::isfinite(v) && v >= 0, "'", text,
           "' is not a size: write e.g. 512MiB, 1.5GiB, 100MB or a number of bytes");
  std::string u = unit;
  std::transform(u.begin(), u.end(), u.begin(), ::tolower);
  double mult = 1;
  if (u.empty() || u == "b") mult = 1;
  else if (u == "k" || u == "kb") mult = 1e3;
  else if (u == "m" || u == "mb") mult = 1e6;
  else if (u == "g" || u == "gb") mult = 1e9;
  else if (u == "t" || u == "tb") mult = 1e12;
  else if (u == "kib") mult = 1024.0;
  else if (u == "mib") mult = 1024.0 * 1024;
  else if (u == "gib") mult = 1024.0 * 1024 * 1024;
  else if (u == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else TT_FAIL_AS(ConfigError, "'", text, "': unknown unit '", unit, "' (use B, KB, MB, GB, KiB, MiB, GiB)");
  // 2^63 bytes (8 EiB) would not fit the 64-bit count (llround's result is undefined there)
  TT_CHECK_AS(ConfigError, v * mult < 9.2e18, "'", text, "' is too large a size: at most 8 EiB (2^63 bytes) can be written");
  return static_cast<int64_t>(std::llround(v * mult));
}

int64_t parse_budget(const std::string& text) {
  size_t a = 0, b = text.size();
  while (a < b && std::isspace(static_cast<unsigned char>(text[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(text[b - 1]))) --b;
  const std::string s = text.substr(a, b - a);
  const auto hint = "write the number and its unit together, e.g. 1.5GiB (1.5 x 2^30 bytes, as tt's meter reports), "
                    "512MiB, 2GB (2 x 10^9 bytes) or a number of bytes";
  TT_CHECK_AS(ConfigError, !s.empty() && s.find_first_of(" \t") == std::string::npos, "'", text,
              "' is not a memory budget: ", hint);
  int64_t bytes = 0;
  try {
    bytes = parse_bytes(s);
  } catch (const ConfigError&) {
    TT_FAIL_AS(ConfigError, "'", text, "' is not a memory budget: ", hint);
  }
  TT_CHECK_AS(ConfigError, bytes > 0, "'", text, "' is not a memory budget: it must be more than 0 bytes");
  return bytes;
}

std::string format_bytes(int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) v /= 1024, ++u;
  std::ostringstream out;
  if (u == 0) out << bytes << " B";
  else out << std::fixed << std::setprecision(2) << v << ' ' << units[u];
  return out.str();
}

std::string format_mib(double bytes, int decimals) {
  char buf[48];
  const double mib = bytes / 1048576.0;
  // A figure the decimals would show as 0.0 (a model of a few KiB) keeps 3 significant digits:
  // 0.00763, not 0.0 beside a peak that is not 0.
  if (bytes != 0 && std::fabs(mib) < 0.5 * std::pow(10.0, -decimals))
    std::snprintf(buf, sizeof buf, "%.3g", mib);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, mib);
  return buf;
}

}  // namespace tt
