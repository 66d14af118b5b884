#pragma once
// NumPy .npy files (format 1.0/2.0/3.0, little-endian, C order): whole tensors in and out,
// the header on its own, a read-only memory map for arrays read a few rows at a time, and
// a streaming writer for arrays larger than memory.
#include <ATen/core/Tensor.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tt/export.h"

namespace tt {

TT_API void write_npy(const std::filesystem::path& path, const at::Tensor& t);
TT_API at::Tensor read_npy(const std::filesystem::path& path);  // loads into memory
// A matrix as CSV (%.8g), under a header of its column names when `header` has them; whole or
// not at all (WriteError naming the file).
TT_API void write_csv(const std::filesystem::path& path, const at::Tensor& matrix,
                      const std::vector<std::string>& header = {});
// A CSV field as RFC 4180 writes it: quoted (its quotes doubled) when it holds a comma, a quote,
// CR or LF; as it is otherwise.
TT_API std::string csv_field(const std::string& text);

// What a .npy header says.
struct NpyHeader {
  std::string descr;                  // as written, e.g. "<f4"
  at::ScalarType dtype = at::kFloat;  // the tensor dtype of descr
  int64_t item_size = 4;              // bytes per element
  std::vector<int64_t> shape;
  bool fortran_order = false;
  int64_t data_offset = 0;  // bytes before the data: magic, version, length, header

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t data_bytes() const { return numel() * item_size; }
};

// Parses the header at the start of `bytes` (a file's first bytes; `name` is the file named
// in errors). Throws tt::ConfigError for a bad magic, an unsupported version, a malformed or
// cut-off header, a big-endian or structured dtype, or a dtype tt has no tensor type for.
// Fortran order is reported (fortran_order), not refused.
TT_API NpyHeader parse_npy_header(std::string_view bytes, const std::string& name);
// Reads and parses the header of `path`, and checks that the file holds all the data the
// header promises (a truncated file is a ConfigError naming both sizes).
TT_API NpyHeader read_npy_header(const std::filesystem::path& path);
// The header bytes of an array (magic to newline, padded so the data start 64-byte aligned).
TT_API std::string npy_header_bytes(at::ScalarType dtype, const std::vector<int64_t>& shape);

// A .npy file mapped read-only: the data are the file's pages (page cache, shared, dropped
// under memory pressure), not the process's anonymous memory.
class TT_API NpyMap {
 public:
  explicit NpyMap(const std::filesystem::path& path);  // read_npy_header's checks, then mmap
  ~NpyMap();
  NpyMap(const NpyMap&) = delete;
  NpyMap& operator=(const NpyMap&) = delete;

  const NpyHeader& header() const { return header_; }
  const std::filesystem::path& path() const { return path_; }
  const char* data() const { return base_ + header_.data_offset; }
  // Drops the pages covering [p, p+bytes) from this process's resident set (they stay in the
  // page cache): data read once per epoch then costs no RSS until it is read again.
  void release(const char* p, size_t bytes) const;
  // Starts reading [p, p+bytes) from disk without waiting (MADV_WILLNEED): a batch's rows are
  // requested together, so a file larger than memory is read with many I/Os in flight rather
  // than one page fault at a time.
  void will_need(const char* p, size_t bytes) const;

 private:
  void advise(const char* p, size_t bytes, int advice) const;
  std::filesystem::path path_;
  NpyHeader header_;
  const char* base_ = nullptr;
  size_t length_ = 0;
};

// Writes one array of a shape known up front, in blocks of rows: the header first, then
// append() the rows in order; close() checks that shape[0] rows arrived. The data go to
// "<path>.partial", renamed to `path` by close(), so `path` only ever holds a whole array;
// destroyed without close() (an error on the way), the partial file is removed.
class TT_API NpyWriter {
 public:
  NpyWriter(std::filesystem::path path, at::ScalarType dtype, std::vector<int64_t> shape);
  ~NpyWriter();
  NpyWriter(const NpyWriter&) = delete;
  NpyWriter& operator=(const NpyWriter&) = delete;

  // `rows`: [r, shape[1], ...] of the writer's dtype (made contiguous here).
  void append(const at::Tensor& rows);
  // `rows` rows of raw little-endian data of the writer's dtype.
  void append(const void* data, int64_t rows);
  void close();

  int64_t rows_written() const { return rows_; }
  int64_t bytes_written() const { return bytes_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_, partial_;
  at::ScalarType dtype_;
  std::vector<int64_t> shape_;
  int64_t row_bytes_ = 0;
  int64_t rows_ = 0;
  int64_t bytes_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace tt
