#include "topic_data.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "nonzeros.h"
#include "source_synthetic.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/npy.h"

namespace tt::topic {

torch::Tensor dense_counts(const Batch& batch, int64_t n_terms) {
  if (batch.has("x")) return batch.at("x");
  auto x = torch::zeros({batch.size, n_terms}, torch::kFloat);
  if (batch.at("vals").numel() > 0)
    x.index_put_({batch.at("rows"), batch.at("cols")}, batch.at("vals").to(torch::kFloat), /*accumulate=*/true);
  return x;
}

// ---- in memory, dense

Batch counts_batch(const at::Tensor& indices, int64_t m, bool dense, const std::function<const float*(int64_t)>& row) {
  const int64_t B = indices.numel();
  Batch b;
  b.set("index", indices);
  if (dense) {
    auto x = torch::empty({B, m}, torch::kFloat);
    float* out = x.data_ptr<float>();
    for (int64_t r = 0; r < B; ++r) std::memcpy(out + r * m, row(r), static_cast<size_t>(m) * sizeof(float));
    b.set("x", x);
    return b;
  }
  std::vector<const float*> src(static_cast<size_t>(B));
  int64_t nnz = 0;
  for (int64_t r = 0; r < B; ++r) {
    src[static_cast<size_t>(r)] = row(r);
    nnz += count_nonzeros(src[static_cast<size_t>(r)], m);
  }
  // room for the gather's overrun, then trimmed
  auto rows = torch::empty({nnz + 8}, torch::kLong), cols = torch::empty({nnz + 8}, torch::kLong);
  auto vals = torch::empty({nnz + 8}, torch::kFloat);
  int64_t* ro = rows.data_ptr<int64_t>();
  int64_t* co = cols.data_ptr<int64_t>();
  float* vo = vals.data_ptr<float>();
  int64_t q = 0;
  q = gather_nonzeros(src.data(), B, m, ro, co, vo);
  TT_CHECK(q == nnz, "non-zero count changed while reading the batch");
  rows = rows.narrow(0, 0, nnz);
  cols = cols.narrow(0, 0, nnz);
  vals = vals.narrow(0, 0, nnz);
  b.set_entries("rows", {{"rows", rows}, {"cols", cols}, {"vals", vals}});
  return b;
}

CountsDataset::CountsDataset(const torch::Tensor& counts, std::string name)
    : CountsDataset(CsrCounts::from_dense(counts), std::move(name)) {}

namespace {
// CSR of documents generated in chunks: the dense n x m matrix never exists at once.
CsrCounts generate_csr(const SyntheticCorpus& corpus, torch::Tensor& true_L) {
  const int64_t n = corpus.n_docs(), m = corpus.n_terms(), k = corpus.k();
  true_L = torch::empty({n, k}, torch::kFloat);
  const int64_t chunk = std::max<int64_t>(1, (int64_t{16} << 20) / (m * 4));  // ~16 MiB of rows
  std::vector<float> x(static_cast<size_t>(chunk * m));
  std::vector<int64_t> row_ptr{0}, cols;
  std::vector<float> vals;
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t e = std::min(n, b + chunk);
    corpus.documents(b, e, true_L.data_ptr<float>() + b * k, x.data());
    for (int64_t i = 0; i < e - b; ++i) {
      const float* row = x.data() + i * m;
      for (int64_t j = 0; j < m; ++j)
        if (row[j] != 0.0f) cols.push_back(j), vals.push_back(row[j]);
      row_ptr.push_back(static_cast<int64_t>(cols.size()));
    }
  }
  return CsrCounts::from_vectors(row_ptr, cols, vals, m);
}
}  // namespace

SyntheticDataset::SyntheticDataset(int64_t n, int64_t m, int64_t k, double avg_len, uint64_t seed)
    : CountsDataset(CsrCounts{}, "synthetic") {
  SyntheticCorpus corpus(n, m, k, avg_len, seed);
  csr_ = generate_csr(corpus, true_L_);
  true_F_ = corpus.true_F();
}

std::string SyntheticDataset::describe() const {
  return SparseCountsDataset::describe() + ", " + std::to_string(true_F_.size(0)) + " true topics";
}

namespace {
// topic-synthetic's options, bound by synthetic_schema() (defaults, ranges and docs are there).
struct SyntheticOptions {
  int64_t n_docs, n_terms, k;
  double avg_doc_length;
  std::optional<int64_t> seed;
};
}  // namespace

Schema synthetic_schema() {
  Schema s;
  s.field("n_docs", &SyntheticOptions::n_docs, 1000, "documents (n)").range(ge(1))
      .field("n_terms", &SyntheticOptions::n_terms, 1000, "vocabulary size (m)").range(ge(1), lt(2147483648.0))
      .field("k", &SyntheticOptions::k, 10, "true topics (at most n_terms)").range(ge(1))
      .field("avg_doc_length", &SyntheticOptions::avg_doc_length, 150.0,
             "mean words per document (Poisson, at least 1)")
      .range(gt(0), le(1e9))
      // Any integer: a negative one has always been taken as its two's complement.
      .field("seed", &SyntheticOptions::seed, std::nullopt, "generator seed (default: the pipeline seed)")
      .validate([](const Options& o) { o.check(o.get_int("k") <= o.get_int("n_terms"), "k", "must not exceed n_terms"); });
  return add_batch_format_option(s);
}

Datasets make_synthetic(const Options& o, uint64_t pipeline_seed) {
  const auto a = o.to<SyntheticOptions>();
  const uint64_t seed = a.seed ? static_cast<uint64_t>(*a.seed) : pipeline_seed;
  Datasets d;
  auto ds = std::make_shared<SyntheticDataset>(a.n_docs, a.n_terms, a.k, a.avg_doc_length, seed);
  ds->dense_batches_ = dense_batches(o);
  d.train = ds;
  return d;
}

// ---- checks and options shared by the file sources

std::string count_row_problem(const float* row, int64_t m) {
  bool any = false, bad = false;
  for (int64_t j = 0; j < m; ++j) {
    const float v = row[j];
    any |= v > 0;
    bad |= !(v >= 0) || v == std::numeric_limits<float>::infinity();  // negative, NaN or +inf
  }
  if (!bad) return any ? "" : "has no words; remove empty rows";
  for (int64_t j = 0; j < m; ++j) {  // only for a row with a problem: find it
    const float v = row[j];
    std::ostringstream s;
    if (!std::isfinite(v)) {
      s << "has a count that is not a finite number (" << v << " at term " << j
        << "); counts must be finite and non-negative (a float64 count beyond float32's range is not finite either)";
      return s.str();
    }
    if (v < 0) {
      s << "has a negative count (" << v << " at term " << j << "); counts must be non-negative";
      return s.str();
    }
  }
  return "";
}

void fail_document(const std::string& file, int64_t doc, const std::string& problem) {
  TT_FAIL_AS(ConfigError, file, ": document ", doc, " (row ", doc, ") ", problem);
}

void check_count_rows(const torch::Tensor& x, const std::string& file) {
  TT_CHECK(x.scalar_type() == torch::kFloat && x.dim() == 2 && x.is_contiguous(), "check_count_rows: bad tensor");
  const float* p = x.data_ptr<float>();
  const int64_t n = x.size(0), m = x.size(1);
  for (int64_t i = 0; i < n; ++i) {
    std::string problem = count_row_problem(p + i * m, m);
    if (!problem.empty()) fail_document(file, i, problem);
  }
}

Schema& add_reference_options(Schema& s) {
  return s
      .add("true_F", Type::String, "~",
           "a k x m .npy with the true topic-term matrix, when known (to align the fitted topics)")
      .add("vocab", Type::String, "~", "a text file with the m terms, one a line (the term of column j on line j+1)");
}

torch::Tensor read_true_F(const std::string& path, int64_t n_terms) {
  TT_CHECK_AS(ConfigError, std::filesystem::exists(path), "true_F: no such file ", describe_path(path));
  torch::Tensor F = read_npy(path);
  TT_CHECK_AS(ConfigError, F.dim() == 2 && F.size(1) == n_terms && F.size(0) >= 1, path,
              ": true_F must be a k x m matrix with m = ", n_terms, " (the corpus's terms); it has shape ", F.sizes());
  TT_CHECK_AS(ConfigError, F.is_floating_point() || F.scalar_type() == torch::kInt || F.scalar_type() == torch::kLong,
              path, ": true_F must be numeric, it is ", F.scalar_type());
  F = F.to(torch::kFloat).contiguous();
  TT_CHECK_AS(ConfigError, torch::isfinite(F).all().item<bool>() && (F >= 0).all().item<bool>(), path,
              ": true_F has negative or non-finite entries; it should hold topic-term probabilities");
  return F;
}

void load_reference_options(const Options& o, TopicSource& d) {
  if (o.is_set("true_F")) d.true_F_ = read_true_F(o.get_string("true_F"), d.n_terms());
  if (o.is_set("vocab")) d.vocab_ = read_vocabulary(o.get_string("vocab"), d.n_terms());
}

std::vector<std::string> read_vocabulary(const std::string& path, int64_t n_terms) {
  std::ifstream in(path);
  TT_CHECK_AS(ConfigError, in.good(), "vocab: cannot open ", describe_path(path));
  std::vector<std::string> vocab;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab.push_back(line);
  }
  TT_CHECK_AS(ConfigError, static_cast<int64_t>(vocab.size()) == n_terms, path, ": the vocabulary has ", vocab.size(),
              " lines but the corpus has ", n_terms, " terms; write one term per line, in column order");
  return vocab;
}

LineReader::LineReader(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "r")) {
  TT_CHECK_AS(ConfigError, f_, "cannot open ", describe_path(path), ": ", std::strerror(errno));
}

LineReader::~LineReader() {
  std::free(buf_);
  if (f_) std::fclose(f_);
}

const char* LineReader::next(size_t* length) {
  ssize_t n = ::getline(&buf_, &cap_, f_);
  if (n < 0) {
    TT_CHECK_AS(ConfigError, !std::ferror(f_), path_, ": read failed after line ", line_);
    return nullptr;
  }
  ++line_;
  while (n > 0 && (buf_[n - 1] == '\n' || buf_[n - 1] == '\r')) buf_[--n] = '\0';
  if (length) *length = static_cast<size_t>(n);
  return buf_;
}

// ---- sparse counts in memory

CsrCounts CsrCounts::from_vectors(const std::vector<int64_t>& row_ptr, const std::vector<int64_t>& cols,
                                  const std::vector<float>& vals, int64_t n_terms) {
  CsrCounts c;
  auto copy = [](const auto& v, torch::ScalarType t) {
    auto out = torch::empty({static_cast<int64_t>(v.size())}, t);
    if (!v.empty()) std::memcpy(out.data_ptr(), v.data(), v.size() * sizeof(v[0]));
    return out;
  };
  c.row_ptr = copy(row_ptr, torch::kLong);
  c.cols = copy(cols, torch::kLong);
  c.vals = copy(vals, torch::kFloat);
  c.n_terms = n_terms;
  return c;
}

CsrCounts CsrCounts::from_dense(const torch::Tensor& counts) {
  TT_CHECK(counts.dim() == 2, "counts must be a 2-D documents x terms matrix");
  const auto x = counts.to(torch::kFloat).contiguous();
  const int64_t n = x.size(0), m = x.size(1);
  const float* px = x.data_ptr<float>();
  std::vector<int64_t> row_ptr{0}, cols;
  std::vector<float> vals;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j)
      if (px[i * m + j] != 0.0f) cols.push_back(j), vals.push_back(px[i * m + j]);
    row_ptr.push_back(static_cast<int64_t>(cols.size()));
  }
  return from_vectors(row_ptr, cols, vals, m);
}

torch::Tensor CsrCounts::dense() const {
  const int64_t n = n_docs();
  auto x = torch::zeros({n, n_terms}, torch::kFloat);
  const int64_t* rp = row_ptr.data_ptr<int64_t>();
  const int64_t* c = cols.data_ptr<int64_t>();
  const float* v = vals.data_ptr<float>();
  float* out = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = rp[i]; p < rp[i + 1]; ++p) out[i * n_terms + c[p]] += v[p];
  return x;
}

SparseCountsDataset::SparseCountsDataset(CsrCounts counts, bool dense_batches, std::string name)
    : csr_(std::move(counts)), name_(std::move(name)) {
  dense_batches_ = dense_batches;
  // Counts that are not whole numbers (proportions, tf-idf weights) fit, but not as the word
  // counts the Poisson model is of: a row normalized to sum to 1 loses its document's length.
  // (a source that fills csr_ later, the synthetic one, draws whole counts)
  const at::Tensor fractional = csr_.vals.defined() ? csr_.vals != csr_.vals.floor() : at::Tensor();
  const int64_t how_many = fractional.defined() ? fractional.sum().item<int64_t>() : 0;
  if (how_many > 0) {
    const int64_t p = fractional.to(at::kByte).argmax().item<int64_t>();  // the first (no nnz-long index list)
    const int64_t* rp = csr_.row_ptr.data_ptr<int64_t>();
    const int64_t doc = std::upper_bound(rp, rp + csr_.row_ptr.numel(), p) - rp - 1;
    log().warn("{}: {} of its {} non-zero counts are not whole numbers (document {}, term {}: {}); the topic model "
               "is a Poisson model of word counts: give the counts (proportions lose the documents' lengths)", name_,
               how_many, csr_.nnz(), doc, csr_.cols[p].item<int64_t>(), csr_.vals[p].item<float>());
  }
}

Batch SparseCountsDataset::get(const at::Tensor& indices) {
  auto idx = indices.to(torch::kLong).contiguous();
  const int64_t B = idx.size(0), m = csr_.n_terms;
  const int64_t* id = idx.data_ptr<int64_t>();
  const int64_t* rp = csr_.row_ptr.data_ptr<int64_t>();
  const int64_t* c = csr_.cols.data_ptr<int64_t>();
  const float* v = csr_.vals.data_ptr<float>();
  const int64_t n = size();
  Batch b;
  b.set("index", indices);
  if (dense_batches_) {
    auto x = torch::zeros({B, m}, torch::kFloat);
    float* out = x.data_ptr<float>();
    for (int64_t r = 0; r < B; ++r) {
      TT_CHECK(id[r] >= 0 && id[r] < n, name_, ": document ", id[r], " out of range (", n, " documents)");
      for (int64_t p = rp[id[r]]; p < rp[id[r] + 1]; ++p) out[r * m + c[p]] = v[p];
    }
    b.set("x", x);
    return b;
  }
  // The non-zeros ordered as gather_nonzeros orders them (nonzeros.h: by blocks of eight
  // columns, then row, then column), by a counting sort on the column block.
  const int64_t nblocks = (m + 7) / 8;
  std::vector<int64_t> start(static_cast<size_t>(nblocks + 1), 0);
  int64_t nnz = 0;
  for (int64_t r = 0; r < B; ++r) {
    TT_CHECK(id[r] >= 0 && id[r] < n, name_, ": document ", id[r], " out of range (", n, " documents)");
    for (int64_t p = rp[id[r]]; p < rp[id[r] + 1]; ++p) ++start[static_cast<size_t>(c[p] / 8 + 1)];
    nnz += rp[id[r] + 1] - rp[id[r]];
  }
  for (int64_t q = 0; q < nblocks; ++q) start[static_cast<size_t>(q + 1)] += start[static_cast<size_t>(q)];
  auto rows = torch::empty({nnz}, torch::kLong), cols = torch::empty({nnz}, torch::kLong);
  auto vals = torch::empty({nnz}, torch::kFloat);
  int64_t* ro = rows.data_ptr<int64_t>();
  int64_t* co = cols.data_ptr<int64_t>();
  float* vo = vals.data_ptr<float>();
  for (int64_t r = 0; r < B; ++r)
    for (int64_t p = rp[id[r]]; p < rp[id[r] + 1]; ++p) {
      const int64_t q = start[static_cast<size_t>(c[p] / 8)]++;
      ro[q] = r, co[q] = c[p], vo[q] = v[p];
    }
  b.set_entries("rows", {{"rows", rows}, {"cols", cols}, {"vals", vals}});
  return b;
}

std::string SparseCountsDataset::describe() const {
  const double n = static_cast<double>(size()), m = static_cast<double>(n_terms());
  std::ostringstream s;
  s.precision(3);
  s << name_ << ": " << size() << " docs x " << n_terms() << " terms, " << csr_.nnz() << " non-zeros ("
    << 100.0 * static_cast<double>(csr_.nnz()) / std::max(1.0, n * m) << "% dense), "
    << static_cast<int64_t>(csr_.vals.sum().item<double>()) << " words, " << (dense_batches_ ? "dense" : "sparse")
    << " batches";
  return s.str();
}

Datasets file_source(const Options& o, std::shared_ptr<TopicSource> d) {
  load_reference_options(o, *d);
  d->dense_batches_ = dense_batches(o);
  Datasets out;
  out.train = std::move(d);
  return out;
}

Schema& add_batch_format_option(Schema& s) {
  return s
      .add("batch_format", Type::String, "sparse",
           "sparse: batches carry the non-zeros (rows, cols, vals); dense: batches carry count rows x [B, m]")
      .choices({"sparse", "dense"});
}

bool dense_batches(const Options& o) { return o.get_string("batch_format") == "dense"; }

}  // namespace tt::topic
