#include "source_npy.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "nonzeros.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/pread_file.h"
#include "tt/runtime.h"

namespace tt::topic {

namespace {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kShort: return "int16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kBool: return "bool";
    case at::kHalf: return "float16";
    default: return "?";
  }
}

template <class T>
void convert_row(const char* src, float* dst, int64_t m) {
  const T* s = reinterpret_cast<const T*>(src);
  for (int64_t j = 0; j < m; ++j) dst[j] = static_cast<float>(s[j]);
}

// One row of the file's dtype as float32 (a float32 row is copied).
void row_to_float(at::ScalarType dtype, const char* src, float* dst, int64_t m) {
  switch (dtype) {
    case at::kFloat: std::memcpy(dst, src, static_cast<size_t>(m) * sizeof(float)); break;
    case at::kDouble: convert_row<double>(src, dst, m); break;
    case at::kInt: convert_row<int32_t>(src, dst, m); break;
    case at::kLong: convert_row<int64_t>(src, dst, m); break;
    case at::kShort: convert_row<int16_t>(src, dst, m); break;
    case at::kChar: convert_row<int8_t>(src, dst, m); break;
    case at::kHalf: convert_row<c10::Half>(src, dst, m); break;
    case at::kBool: convert_row<bool>(src, dst, m); break;
    default: convert_row<uint8_t>(src, dst, m); break;
  }
}

}  // namespace

void check_counts_header(const std::string& path, const NpyHeader& h) {
  const auto t = h.dtype;
  // Every dtype tt's .npy reader knows (the list its refusal of another one gives).
  TT_CHECK_AS(ConfigError, t == at::kFloat || t == at::kDouble || t == at::kInt || t == at::kLong || t == at::kShort ||
                               t == at::kByte || t == at::kChar || t == at::kHalf || t == at::kBool,
              path, ": dtype ", dtype_name(t), " ('", h.descr,
              "') is not supported for counts; topic-npy reads float32, float64, float16, int64, int32, int16, int8, "
              "uint8 and bool (convert with X.astype(numpy.float32))");
  TT_CHECK_AS(ConfigError, !h.fortran_order, path,
              ": the array is in Fortran (column-major) order; topic-npy reads rows and needs C order: "
              "save numpy.ascontiguousarray(X)");
  std::string shape;
  for (int64_t d : h.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  TT_CHECK_AS(ConfigError, h.shape.size() == 2, path, ": expected a 2-D documents x terms matrix, the array has ",
              h.shape.size(), " dimension(s) (shape (", shape, "))");
  TT_CHECK_AS(ConfigError, h.shape[0] >= 1 && h.shape[1] >= 1, path, ": the matrix is empty (shape (", shape, "))");
}

NpyDataset::NpyDataset(const std::string& path) : path_(path), map_(path) {
  check_counts_header(path_, map_.header());
  n_ = map_.header().shape[0];
  m_ = map_.header().shape[1];
}

Batch NpyDataset::get(const at::Tensor& indices) {
  auto idx = indices.to(torch::kLong).contiguous();
  const int64_t B = idx.size(0);
  const int64_t* id = idx.data_ptr<int64_t>();
  for (int64_t r = 0; r < B; ++r)
    TT_CHECK(id[r] >= 0 && id[r] < n_, path_, ": document ", id[r], " out of range (", n_, " documents)");
  auto x = torch::empty({B, m_}, torch::kFloat);
  float* out = x.data_ptr<float>();
  const char* data = map_.data();
  const auto dtype = map_.header().dtype;
  const int64_t row_bytes = m_ * map_.header().item_size;
  for (int64_t r = 0; r < B; ++r) map_.will_need(data + id[r] * row_bytes, static_cast<size_t>(row_bytes));
  std::vector<std::string> problems(static_cast<size_t>(B));
  // rows in parallel when the batch is big enough to be worth it (~256 KiB a task)
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / m_);
  at::parallel_for(0, B, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const char* src = data + id[r] * row_bytes;
      float* dst = out + r * m_;
      row_to_float(dtype, src, dst, m_);
      map_.release(src, static_cast<size_t>(row_bytes));
      problems[static_cast<size_t>(r)] = count_row_problem(dst, m_);
    }
  });
  for (int64_t r = 0; r < B; ++r)  // the first bad row in batch order, whatever the threads did
    if (!problems[static_cast<size_t>(r)].empty()) fail_document(path_, id[r], problems[static_cast<size_t>(r)]);
  if (dense_batches_) {
    Batch b;
    b.set("index", indices);
    b.set("x", x);
    return b;
  }
  return counts_batch(indices, m_, false, [&](int64_t r) { return out + r * m_; });
}

namespace {

// One chunk of rows read by one thread: its non-zeros in ascending column order per row, or where
// it stopped (a read error, or its first bad row).
struct ChunkNonzeros {
  std::vector<char> buf;
  std::vector<float> row, vals;
  std::vector<int64_t> cols, rows_scratch, row_counts;
  bool read_ok = true;
  int read_errno = 0;
  int64_t bad_doc = -1;
  std::string problem;
};

void read_chunk(const detail::PreadFile& file, const NpyHeader& h, int64_t r0, int64_t rows, ChunkNonzeros& c) {
  const int64_t m = h.shape[1], row_bytes = m * h.item_size;
  c.cols.clear(), c.vals.clear(), c.row_counts.clear();
  c.read_ok = true, c.read_errno = 0, c.bad_doc = -1, c.problem.clear();
  c.buf.resize(static_cast<size_t>(rows * row_bytes));
  errno = 0;
  if (!file.read(h.data_offset + r0 * row_bytes, c.buf.data(), c.buf.size())) {
    c.read_ok = false, c.read_errno = errno;
    return;
  }
  const bool as_is = h.dtype == at::kFloat;  // float32 rows are scanned in the buffer, not copied
  if (!as_is) c.row.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < rows; ++i) {
    const char* raw = c.buf.data() + i * row_bytes;
    const float* src = as_is ? reinterpret_cast<const float*>(raw) : c.row.data();
    if (!as_is) row_to_float(h.dtype, raw, c.row.data(), m);
    if (std::string problem = count_row_problem(src, m); !problem.empty()) {
      c.bad_doc = r0 + i, c.problem = std::move(problem);
      return;
    }
    const int64_t have = static_cast<int64_t>(c.cols.size()), add = count_nonzeros(src, m);
    c.cols.resize(static_cast<size_t>(have + add + 8));  // the gather writes up to 8 past its last entry
    c.vals.resize(c.cols.size());
    c.rows_scratch.resize(std::max(c.rows_scratch.size(), static_cast<size_t>(add + 8)));
    gather_nonzeros(&src, 1, m, c.rows_scratch.data(), c.cols.data() + have, c.vals.data() + have);
    c.cols.resize(static_cast<size_t>(have + add));
    c.vals.resize(c.cols.size());
    c.row_counts.push_back(add);
  }
}

}  // namespace

std::optional<CsrCounts> read_npy_counts(const std::string& path, int64_t budget, int64_t chunk_bytes) {
  const NpyHeader h = read_npy_header(path);
  check_counts_header(path, h);
  const int64_t n = h.shape[0], m = h.shape[1], row_bytes = m * h.item_size;
  detail::PreadFile file(path);
  TT_CHECK_AS(ConfigError, file.ok(), path, ": cannot open (", std::strerror(errno), ")");
  // Chunks of rows, one a thread, read and scanned in parallel a wave at a time; each wave's
  // chunks are then appended in file order, so the result, the first bad document named and the
  // budget's verdict are those of reading row by row, whatever the threads. A chunk's rows are
  // as many as would give chunk_bytes of non-zeros (12 bytes each) were every count non-zero:
  // a thread holds at most chunk_bytes of the file's rows and as much of their non-zeros.
  const int64_t chunk_rows = std::max<int64_t>(1, chunk_bytes / (m * 12));
  const int64_t n_chunks = (n + chunk_rows - 1) / chunk_rows;
  std::vector<ChunkNonzeros> wave(static_cast<size_t>(std::clamp<int64_t>(at::get_num_threads(), 1, n_chunks)));
  const int64_t per_wave = static_cast<int64_t>(wave.size());
  std::vector<int64_t> row_ptr(static_cast<size_t>(n + 1), 0), cols;
  std::vector<float> vals;
  auto last_report = std::chrono::steady_clock::now();
  for (int64_t c0 = 0; c0 < n_chunks; c0 += per_wave) {
    TT_CHECK_AS(Interrupted, !interrupt_requested(), "interrupted while reading ", path, " into memory (",
                c0 * chunk_rows, " of ", n, " documents read)");
    const int64_t count = std::min(per_wave, n_chunks - c0);
    at::parallel_for(0, count, 1, [&](int64_t a, int64_t b) {
      for (int64_t c = a; c < b; ++c) {
        const int64_t r0 = (c0 + c) * chunk_rows;
        read_chunk(file, h, r0, std::min(chunk_rows, n - r0), wave[static_cast<size_t>(c)]);
      }
    });
    for (int64_t c = 0; c < count; ++c) {
      const ChunkNonzeros& chunk = wave[static_cast<size_t>(c)];
      const int64_t r0 = (c0 + c) * chunk_rows, rows = std::min(chunk_rows, n - r0);
      const int64_t at = h.data_offset + r0 * row_bytes;
      TT_CHECK_AS(ConfigError, chunk.read_ok, path, ": cannot read documents ", r0, "-", r0 + rows - 1, " (bytes ",
                  at, "-", at + rows * row_bytes, "): ",
                  chunk.read_errno ? std::strerror(chunk.read_errno)
                                   : "the file ends before the matrix its header describes");
      // Row by row, the budget ran out at a good row before the chunk's bad one, if at all: the
      // non-zeros only grow, and the chunk holds those of its rows before the bad one.
      const int64_t have = static_cast<int64_t>(cols.size()), add = static_cast<int64_t>(chunk.cols.size());
      if (!chunk.row_counts.empty() && (have + add) * 12 + (n + 1) * 8 > budget) return std::nullopt;
      if (chunk.bad_doc >= 0) fail_document(path, chunk.bad_doc, chunk.problem);
      cols.insert(cols.end(), chunk.cols.begin(), chunk.cols.end());
      vals.insert(vals.end(), chunk.vals.begin(), chunk.vals.end());
      for (int64_t i = 0; i < rows; ++i) {
        const auto r = static_cast<size_t>(r0 + i);
        row_ptr[r + 1] = row_ptr[r] + chunk.row_counts[static_cast<size_t>(i)];
      }
    }
    if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(10)) {
      last_report = std::chrono::steady_clock::now();
      log().info("topic-npy: read {} of {} documents of {} ({} non-zeros so far)",
                 std::min(n, (c0 + count) * chunk_rows), n, path, cols.size());
    }
  }
  return CsrCounts::from_vectors(row_ptr, cols, vals, m);
}

std::string NpyDataset::describe() const {
  return path_ + " (memory-mapped " + dtype_name(map_.header().dtype) + "): " + std::to_string(n_) + " docs x " +
         std::to_string(m_) + " terms";
}

Schema npy_schema() {
  Schema s;
  s.add("path", Type::String, "~",
        "the documents x terms .npy (float32/float64/float16/int64/int32/int16/int8/uint8/bool, C order), e.g. from tt-data "
        "synth-topics");
  s.add("load", Type::String, "auto",
        "memory: read the file once into its rows' non-zeros (each epoch then reads memory); map: memory-map it "
        "and copy a batch's rows each step (non-zeros larger than memory); auto: memory while the non-zeros fit "
        "in half the available memory, else map")
      .choices({"auto", "memory", "map"});
  add_batch_format_option(s);
  return add_reference_options(s);
}

Datasets make_npy(const Options& o, uint64_t) {
  const std::string path = o.get_string("path");
  o.check(std::filesystem::exists(path), "path",
          "names no such file " + describe_path(path) +
              " (tt-data synth-topics --out DIR writes a synthetic corpus as DIR/X.npy)");
  const std::string load = o.get_string("load");
  if (load != "map") {
    const int64_t available = Meter::available();
    const int64_t budget = load == "memory" || available <= 0 ? std::numeric_limits<int64_t>::max() : available / 2;
    const auto t0 = std::chrono::steady_clock::now();
    if (auto csr = read_npy_counts(path, budget)) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      log().info("topic-npy: {} read into memory in {:.1f} s: {} non-zeros, {}", path, seconds, csr->nnz(),
                 format_bytes(csr->nnz() * 12 + (csr->n_docs() + 1) * 8));
      return file_source(o, std::make_shared<SparseCountsDataset>(std::move(*csr), false, path + " (read into memory)"));
    }
    log().info("topic-npy: the non-zeros of {} outgrow half the available memory ({}): memory-mapped instead "
               "(data.load: map)", path, format_bytes(budget));
  }
  return file_source(o, std::make_shared<NpyDataset>(path));
}

}  // namespace tt::topic
