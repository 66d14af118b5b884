#pragma once
// Data sources of the topic model: document-term counts as batches
// {"index": int64 doc ids [B], "x": float32 counts [B, m]} (dense sources) or
// {"index", "rows", "cols", "vals"} (sparse sources, see TopicSource).
// The sources themselves: topic-synthetic (here), topic-npy (source_npy.h), topic-pt
// (source_pt.h), topic-mtx (source_mtx.h), topic-text (source_text.h).
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "tt/dataset.h"
#include "tt/options.h"

namespace tt::topic {

// What every topic-model data source offers besides batches. A batch has "index" (int64 doc
// ids [B]) and either "x" (float32 counts [B, m], dense sources) or the batch's non-zeros in
// coordinate form (sparse sources): "rows" (int64 [nnz], row within the batch), "cols"
// (int64 [nnz], term id), "vals" (float32 [nnz], count). The sparse tensors have nnz rows,
// not B, so they are put in Batch::tensors directly (Batch::set checks for B rows) with
// Batch::size = B. Batch::slice (micro-batches) cannot cut them by rows: whoever slices a
// batch must know the form (rows [begin, end) are the triplets with begin <= rows < end).
class TopicSource : public Dataset {
 public:
  virtual int64_t n_terms() const = 0;
  virtual torch::Tensor true_F() const { return true_F_; }               // k x m ground truth, when known
  virtual std::vector<std::string> vocabulary() const { return vocab_; }  // term names, when known
  virtual std::vector<std::string> doc_labels() const { return {}; }  // e.g. Brown categories
  virtual std::vector<std::string> doc_ids() const { return {}; }     // per document (row of L), when known
  std::map<std::string, int64_t> info() const override { return {{"n_docs", size()}, {"n_terms", n_terms()}}; }

  // Reference data: generated (synthetic) or read from the true_F / vocab options.
  torch::Tensor true_F_;
  std::vector<std::string> vocab_;
  // batch_format: dense — batches carry "x" rows instead of the non-zeros.
  bool dense_batches_ = false;
};

// A batch of either form as dense float32 counts [B, m].
torch::Tensor dense_counts(const Batch& batch, int64_t n_terms);

// The batch of B = indices.numel() dense count rows, row(r) giving the m floats of the r-th:
// the non-zeros in coordinate form, or "x" [B, m] when `dense`. Sources call it from get(),
// so the scan for non-zeros runs on the data loader's thread, not the training step's.
Batch counts_batch(const at::Tensor& indices, int64_t m, bool dense, const std::function<const float*(int64_t)>& row);

Schema synthetic_schema();
Datasets make_synthetic(const Options& o, uint64_t pipeline_seed);

// ---- checks and options shared by the file sources

// What is wrong with one document's counts, or "" when nothing is: a negative or non-finite
// count, or no words at all. Sources call it as rows are read.
std::string count_row_problem(const float* row, int64_t m);
// ConfigError "<file>: document <doc> <problem>".
[[noreturn]] void fail_document(const std::string& file, int64_t doc, const std::string& problem);
// Every row of a dense [n, m] float32 tensor checked (sources that hold counts in memory).
void check_count_rows(const torch::Tensor& x, const std::string& file);

// The options every file source has besides its path: true_F (a k x m .npy) and vocab (a
// text file, one term per line), both optional.
Schema& add_reference_options(Schema& s);
torch::Tensor read_true_F(const std::string& path, int64_t n_terms);
std::vector<std::string> read_vocabulary(const std::string& path, int64_t n_terms);
// Sets d's reference data from the true_F and vocab options (add_reference_options' keys).
void load_reference_options(const Options& o, TopicSource& d);
// A file source made from its options: reference data, batch_format, as the pipeline's train set.
Datasets file_source(const Options& o, std::shared_ptr<TopicSource> d);

// The lines of a text file with their numbers (POSIX getline: no length limit).
class LineReader {
 public:
  explicit LineReader(const std::string& path);  // ConfigError if it cannot be opened
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  // The next line without its line ending, or nullptr at the end; `length` is its length.
  const char* next(size_t* length = nullptr);
  int64_t line() const { return line_; }

 private:
  std::string path_;
  std::FILE* f_;
  char* buf_ = nullptr;
  size_t cap_ = 0;
  int64_t line_ = 0;
};

// ---- sparse counts in memory (topic-mtx, topic-text)

// Compressed sparse rows held as tensors (so the memory meter counts them): row_ptr int64
// [n+1], cols int64 [nnz] (ascending within a row), vals float32 [nnz].
struct CsrCounts {
  torch::Tensor row_ptr, cols, vals;
  int64_t n_terms = 0;
  int64_t n_docs() const { return row_ptr.size(0) - 1; }
  int64_t nnz() const { return cols.size(0); }
  static CsrCounts from_vectors(const std::vector<int64_t>& row_ptr, const std::vector<int64_t>& cols,
                                const std::vector<float>& vals, int64_t n_terms);
  static CsrCounts from_dense(const torch::Tensor& x);  // [n, m], any numeric dtype
  torch::Tensor dense() const;  // n x m float32
};

// A CsrCounts corpus. Batches in coordinate form, or dense "x" rows with dense_batches.
class SparseCountsDataset : public TopicSource {
 public:
  SparseCountsDataset(CsrCounts counts, bool dense_batches, std::string name);
  int64_t size() const override { return csr_.n_docs(); }
  Batch get(const at::Tensor& indices) override;
  int64_t n_terms() const override { return csr_.n_terms; }
  std::string describe() const override;
  std::vector<std::string> doc_labels() const override { return labels_; }
  const CsrCounts& csr() const { return csr_; }

  std::vector<std::string> labels_;

 protected:
  CsrCounts csr_;
  std::string name_;
};

// Document-term counts given as a dense [n, m] matrix (topic-pt, tests), held as CSR: a
// document-term matrix is mostly zeros, so this is several times smaller, and batches are
// built from the non-zeros without scanning m columns per document.
class CountsDataset : public SparseCountsDataset {
 public:
  explicit CountsDataset(const torch::Tensor& counts, std::string name = "counts");
  torch::Tensor counts() const { return csr().dense(); }

 protected:
  CountsDataset(CsrCounts csr, std::string name) : SparseCountsDataset(std::move(csr), false, std::move(name)) {}
};

// Synthetic corpus as tinytopics' generate_synthetic_data (the model of SyntheticCorpus in
// source_synthetic.h; tt-data synth-topics with the same seed writes the same counts):
// true L and F kept for alignment.
class SyntheticDataset : public CountsDataset {
 public:
  SyntheticDataset(int64_t n, int64_t m, int64_t k, double avg_doc_length, uint64_t seed);
  std::string describe() const override;
  torch::Tensor true_L_;
};

// The "batch_format" option of sparse sources: "sparse" (coordinate triplets) or "dense".
Schema& add_batch_format_option(Schema& s);
bool dense_batches(const Options& o);

}  // namespace tt::topic
