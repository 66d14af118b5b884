// CSV parsing by hand: the files are plain (a header, comma-separated numbers, optional double
// quotes around a field); no Debian library is needed for that much.
#include "table.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "tt/error.h"

namespace tt::tab {
namespace {

std::vector<std::string> split_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  for (auto& f : out) {  // trim spaces
    const auto b = f.find_first_not_of(" \t");
    const auto e = f.find_last_not_of(" \t");
    f = b == std::string::npos ? std::string() : f.substr(b, e - b + 1);
  }
  return out;
}

bool is_missing(const std::string& f) {
  return f.empty() || f == "NA" || f == "na" || f == "NaN" || f == "nan" || f == "?" || f == "null";
}

bool parse_number(const std::string& f, double& v) {
  char* end = nullptr;
  v = std::strtod(f.c_str(), &end);
  return end && *end == '\0' && !f.empty() && std::isfinite(v);
}

struct Raw {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int64_t> line_of;  // file line of each row
};

Raw read_raw(const std::string& path) {
  std::ifstream in(path);
  TT_CHECK_AS(ConfigError, in.good(), "tabular: cannot open ", path, " (data.path): check the path");
  Raw r;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    if (r.header.empty()) {
      r.header = split_line(line);
      continue;
    }
    r.rows.push_back(split_line(line));
    r.line_of.push_back(n);
  }
  TT_CHECK_AS(ConfigError, !r.header.empty(), "tabular: ", path, " is empty: expected a header row of column names and data rows");
  TT_CHECK_AS(ConfigError, !r.rows.empty(), "tabular: ", path, " has a header but no data rows");
  for (size_t i = 0; i < r.rows.size(); ++i)
    TT_CHECK_AS(ConfigError, r.rows[i].size() == r.header.size(), "tabular: ", path, ":", r.line_of[i], " has ",
                r.rows[i].size(), " fields where the header has ", r.header.size());
  return r;
}

std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 40; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 40) s += ", ...";
  return s;
}

// Features of `raw` at columns `cols`, missing values imputed or refused.
void fill_features(const Raw& raw, const std::string& path, const std::vector<size_t>& cols, const CsvOptions& o,
                   Table& t) {
  const size_t F = cols.size();
  t.x.assign(raw.rows.size() * F, 0.f);
  std::vector<double> sum(F, 0);
  std::vector<int64_t> count(F, 0);
  std::vector<std::pair<size_t, size_t>> missing;
  for (size_t i = 0; i < raw.rows.size(); ++i)
    for (size_t j = 0; j < F; ++j) {
      const std::string& f = raw.rows[i][cols[j]];
      double v = 0;
      if (is_missing(f)) {
        TT_CHECK_AS(ConfigError, o.impute == "mean", "tabular: ", path, ":", raw.line_of[i], " column '",
                    raw.header[cols[j]], "' has a missing value ('", f,
                    "'): fill it in, or set data.impute: mean to replace missing values by the column's mean");
        missing.emplace_back(i, j);
        continue;
      }
      TT_CHECK_AS(ConfigError, parse_number(f, v), "tabular: ", path, ":", raw.line_of[i], " column '",
                  raw.header[cols[j]], "' is not numeric ('", f,
                  "'): features must be numbers (encode categories as numbers first, or drop the column)");
      t.x[i * F + j] = static_cast<float>(v);
      sum[j] += v;
      ++count[j];
    }
  for (auto [i, j] : missing) {
    TT_CHECK_AS(ConfigError, count[j] > 0, "tabular: ", path, " column '", raw.header[cols[j]],
                "' has no value at all to impute from: drop the column");
    t.x[i * F + j] = static_cast<float>(sum[j] / static_cast<double>(count[j]));
  }
}

}  // namespace

Table Table::subset(const std::vector<int64_t>& idx) const {
  Table t;
  t.source = source;
  t.feature_names = feature_names;
  t.class_names = class_names;
  t.label_name = label_name;
  const int64_t F = features();
  t.rows = static_cast<int64_t>(idx.size());
  t.x.resize(idx.size() * F);
  t.y.resize(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    std::copy_n(x.begin() + idx[i] * F, F, t.x.begin() + static_cast<int64_t>(i) * F);
    t.y[i] = y.empty() ? -1 : y[idx[i]];
  }
  return t;
}

Table read_csv(const std::string& path, const CsvOptions& o) {
  TT_CHECK_AS(ConfigError, o.impute == "none" || o.impute == "mean", "tabular: data.impute is '", o.impute,
              "': use none (missing values are an error) or mean");
  Raw raw = read_raw(path);
  size_t label_col = raw.header.size() - 1;
  if (!o.label.empty()) {
    auto it = std::find(raw.header.begin(), raw.header.end(), o.label);
    TT_CHECK_AS(ConfigError, it != raw.header.end(), "tabular: ", path, " has no column '", o.label,
                "' (data.label); its columns are: ", list(raw.header));
    label_col = static_cast<size_t>(it - raw.header.begin());
  }
  TT_CHECK_AS(ConfigError, raw.header.size() >= 2, "tabular: ", path,
              " has a single column: expected features and a label column");
  Table t;
  t.source = path;
  t.rows = static_cast<int64_t>(raw.rows.size());
  t.label_name = raw.header[label_col];
  std::vector<size_t> cols;
  for (size_t j = 0; j < raw.header.size(); ++j)
    if (j != label_col) {
      cols.push_back(j);
      t.feature_names.push_back(raw.header[j]);
    }
  fill_features(raw, path, cols, o, t);
  // Labels: sorted numerically when all are numbers, else as text.
  std::vector<std::string> labels;
  bool numeric = true;
  for (size_t i = 0; i < raw.rows.size(); ++i) {
    const std::string& f = raw.rows[i][label_col];
    TT_CHECK_AS(ConfigError, !is_missing(f), "tabular: ", path, ":", raw.line_of[i], " has no label in column '",
                raw.header[label_col], "': every training row needs one");
    double v;
    numeric = numeric && parse_number(f, v);
    labels.push_back(f);
  }
  const std::set<std::string> distinct(labels.begin(), labels.end());
  std::vector<std::string> classes(distinct.begin(), distinct.end());
  if (numeric)
    std::sort(classes.begin(), classes.end(),
              [](const std::string& a, const std::string& b) { return std::stod(a) < std::stod(b); });
  TT_CHECK_AS(ConfigError, static_cast<int64_t>(classes.size()) <= kMaxClasses, "tabular: ", path, " column '",
              raw.header[label_col], "' has ", classes.size(), " classes; the model predicts at most ", kMaxClasses,
              " (is data.label the class column? a regression target cannot be used)");
  TT_CHECK_AS(ConfigError, classes.size() >= 2, "tabular: ", path, " column '", raw.header[label_col],
              "' has a single class: nothing to learn");
  std::map<std::string, int64_t> id;
  for (size_t c = 0; c < classes.size(); ++c) id[classes[c]] = static_cast<int64_t>(c);
  t.class_names = classes;
  for (const auto& l : labels) t.y.push_back(id[l]);
  return t;
}

Table read_csv_like(const std::string& path, const Table& like, const CsvOptions& o) {
  Raw raw = read_raw(path);
  Table t;
  t.source = path;
  t.rows = static_cast<int64_t>(raw.rows.size());
  t.feature_names = like.feature_names;
  t.class_names = like.class_names;
  std::vector<size_t> cols;
  for (const auto& name : like.feature_names) {
    auto it = std::find(raw.header.begin(), raw.header.end(), name);
    TT_CHECK_AS(ConfigError, it != raw.header.end(), "tabular: ", path, " has no column '", name,
                "', a feature of the training table ", like.source, "; its columns are: ", list(raw.header));
    cols.push_back(static_cast<size_t>(it - raw.header.begin()));
  }
  fill_features(raw, path, cols, o, t);
  t.label_name = o.label.empty() ? like.label_name : o.label;
  auto lab = t.label_name.empty() ? raw.header.end() : std::find(raw.header.begin(), raw.header.end(), t.label_name);
  if (lab == raw.header.end() && t.label_name.empty() && raw.header.size() == cols.size() + 1) lab = raw.header.end() - 1;
  if (lab != raw.header.end()) {
    t.label_name = *lab;
    const size_t lc = static_cast<size_t>(lab - raw.header.begin());
    for (size_t i = 0; i < raw.rows.size(); ++i) {
      const std::string& f = raw.rows[i][lc];
      if (is_missing(f)) {
        t.y.push_back(-1);
        continue;
      }
      auto c = std::find(like.class_names.begin(), like.class_names.end(), f);
      TT_CHECK_AS(ConfigError, c != like.class_names.end(), "tabular: ", path, ":", raw.line_of[i], " label '", f,
                  "' is not a class of the training table (", list(like.class_names), ")");
      t.y.push_back(c - like.class_names.begin());
    }
  } else {
    TT_CHECK_AS(ConfigError, !o.require_label, "tabular: ", path, " has no label column");
    t.y.assign(raw.rows.size(), -1);
  }
  return t;
}

Split stratified_split(const Table& t, double test_fraction, uint64_t seed) {
  TT_CHECK_AS(ConfigError, test_fraction > 0 && test_fraction < 1, "tabular: data.test_fraction is ", test_fraction,
              ": it must be between 0 and 1");
  std::mt19937_64 rng(seed);
  Split s;
  for (int64_t c = 0; c < t.classes(); ++c) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < t.rows; ++i)
      if (t.y[i] == c) rows.push_back(i);
    std::shuffle(rows.begin(), rows.end(), rng);
    auto n_test = static_cast<int64_t>(std::llround(static_cast<double>(rows.size()) * test_fraction));
    if (rows.size() >= 2) n_test = std::clamp<int64_t>(n_test, 1, static_cast<int64_t>(rows.size()) - 1);
    for (size_t i = 0; i < rows.size(); ++i) (static_cast<int64_t>(i) < n_test ? s.test : s.train).push_back(rows[i]);
  }
  std::sort(s.train.begin(), s.train.end());
  std::sort(s.test.begin(), s.test.end());
  return s;
}

}  // namespace tt::tab
