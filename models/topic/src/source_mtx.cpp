#include "source_mtx.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "tt/error.h"

namespace tt::topic {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool blank(const char* s) {
  while (*s && std::isspace(static_cast<unsigned char>(*s))) ++s;
  return *s == '\0';
}

}  // namespace

CsrCounts read_mtx(const std::string& path) {
  LineReader in(path);
  const char* line = in.next();
  TT_CHECK_AS(ConfigError, line, path,
              ": the file is empty; expected a Matrix Market file "
              "(%%MatrixMarket matrix coordinate real general)");
  std::istringstream banner(line);
  std::string magic, object, format, field, symmetry;
  banner >> magic >> object >> format >> field >> symmetry;
  TT_CHECK_AS(ConfigError, lower(magic) == "%%matrixmarket", path,
              ": not a Matrix Market file (line 1 does not start with %%MatrixMarket); write it with "
              "scipy.io.mmwrite(path, X) where X is a scipy.sparse documents x terms matrix");
  object = lower(object), format = lower(format), field = lower(field), symmetry = lower(symmetry);
  TT_CHECK_AS(ConfigError, object == "matrix", path, ": line 1: the object is '", object,
              "', topic-mtx reads a 'matrix'");
  TT_CHECK_AS(ConfigError, format == "coordinate", path, ": line 1: the format is '", format,
              "'; topic-mtx reads sparse 'coordinate' files (save a dense matrix as .npy for topic-npy instead)");
  TT_CHECK_AS(ConfigError, field == "real" || field == "integer", path, ": line 1: the field is '", field,
              "'; counts must be 'real' or 'integer'");
  TT_CHECK_AS(ConfigError, symmetry == "general", path, ": line 1: the symmetry is '", symmetry,
              "'; a documents x terms matrix is 'general'");

  while ((line = in.next()) && (line[0] == '%' || blank(line))) {
  }
  TT_CHECK_AS(ConfigError, line, path, ": no size line (rows columns entries) after the header");
  long long n = -1, m = -1, nnz = -1;
  char extra = 0;
  TT_CHECK_AS(ConfigError, std::sscanf(line, "%lld %lld %lld %c", &n, &m, &nnz, &extra) == 3, path, ": line ",
              in.line(), ": expected the size line 'documents terms entries', found '", line, "'");
  TT_CHECK_AS(ConfigError, n >= 1 && m >= 1 && nnz >= 0, path, ": line ", in.line(), ": bad size ", n, " x ", m,
              " with ", nnz, " entries");
  // Nothing is reserved for more entries than the file can hold (each takes at least 5 bytes, "1 1 1").
  std::error_code ec;
  const auto bytes = static_cast<long long>(std::filesystem::file_size(path, ec));
  TT_CHECK_AS(ConfigError, ec || nnz <= bytes / 5, path, ": line ", in.line(), ": the size line announces ", nnz,
              " entries, more than the file's ", bytes, " bytes can hold (is it truncated?)");

  std::vector<int64_t> rows, cols;
  std::vector<float> vals;
  rows.reserve(static_cast<size_t>(nnz));
  cols.reserve(static_cast<size_t>(nnz));
  vals.reserve(static_cast<size_t>(nnz));
  int64_t read = 0;
  while ((line = in.next())) {
    if (blank(line) || line[0] == '%') continue;
    TT_CHECK_AS(ConfigError, read < nnz, path, ": line ", in.line(), ": more entries than the ", nnz,
                " the size line announces");
    char* end = nullptr;
    const long long i = std::strtoll(line, &end, 10);
    const char* p = end;
    const long long j = std::strtoll(p, &end, 10);
    const bool have_ij = end != p && p != line;
    p = end;
    const double v = std::strtod(p, &end);
    TT_CHECK_AS(ConfigError, have_ij && end != p && blank(end), path, ": line ", in.line(),
                ": expected 'document term count', found '", line, "'");
    TT_CHECK_AS(ConfigError, i >= 1 && i <= n && j >= 1 && j <= m, path, ": line ", in.line(), ": entry (", i, ", ", j,
                ") is outside the ", n, " x ", m, " matrix (indices count from 1)");
    TT_CHECK_AS(ConfigError, std::isfinite(v) && v >= 0, path, ": line ", in.line(), ": document ", i - 1, " (row ", i,
                ") has a ", std::isfinite(v) ? "negative" : "non-finite", " count (", v, " at term ", j - 1,
                "); counts must be finite and non-negative");
    TT_CHECK_AS(ConfigError, std::isfinite(static_cast<float>(v)), path, ": line ", in.line(), ": document ", i - 1,
                " (row ", i, ") has a count beyond float32's range (", v, " at term ", j - 1,
                "); tt keeps counts as float32");
    ++read;
    if (v == 0) continue;
    rows.push_back(i - 1);
    cols.push_back(j - 1);
    vals.push_back(static_cast<float>(v));
  }
  TT_CHECK_AS(ConfigError, read == nnz, path, ": the file is truncated: the size line announces ", nnz,
              " entries, it has ", read);

  const auto empty_document = [&](int64_t r) {
    TT_FAIL_AS(ConfigError, path, ": document ", r, " (row ", r + 1,
               " of the file, counting from 1) has no words; remove empty rows");
  };
  // More documents than non-zero entries: one is empty (found before n row pointers are
  // allocated for a size line that may promise billions of documents).
  if (static_cast<size_t>(n) > rows.size()) {
    std::vector<int64_t> seen(rows);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    int64_t r = 0;
    while (r < static_cast<int64_t>(seen.size()) && seen[static_cast<size_t>(r)] == r) ++r;
    empty_document(r);
  }

  // counting sort by row, then by column within each row; duplicates add up
  std::vector<int64_t> row_ptr(static_cast<size_t>(n) + 1, 0);
  for (int64_t r : rows) ++row_ptr[static_cast<size_t>(r) + 1];
  std::partial_sum(row_ptr.begin(), row_ptr.end(), row_ptr.begin());
  std::vector<int64_t> order(rows.size());
  {
    std::vector<int64_t> next(row_ptr.begin(), row_ptr.end() - 1);
    for (size_t e = 0; e < rows.size(); ++e)
      order[static_cast<size_t>(next[static_cast<size_t>(rows[e])]++)] = static_cast<int64_t>(e);
  }
  std::vector<int64_t> out_ptr(static_cast<size_t>(n) + 1, 0), out_cols;
  std::vector<float> out_vals;
  out_cols.reserve(rows.size());
  out_vals.reserve(rows.size());
  for (int64_t r = 0; r < n; ++r) {
    auto b = order.begin() + row_ptr[static_cast<size_t>(r)], e = order.begin() + row_ptr[static_cast<size_t>(r) + 1];
    std::sort(b, e, [&](int64_t x, int64_t y) { return cols[static_cast<size_t>(x)] < cols[static_cast<size_t>(y)]; });
    for (auto it = b; it != e; ++it) {
      const int64_t c = cols[static_cast<size_t>(*it)];
      const float v = vals[static_cast<size_t>(*it)];
      if (static_cast<int64_t>(out_cols.size()) > out_ptr[static_cast<size_t>(r)] && out_cols.back() == c) {
        out_vals.back() += v;
      } else {
        out_cols.push_back(c);
        out_vals.push_back(v);
      }
    }
    out_ptr[static_cast<size_t>(r) + 1] = static_cast<int64_t>(out_cols.size());
    if (out_ptr[static_cast<size_t>(r) + 1] == out_ptr[static_cast<size_t>(r)]) empty_document(r);
  }
  return CsrCounts::from_vectors(out_ptr, out_cols, out_vals, m);
}

Schema mtx_schema() {
  Schema s;
  s.add("path", Type::String, "~", "a Matrix Market file (coordinate real/integer general), documents x terms");
  add_batch_format_option(s);
  return add_reference_options(s);
}

Datasets make_mtx(const Options& o, uint64_t) {
  const std::string path = o.get_string("path");
  o.check(std::filesystem::exists(path), "path", "names no such file " + describe_path(path));
  const bool dense = dense_batches(o);
  auto d = std::make_shared<SparseCountsDataset>(read_mtx(path), dense, path);
  load_reference_options(o, *d);
  Datasets out;
  out.train = d;
  return out;
}

}  // namespace tt::topic
