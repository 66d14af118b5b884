// CSV parsing by hand: the files are plain (a header, comma-separated fields, optional double
// quotes around a field); no Debian library is needed for that much.
#include "table.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "tt/error.h"
#include "tt/fetch_hint.h"
#include "tt/log.h"

namespace tt::tab {
bool is_blank_line(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

namespace {

// A line's fields; `open_quote` is set where a quoted field runs past the line's end (a field
// spanning lines, which this reader does not join).
std::vector<std::string> split_line(const std::string& line, bool* open_quote = nullptr) {
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
    } else if (c == '"' && cur.find_first_not_of(" \t") == std::string::npos) {  // opens a field; elsewhere a character
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  if (open_quote) *open_quote = quoted;
  for (auto& f : out) {  // trim spaces
    const auto b = f.find_first_not_of(" \t");
    const auto e = f.find_last_not_of(" \t");
    f = b == std::string::npos ? std::string() : f.substr(b, e - b + 1);
  }
  return out;
}

// pandas' read_csv's default missing markers, and "na" and "?" (UCI's)
bool is_missing(const std::string& f) {
  static const std::set<std::string> markers = {"",      "#N/A", "#N/A N/A", "#NA",   "-1.#IND", "-1.#QNAN", "-NaN",
                                                "-nan",  "1.#IND", "1.#QNAN", "<NA>",  "N/A",     "NA",       "NULL",
                                                "NaN",   "None", "n/a",      "nan",   "null",    "na",       "?"};
  return markers.count(f) > 0;
}

// A decimal number (strtod's hexadecimal, inf and nan are not a table's numbers)
bool parse_number(const std::string& f, double& v) {
  if (f.empty() || f.find_first_of("xX") != std::string::npos) return false;
  char* end = nullptr;
  v = std::strtod(f.c_str(), &end);
  return end && *end == '\0' && std::isfinite(v);
}

// Why a file read as comma-separated has fewer fields than it should, where the line shows it
std::string separator_hint(const std::string& line) {
  if (line.find(';') != std::string::npos)
    return " (its lines have ';' and only ',' separates fields: save it with commas, e.g. pandas' "
           "to_csv(index=False), minding decimal commas)";
  if (line.find('\t') != std::string::npos) return " (its lines have tabs and only ',' separates fields: save it with commas)";
  return "";
}

struct Raw {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int64_t> line_of;  // file line of each row
};

// `option`: where the path comes from, for messages (data.path, --predict).
Raw read_raw(const std::string& path, const char* option) {
  std::error_code ec;
  TT_CHECK_AS(ConfigError, !std::filesystem::is_directory(path, ec), "tabular: ", describe_path(path), " (", option,
              ") is a directory: give the CSV file in it");
  std::ifstream in(path);
  TT_CHECK_AS(ConfigError, in.good(), "tabular: cannot open ", describe_path(path), " (", option, "): check the path",
              fetch_hint(path));
  Raw r;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8's byte-order mark
    const bool utf16 = n == 1 && (line.rfind("\xFF\xFE", 0) == 0 || line.rfind("\xFE\xFF", 0) == 0);
    TT_CHECK_AS(ConfigError, !utf16 && line.find('\0') == std::string::npos, "tabular: ", describe_path(path), " (",
                option, ") is not UTF-8 text (", utf16 ? std::string("UTF-16's byte-order mark") : "NUL bytes on line " +
                std::to_string(n), "): save it as UTF-8, e.g. iconv -f UTF-16 -t UTF-8 FILE > NEW.csv");
    if (is_blank_line(line)) continue;
    bool open_quote = false;
    std::vector<std::string> fields = split_line(line, &open_quote);
    TT_CHECK_AS(ConfigError, !open_quote, "tabular: ", path, ":", n, " has a quoted field that runs past the end of the "
                "line: a field spanning lines is not read; put the field on one line (or close its quote)");
    if (r.header.empty()) {
      r.header = std::move(fields);
      continue;
    }
    r.rows.push_back(std::move(fields));
    r.line_of.push_back(n);
  }
  TT_CHECK_AS(ConfigError, !r.header.empty(), "tabular: ", path, " is empty: expected a header row of column names and data rows");
  TT_CHECK_AS(ConfigError, !r.rows.empty(), "tabular: ", path, " has a header but no data rows");
  for (size_t j = 0; j < r.header.size(); ++j)
    for (size_t k = 0; k < j; ++k)
      TT_CHECK_AS(ConfigError, r.header[k] != r.header[j], "tabular: ", path, " (", option, ") has two columns named '",
                  r.header[j], "' (columns ", k + 1, " and ", j + 1,
                  "): columns are told apart by name, so give each its own name in the header");
  for (size_t i = 0; i < r.rows.size(); ++i)
    TT_CHECK_AS(ConfigError, r.rows[i].size() == r.header.size(), "tabular: ", path, ":", r.line_of[i], " has ",
                r.rows[i].size(), " fields where the header has ", r.header.size(),
                separator_hint(r.header.size() < r.rows[i].size() ? r.header.back() : r.rows[i].back()));
  // a file without a header: its first row would be taken for column names, and lost as data
  double v = 0;
  if (std::all_of(r.header.begin(), r.header.end(), [&](const std::string& h) { return parse_number(h, v); }))
    log().warn("tabular: {} ({}): every name in its header row is a number ({}, ...): is it a data row? The first "
               "row is read as the column names; add a header row", path, option, r.header.front());
  return r;
}

std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 40; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 40) s += ", ...";
  return s;
}

// data.impute: mean fitted on `rows`: each feature's mean over the values they have, a categorical
// column's most frequent category (the smallest code of those as frequent), becomes t.impute and
// every missing cell's value. `no_value`: the refusal of a column without values there.
void fit_impute(Table& t, const std::vector<int64_t>& rows, const char* no_value) {
  const int64_t F = t.features();
  t.categories.resize(static_cast<size_t>(F));
  std::vector<char> is_missing_cell(t.x.size(), 0);
  for (auto [i, j] : t.missing) is_missing_cell[static_cast<size_t>(i * F + j)] = 1;
  std::vector<double> sum(static_cast<size_t>(F), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(F), 0);
  std::vector<std::map<float, int64_t>> seen(static_cast<size_t>(F));  // categorical columns' codes
  for (int64_t i : rows)
    for (int64_t j = 0; j < F; ++j) {
      const auto k = static_cast<size_t>(j);
      if (is_missing_cell[static_cast<size_t>(i * F + j)]) continue;
      const float v = t.x[static_cast<size_t>(i * F + j)];
      sum[k] += v;
      ++count[k];
      if (!t.categories[k].empty()) ++seen[k][v];
    }
  for (int64_t j = 0; j < F; ++j) {
    const auto k = static_cast<size_t>(j);
    TT_CHECK_AS(ConfigError, count[k] > 0, "tabular: ", t.source, " column '", t.feature_names[k], "' ", no_value);
    t.impute[k] = static_cast<float>(sum[k] / static_cast<double>(count[k]));
    if (!t.categories[k].empty())
      t.impute[k] = std::max_element(seen[k].begin(), seen[k].end(), [](const auto& a, const auto& b) {
                      return a.second < b.second;
                    })->first;
  }
  for (auto [i, j] : t.missing) t.x[static_cast<size_t>(i * F + j)] = t.impute[static_cast<size_t>(j)];
}

// A categorical column's order: numbers by value, then text; each spelling is its own category.
struct CategoryOrder {
  bool operator()(const std::string& a, const std::string& b) const {
    double va = 0, vb = 0;
    const bool na = parse_number(a, va), nb = parse_number(b, vb);
    if (na != nb) return na;
    return na && va != vb ? va < vb : a < b;
  }
};
// A category's code: its index among `cats`; one they lack lies halfway between its neighbours
// in their order (as an unseen number lies between the values a column has).
float category_code(const std::vector<std::string>& cats, const std::string& v, bool& unseen) {
  const auto it = std::lower_bound(cats.begin(), cats.end(), v, CategoryOrder());
  const auto i = static_cast<float>(it - cats.begin());
  unseen = it == cats.end() || *it != v;
  return unseen ? i - 0.5f : i;
}

// data.categorical: auto: the columns of `cols` with a value that is not a number become
// categorical (t.categories), said in the log; a column of numbers with a little text is warned
// about, as a typo more likely than categories.
void find_categories(const Raw& raw, const std::string& path, const std::vector<size_t>& cols, Table& t) {
  for (size_t j = 0; j < cols.size(); ++j) {
    std::set<std::string, CategoryOrder> values;
    int64_t numbers = 0, present = 0, first_text = -1;
    for (size_t i = 0; i < raw.rows.size(); ++i) {
      const std::string& f = raw.rows[i][cols[j]];
      if (is_missing(f)) continue;
      double v = 0;
      ++present;
      if (parse_number(f, v)) ++numbers;
      else if (first_text < 0) first_text = static_cast<int64_t>(i);
      values.insert(f);
    }
    if (first_text < 0) continue;
    t.categories[j].assign(values.begin(), values.end());
    const std::string& name = raw.header[cols[j]];
    if (numbers * 10 >= present * 9)
      log().warn("tabular: {} column '{}' is numbers but for {} of {} values ({}:{} '{}'): read as {} categories; if "
                 "it holds numbers, correct those values or leave them empty (data.categorical: none refuses such a "
                 "column)", path, name, present - numbers, present, path, raw.line_of[first_text],
                 raw.rows[first_text][cols[j]], values.size());
    else
      log().info("tabular: {} column '{}' read as {} categories ({}{})", path, name, values.size(),
                 list(std::vector<std::string>(t.categories[j].begin(),
                                               t.categories[j].begin() + std::min<size_t>(5, values.size()))),
                 values.size() > 5 ? ", ..." : "");
  }
}

// Features of `raw` at columns `cols`. A categorical column's value (t.categories) becomes its
// code. A missing value takes `impute`'s value for its column where it is given (a training
// table's, for prediction); else, with impute_mean, its column's mean or most frequent category
// (those become t.impute); else it is refused, `refusal` saying why and how to fix it.
void fill_features(const Raw& raw, const std::string& path, const std::vector<size_t>& cols, bool impute_mean,
                   const std::vector<float>& impute, const std::string& refusal, const std::string& not_numeric,
                   Table& t) {
  const size_t F = cols.size();
  t.x.assign(raw.rows.size() * F, 0.f);
  t.categories.resize(F);  // a training table made without any: numbers
  std::vector<std::pair<size_t, size_t>> missing;
  std::vector<int64_t> unseen(F, 0);
  for (size_t i = 0; i < raw.rows.size(); ++i)
    for (size_t j = 0; j < F; ++j) {
      const std::string& f = raw.rows[i][cols[j]];
      double v = 0;
      if (is_missing(f)) {
        TT_CHECK_AS(ConfigError, impute_mean || !impute.empty(), "tabular: ", path, ":", raw.line_of[i], " column '",
                    raw.header[cols[j]], "' has a missing value ('", f, "'): ", refusal);
        missing.emplace_back(i, j);
        continue;
      }
      if (!t.categories[j].empty()) {
        bool new_category = false;
        t.x[i * F + j] = category_code(t.categories[j], f, new_category);
        unseen[j] += new_category ? 1 : 0;
        continue;
      }
      TT_CHECK_AS(ConfigError, parse_number(f, v), "tabular: ", path, ":", raw.line_of[i], " column '",
                  raw.header[cols[j]], "' is not numeric ('", f, "'): ", not_numeric);
      TT_CHECK_AS(ConfigError, std::fabs(v) <= std::numeric_limits<float>::max(), "tabular: ", path, ":",
                  raw.line_of[i], " column '", raw.header[cols[j]], "' has ", f,
                  ", beyond float32's range (features are float32): rescale the column");
      t.x[i * F + j] = static_cast<float>(v);
    }
  for (size_t j = 0; j < F; ++j)
    if (unseen[j] > 0)
      log().info("tabular: {} column '{}': {} {} the training table has not (placed between {} neighbours in the "
                 "categories' order)", path, raw.header[cols[j]], unseen[j],
                 unseen[j] == 1 ? "value is a category" : "values are categories", unseen[j] == 1 ? "its" : "their");
  if (!impute.empty()) {
    for (auto [i, j] : missing) t.x[i * F + j] = impute[j];
    return;
  }
  if (!impute_mean) return;
  t.impute.assign(F, 0.f);
  for (auto [i, j] : missing) t.missing.emplace_back(static_cast<int64_t>(i), static_cast<int64_t>(j));
  std::vector<int64_t> all(raw.rows.size());
  std::iota(all.begin(), all.end(), 0);
  fit_impute(t, all, "has no value at all to impute from: drop the column");
}

// The class id of a label among read_csv's class names: by spelling, or, where every class is a
// number, by value (1 is the class 1.0).
class ClassIndex {
 public:
  explicit ClassIndex(const std::vector<std::string>& classes) {
    bool numeric = true;
    for (size_t c = 0; c < classes.size(); ++c) {
      by_name_.emplace(classes[c], static_cast<int64_t>(c));
      double v = 0;
      numeric = numeric && parse_number(classes[c], v);
      by_value_.emplace(v, static_cast<int64_t>(c));
    }
    if (!numeric) by_value_.clear();
  }
  int64_t operator()(const std::string& label) const {  // -1: no class
    if (auto it = by_name_.find(label); it != by_name_.end()) return it->second;
    double v = 0;
    if (by_value_.empty() || !parse_number(label, v)) return -1;
    auto it = by_value_.find(v);
    return it == by_value_.end() ? -1 : it->second;
  }

 private:
  std::map<std::string, int64_t> by_name_;
  std::map<double, int64_t> by_value_;
};

// Labels that look like a regression target, as the reason a table cannot be split or has too many
// classes; "" where the evidence is not clear. Clear: every class a number, some not whole, and
// more than 10 of them averaging fewer than 4 rows each.
std::string continuous_labels(const std::string& path, const std::string& column,
                              const std::vector<std::string>& classes, int64_t rows) {
  bool fractional = false;
  for (const auto& c : classes) {
    double v = 0;
    if (!parse_number(c, v)) return "";
    fractional = fractional || v != std::floor(v);
  }
  const auto n = static_cast<int64_t>(classes.size());
  if (!fractional || n <= 10 || 4 * n <= rows) return "";
  return detail::cat("tabular: ", path, " column '", column, "' looks continuous (", n, " distinct numeric values in ",
                     rows, " rows): tabular-icl is a classifier, not a regressor; bin the column into classes, or ",
                     "name a class column with data.label");
}

}  // namespace

Table Table::subset(const std::vector<int64_t>& idx) const {
  Table t;
  t.source = source;
  t.feature_names = feature_names;
  t.class_names = class_names;
  t.label_name = label_name;
  t.impute = impute;
  t.categories = categories;
  const int64_t F = features();
  t.rows = static_cast<int64_t>(idx.size());
  t.x.resize(idx.size() * F);
  t.y.resize(idx.size());
  if (!line.empty()) t.line.resize(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    std::copy_n(x.begin() + idx[i] * F, F, t.x.begin() + static_cast<int64_t>(i) * F);
    t.y[i] = y.empty() ? -1 : y[idx[i]];
    if (!line.empty()) t.line[i] = line[idx[i]];
  }
  return t;
}

void impute_means_of(Table& t, const std::vector<int64_t>& rows) {
  if (t.impute.empty()) return;  // impute: none (a table without gaps still refits: a --predict file's take them)
  fit_impute(t, rows,
             "has no value in the training rows to impute from (data.impute: mean takes the training rows' values): "
             "drop the column, or choose another data.split_seed");
}

Table read_csv(const std::string& path, const CsvOptions& o) {
  Raw raw = read_raw(path, "data.path");
  size_t label_col = raw.header.size() - 1;
  const std::string label = o.label.value_or("");
  if (!label.empty()) {
    auto it = std::find(raw.header.begin(), raw.header.end(), label);
    TT_CHECK_AS(ConfigError, it != raw.header.end(), "tabular: ", path, " has no column '", label,
                "' (data.label); its columns are: ", list(raw.header));
    label_col = static_cast<size_t>(it - raw.header.begin());
  }
  TT_CHECK_AS(ConfigError, raw.header.size() >= 2, "tabular: ", path,
              " has a single column: expected features and a label column", separator_hint(raw.header.front()));
  Table t;
  t.source = path;
  t.rows = static_cast<int64_t>(raw.rows.size());
  t.line = raw.line_of;
  t.label_name = raw.header[label_col];
  std::vector<size_t> cols;
  for (size_t j = 0; j < raw.header.size(); ++j)
    if (j != label_col) {
      cols.push_back(j);
      t.feature_names.push_back(raw.header[j]);
    }
  t.categories.assign(cols.size(), {});
  if (o.categorical == "auto") find_categories(raw, path, cols, t);
  fill_features(raw, path, cols, o.impute == "mean", {},
                "fill it in, or set data.impute: mean to replace missing values by the column's mean", 
                "features are numbers where data.categorical is none (set it to auto to read a column of text as "
                "categories, or drop the column)", t);
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
  // Numbers: one class per value (1 and 1.0 alike), named by its first spelling in the file and
  // sorted by value as parse_number reads them (std::stod would throw out_of_range for a subnormal,
  // 1e-310). Text: one class per spelling, sorted.
  std::vector<std::string> classes;
  if (numeric) {
    std::map<double, std::string> by_value;
    for (const auto& l : labels) by_value.emplace(std::strtod(l.c_str(), nullptr), l);
    for (const auto& [v, name] : by_value) classes.push_back(name);
  } else {
    const std::set<std::string> distinct(labels.begin(), labels.end());
    classes.assign(distinct.begin(), distinct.end());
  }
  if (const auto why = continuous_labels(path, raw.header[label_col], classes, t.rows);
      !why.empty() && static_cast<int64_t>(classes.size()) > kMaxTableClasses)
    TT_FAIL_AS(ConfigError, why);
  TT_CHECK_AS(ConfigError, static_cast<int64_t>(classes.size()) <= kMaxTableClasses, "tabular: ", path, " column '",
              raw.header[label_col], "' has ", classes.size(), " classes; tabular-icl takes at most ", kMaxTableClasses,
              " (is data.label the class column? a regression target cannot be used)");
  TT_CHECK_AS(ConfigError, classes.size() >= 2, "tabular: ", path, " column '", raw.header[label_col],
              "' has a single class: nothing to learn",
              label.empty() ? " (it is the label as the last column, data.label not set: set data.label to the class "
                              "column)"
                            : " (data.label: give a table with rows of two classes or more)");
  t.class_names = classes;
  const ClassIndex class_of(t.class_names);
  for (const auto& l : labels) t.y.push_back(class_of(l));
  return t;
}

Table read_csv_like(const std::string& path, const Table& like, const CsvOptions& o) {
  Raw raw = read_raw(path, "--predict");
  Table t;
  t.source = path;
  t.rows = static_cast<int64_t>(raw.rows.size());
  t.line = raw.line_of;
  t.feature_names = like.feature_names;
  t.class_names = like.class_names;
  t.impute = like.impute;
  t.categories = like.categories;
  std::vector<size_t> cols;
  std::vector<std::string> lacks;
  for (const auto& name : like.feature_names) {
    auto it = std::find(raw.header.begin(), raw.header.end(), name);
    if (it == raw.header.end()) lacks.push_back(name);
    cols.push_back(static_cast<size_t>(it - raw.header.begin()));
  }
  if (!lacks.empty()) {
    std::vector<std::string> other;  // neither a feature nor the label column
    for (const auto& name : raw.header)
      if (name != like.label_name && std::find(like.feature_names.begin(), like.feature_names.end(), name) ==
                                         like.feature_names.end())
        other.push_back(name);
    TT_FAIL_AS(ConfigError, "tabular: ", path, " lacks the feature column", lacks.size() == 1 ? " " : "s ", list(lacks),
               " of the training table ", like.source,
               other.empty() ? std::string() : "; columns it has that the training table has not: " + list(other),
               ". Name the --predict file's columns as the training table's (", list(like.feature_names),
               "; in any order, the label column '", like.label_name, "' optional)");
  }
  fill_features(raw, path, cols, false, like.impute,
                detail::cat("fill it in: the training table ", like.source, " was read with data.impute: none (set "
                            "data.impute: mean to give missing values the training table's column means, a category its most "
                            "frequent)"),
                detail::cat("the column is numbers in the training table ", like.source, ": give a number"), t);
  t.label_name = o.label.value_or("").empty() ? like.label_name : *o.label;
  auto lab = t.label_name.empty() ? raw.header.end() : std::find(raw.header.begin(), raw.header.end(), t.label_name);
  if (lab == raw.header.end() && t.label_name.empty() && raw.header.size() == cols.size() + 1) lab = raw.header.end() - 1;
  if (lab != raw.header.end()) {
    t.label_name = *lab;
    const size_t lc = static_cast<size_t>(lab - raw.header.begin());
    const ClassIndex class_of(like.class_names);
    for (size_t i = 0; i < raw.rows.size(); ++i) {
      const std::string& f = raw.rows[i][lc];
      const int64_t c = is_missing(f) ? -1 : class_of(f);
      if (!is_missing(f) && c < 0) ++t.unknown_labels[f];
      t.y.push_back(c);
    }
  } else {
    TT_CHECK_AS(ConfigError, !o.require_label, "tabular: ", path, " has no label column");
    t.y.assign(raw.rows.size(), -1);
  }
  return t;
}

namespace {

// numpy's legacy np.random.RandomState(seed), the generator scikit-learn's random_state=int
// draws from: MT19937 seeded by init_genrand (std::mt19937 is the same generator and seeding),
// bounded integers by masked rejection (numpy's random_interval) and permutations by its
// Fisher-Yates from the last element down.
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}
  uint32_t interval(uint32_t max) {  // uniform in [0, max]
    if (max == 0) return 0;
    uint32_t mask = max;
    for (int shift : {1, 2, 4, 8, 16}) mask |= mask >> shift;
    uint32_t v;
    while ((v = static_cast<uint32_t>(mt_()) & mask) > max) {
    }
    return v;
  }
  std::vector<int64_t> permutation(int64_t n) {  // RandomState.permutation(n)
    std::vector<int64_t> a(static_cast<size_t>(n));
    std::iota(a.begin(), a.end(), 0);
    for (int64_t i = n - 1; i >= 1; --i) std::swap(a[static_cast<size_t>(i)], a[interval(static_cast<uint32_t>(i))]);
    return a;
  }

 private:
  std::mt19937 mt_;
};

// scikit-learn's _approximate_mode: class_counts / total * n_draws floored, the rows still
// needed handed out by largest remainder, ties broken by the generator (rng.choice without
// replacement, i.e. a permutation's head).
std::vector<int64_t> approximate_mode(const std::vector<int64_t>& counts, int64_t n_draws, NumpyRandomState& rng) {
  double total = 0;
  for (auto c : counts) total += static_cast<double>(c);
  std::vector<double> continuous, floored;
  double floored_sum = 0;
  for (auto c : counts) {
    continuous.push_back(static_cast<double>(c) / total * static_cast<double>(n_draws));
    floored.push_back(std::floor(continuous.back()));
    floored_sum += floored.back();
  }
  auto need = static_cast<int64_t>(static_cast<double>(n_draws) - floored_sum);
  if (need > 0) {
    std::vector<double> remainder;
    for (size_t i = 0; i < counts.size(); ++i) remainder.push_back(continuous[i] - floored[i]);
    std::vector<double> values(remainder);
    std::sort(values.begin(), values.end(), std::greater<>());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    for (double v : values) {
      std::vector<int64_t> inds;
      for (size_t i = 0; i < remainder.size(); ++i)
        if (remainder[i] == v) inds.push_back(static_cast<int64_t>(i));
      const int64_t add_now = std::min<int64_t>(static_cast<int64_t>(inds.size()), need);
      const auto pick = rng.permutation(static_cast<int64_t>(inds.size()));
      for (int64_t k = 0; k < add_now; ++k) floored[static_cast<size_t>(inds[static_cast<size_t>(pick[static_cast<size_t>(k)])])] += 1;
      need -= add_now;
      if (need == 0) break;
    }
  }
  std::vector<int64_t> out;
  for (double f : floored) out.push_back(static_cast<int64_t>(f));
  return out;
}

}  // namespace

Split stratified_split(const Table& t, double test_fraction, uint64_t seed) {
  const int64_t n = t.rows;
  const int64_t C = t.classes();
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(C));  // each class's rows, ascending
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(t.y[i])].push_back(i);
  std::vector<int64_t> counts;
  for (const auto& r : rows) counts.push_back(static_cast<int64_t>(r.size()));
  for (int64_t c = 0; c < C; ++c) {
    if (counts[c] >= 2) continue;
    const auto why = continuous_labels(t.source, t.label_name, t.class_names, n);
    TT_CHECK_AS(ConfigError, why.empty(), why);
    TT_CHECK_AS(ConfigError, counts[c] >= 2, "tabular: ", t.source, ": class '", t.class_names[c], "' has ",
                counts[c], " row", counts[c] == 1 ? "" : "s", "; a stratified split needs at least 2 of every class ",
                "(drop or merge that class; the classes are column '", t.label_name, "': if that is not the class "
                "column, set data.label)");
  }
  const auto n_test = static_cast<int64_t>(std::ceil(test_fraction * static_cast<double>(n)));
  const int64_t n_train = n - n_test;
  TT_CHECK_AS(ConfigError, n_test >= C && n_train >= C, "tabular: ", t.source, ": data.test_fraction ", test_fraction,
              " gives ", n_train, " training and ", n_test, " test rows for ", C,
              " classes; each side needs at least one row per class (change test_fraction)");
  NumpyRandomState rng(static_cast<uint32_t>(seed));
  const auto n_i = approximate_mode(counts, n_train, rng);
  for (int64_t c = 0; c < C; ++c)  // the totals allow it, and a rare class's rows still all go to the test side
    TT_CHECK_AS(ConfigError, n_i[c] >= 1, "tabular: ", t.source, ": data.test_fraction ", test_fraction,
                " puts every row of class '", t.class_names[c], "' (", counts[c], " of ", n,
                ") on the test side: the model would never see it in its context and could not predict it; "
                "lower test_fraction, or drop or merge that class");
  std::vector<int64_t> remaining(counts);
  for (size_t c = 0; c < remaining.size(); ++c) remaining[c] -= n_i[c];
  const auto t_i = approximate_mode(remaining, n_test, rng);
  Split s;
  for (size_t c = 0; c < counts.size(); ++c) {
    const auto perm = rng.permutation(counts[c]);
    for (int64_t k = 0; k < n_i[c] + t_i[c]; ++k)
      (k < n_i[c] ? s.train : s.test).push_back(rows[c][static_cast<size_t>(perm[static_cast<size_t>(k)])]);
  }
  std::sort(s.train.begin(), s.train.end());
  std::sort(s.test.begin(), s.test.end());
  return s;
}

}  // namespace tt::tab
