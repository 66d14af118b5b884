#include "tt/npy.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "mapping_guard.h"
#include "tt/error.h"
#include "tt/report.h"

namespace tt {

namespace {

struct DtypeInfo {
  const char* descr;  // little-endian (or byte-order free) form
  at::ScalarType type;
  int64_t size;
};

constexpr DtypeInfo kNpyDtypes[] = {
    {"<f4", at::kFloat, 4}, {"<f8", at::kDouble, 8}, {"<i8", at::kLong, 8},
    {"<i4", at::kInt, 4},   {"<i2", at::kShort, 2},  {"|u1", at::kByte, 1},
    {"|i1", at::kChar, 1},  {"|b1", at::kBool, 1},   {"<f2", at::kHalf, 2},
};

const DtypeInfo* dtype_of(at::ScalarType t) {
  for (const auto& d : kNpyDtypes)
    if (d.type == t) return &d;
  return nullptr;
}

const DtypeInfo* dtype_of(std::string descr) {
  // '=' (native, little-endian here) and '<' are the same; one-byte types may carry either.
  if (descr.size() >= 2 && (descr[0] == '=' || descr[0] == '<' || descr[0] == '|')) {
    for (const auto& d : kNpyDtypes)
      if (descr.substr(1) == d.descr + 1) return &d;
  }
  return nullptr;
}

std::string supported_dtypes() {
  std::string s;
  for (const auto& d : kNpyDtypes) s += (s.empty() ? "" : ", ") + std::string(d.descr);
  return s;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') break;
      std::string key = quoted();
      expect(':');
      skip();
      if (key == "descr") {
        if (peek() == '[') fail("a structured dtype (a list of fields) is not supported; save a plain numeric array");
        h.descr = quoted();
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        have_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      skip();
      if (peek() == ',') ++pos_;
    }
    if (!have_descr || !have_order || !have_shape)
      fail(std::string("missing '") + (!have_descr ? "descr" : !have_order ? "fortran_order" : "shape") + "'");
    // The data must be addressable: a shape whose byte count overflows 64 bits cannot be a file's.
    int64_t bytes = h.item_size;
    for (int64_t d : h.shape)
      if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes)) {
        std::string dims;
        for (int64_t x : h.shape) dims += (dims.empty() ? "" : ", ") + std::to_string(x);
        TT_FAIL_AS(ConfigError, name_, ": not a valid .npy file: its shape (", dims,
                   ") is more data than any file holds; write it with numpy.save");
      }
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    TT_FAIL_AS(ConfigError, name_, ": not a valid .npy file: malformed header (", what, " at character ", pos_,
               " of \"", std::string(s_.substr(0, 120)), "\"); write it with numpy.save");
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  char peek() {
    skip();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string quoted() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    skip();
    for (bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (peek() != ')') {
      if (!std::isdigit(static_cast<unsigned char>(s_[pos_]))) fail("expected a dimension");
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (v > (int64_t{1} << 50)) fail("dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 longs
      dims.push_back(v);
      if (peek() == ',') ++pos_;
    }
    ++pos_;
    return dims;
  }

  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string npy_header_bytes(at::ScalarType dtype, const std::vector<int64_t>& shape) {
  const DtypeInfo* d = dtype_of(dtype);
  TT_CHECK(d, "write_npy: dtype ", dtype, " has no .npy equivalent; convert to float first");
  std::string dims = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    dims += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  dims += ")";
  std::string header = std::string("{'descr': '") + d->descr + "', 'fortran_order': False, 'shape': " + dims + ", }";
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string out("\x93NUMPY\x01\x00", 8);
  TT_CHECK(header.size() <= 65535, "write_npy: header too long");
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(len >> 8));
  return out + header;
}

NpyHeader parse_npy_header(std::string_view bytes, const std::string& name) {
  if (!(bytes.size() >= 10 && bytes.substr(0, 6) == std::string_view("\x93NUMPY", 6))) {
    // what it is instead, where that is plain: a zip archive (.npz, torch.save), or text (a CSV)
    const bool zip = bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4);
    const bool text = !bytes.empty() && bytes.find('\0') == std::string_view::npos;
    TT_FAIL_AS(ConfigError, name, ": not a .npy file (it does not start with the NumPy magic \\x93NUMPY", zip ?
               "; it is a zip archive: an .npz of numpy.savez or scipy.sparse.save_npz, or a torch.save file" : text ?
               "; it is text, a CSV perhaps" : "", "); write the array with numpy.save",
               zip || text ? " (a sparse matrix: scipy.io.mmwrite's Matrix Market file, which data: topic-mtx reads)" : "");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  TT_CHECK_AS(ConfigError, major >= 1 && major <= 3, name, ": .npy format version ", major, ".",
              static_cast<int>(static_cast<unsigned char>(bytes[7])), " is not supported (1.0 to 3.0 are)");
  const auto b = [&](size_t i) { return static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])); };
  uint64_t hlen = 0;
  int64_t prefix = 0;
  if (major == 1) {
    hlen = b(8) | b(9) << 8;
    prefix = 10;
  } else {
    TT_CHECK_AS(ConfigError, bytes.size() >= 12, name, ": .npy file cut off inside its header");
    hlen = b(8) | b(9) << 8 | b(10) << 16 | b(11) << 24;
    prefix = 12;
  }
  TT_CHECK_AS(ConfigError, bytes.size() >= prefix + hlen, name, ": .npy file cut off inside its header (", hlen,
              " header bytes announced, ", bytes.size() - prefix, " present)");
  std::string_view text = bytes.substr(prefix, hlen);
  NpyHeader h = HeaderParser(text, name).parse();
  h.data_offset = prefix + static_cast<int64_t>(hlen);
  if (h.descr.size() >= 2 && h.descr[0] == '>' && h.descr.substr(1) != "u1" && h.descr.substr(1) != "i1")
    TT_FAIL_AS(ConfigError, name, ": dtype '", h.descr,
               "' is big-endian; convert it to little-endian first (numpy: a.astype(a.dtype.newbyteorder('<')))");
  const DtypeInfo* d = dtype_of(h.descr);
  if (!d && h.descr.size() == 3 && h.descr[0] == '>') d = dtype_of("|" + h.descr.substr(1));
  TT_CHECK_AS(ConfigError, d, name, ": dtype '", h.descr, "' is not supported (supported: ", supported_dtypes(),
              "); convert it first, e.g. a.astype(numpy.float32) or, for counts that fit, a.astype(numpy.int32)");
  h.dtype = d->type;
  h.item_size = d->size;
  return h;
}

NpyHeader read_npy_header(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  TT_CHECK_AS(ConfigError, in.good(), path.string(), ": cannot open .npy file (",
              std::filesystem::exists(path) ? "not readable" : "no such file", ")");
  std::string head(12, '\0');
  in.read(head.data(), 12);
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.size() >= 10 && head.compare(0, 6, "\x93NUMPY") == 0) {
    const auto b = [&](size_t i) { return static_cast<uint64_t>(static_cast<unsigned char>(head[i])); };
    uint64_t hlen = head[6] == 1        ? (b(8) | b(9) << 8)
                    : head.size() >= 12 ? (b(8) | b(9) << 8 | b(10) << 16 | b(11) << 24)
                                        : 0;
    // Never more than the file holds: a header length in a damaged file must not cost 16 MiB.
    std::error_code size_ec;
    const uintmax_t file_bytes = std::filesystem::file_size(path, size_ec);
    const uint64_t left = size_ec || file_bytes < head.size() ? 0 : file_bytes - head.size();
    hlen = std::min<uint64_t>({hlen, left, uint64_t{1} << 24});
    std::string rest(hlen, '\0');
    in.read(rest.data(), static_cast<std::streamsize>(hlen));
    rest.resize(static_cast<size_t>(in.gcount()));
    head += rest;
  }
  NpyHeader h = parse_npy_header(head, path.string());
  std::error_code ec;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  TT_CHECK_AS(ConfigError, !ec, path.string(), ": cannot read the file size: ", ec.message());
  TT_CHECK_AS(ConfigError, size >= h.data_offset + h.data_bytes(), path.string(), ": file is truncated: its header ",
              "promises ", h.data_bytes(), " data bytes after ", h.data_offset, " header bytes, the file has ", size,
              " bytes in all; write it again (an interrupted copy or save?)");
  return h;
}

void write_npy(const std::filesystem::path& path, const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
  const std::string header = npy_header_bytes(t.scalar_type(), t.sizes().vec());
  std::ofstream out(path, std::ios::binary);
  TT_CHECK_AS(WriteError, out.good(), "cannot write ", path.string(), ": ", errno_text());
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  out.close();  // the buffered tail is written here: a full disk shows now, not in a destructor
  if (!out) {
    std::remove(path.c_str());
    TT_FAIL_AS(WriteError, "write to ", path.string(), " failed (disk full?); the partial file was removed");
  }
}

at::Tensor read_npy(const std::filesystem::path& path) {
  const NpyHeader h = read_npy_header(path);
  TT_CHECK_AS(ConfigError, !h.fortran_order, path.string(),
              ": Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  at::Tensor t = at::empty(h.shape, at::TensorOptions().dtype(h.dtype));
  std::ifstream in(path, std::ios::binary);
  in.seekg(h.data_offset);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  TT_CHECK(in.gcount() == static_cast<std::streamsize>(t.nbytes()), path.string(), ": file is truncated (expected ",
           t.nbytes(), " data bytes)");
  return t;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string q = "\"";
  for (char c : text) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void write_csv(const std::filesystem::path& path, const at::Tensor& matrix, const std::vector<std::string>& header) {
  const at::Tensor t = matrix.detach().to(at::kCPU).to(at::kDouble).contiguous();
  TT_CHECK(t.dim() == 2, "write_csv: expected a matrix");
  TT_CHECK(header.empty() || t.size(1) == static_cast<int64_t>(header.size()), "write_csv: ", header.size(),
           " column names for a matrix of ", t.sizes());
  std::string text;
  for (size_t j = 0; j < header.size(); ++j) text += (j ? "," : "") + csv_field(header[j]);
  if (!header.empty()) text += '\n';
  const double* d = t.data_ptr<double>();
  char buf[32];
  for (int64_t i = 0; i < t.size(0); ++i) {
    for (int64_t j = 0; j < t.size(1); ++j) {
      std::snprintf(buf, sizeof buf, j ? ",%.8g" : "%.8g", d[i * t.size(1) + j]);
      text += buf;
    }
    text += '\n';
  }
  write_file_atomic(path, text);
}

// ---- NpyMap

NpyMap::NpyMap(const std::filesystem::path& path) : path_(path), header_(read_npy_header(path)) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TT_CHECK_AS(ConfigError, fd >= 0, path.string(), ": cannot open: ", errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    TT_FAIL_AS(ConfigError, path.string(), ": cannot stat: ", why);
  }
  length_ = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, length_, PROT_READ, MAP_SHARED, fd, 0);
  const std::string why = p == MAP_FAILED ? errno_text() : "";
  ::close(fd);  // the mapping keeps the file open
  TT_CHECK(p != MAP_FAILED, path.string(), ": cannot memory-map ", length_, " bytes: ", why);
  base_ = static_cast<const char*>(p);
  watch_mapping(base_, length_, path.string());
  // Batches read rows in shuffled order: the kernel's read-around on a fault (pages beside the
  // row, which belong to other documents) only evicts useful pages when the file exceeds memory.
  ::madvise(p, length_, MADV_RANDOM);
}

void NpyMap::advise(const char* p, size_t bytes, int advice) const {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base_), hi = lo + length_;
  begin = std::max(begin, lo & ~(page - 1));
  end = std::min(end, (hi + page - 1) & ~(page - 1));
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

void NpyMap::release(const char* p, size_t bytes) const { advise(p, bytes, MADV_DONTNEED); }

void NpyMap::will_need(const char* p, size_t bytes) const { advise(p, bytes, MADV_WILLNEED); }

NpyMap::~NpyMap() {
  if (!base_) return;
  unwatch_mapping(base_);
  ::munmap(const_cast<char*>(base_), length_);
}

// ---- NpyWriter

NpyWriter::NpyWriter(std::filesystem::path path, at::ScalarType dtype, std::vector<int64_t> shape)
    : path_(std::move(path)), dtype_(dtype), shape_(std::move(shape)) {
  TT_CHECK(!shape_.empty(), "NpyWriter: ", path_.string(), ": an array written in rows needs at least one dimension");
  const DtypeInfo* d = dtype_of(dtype_);
  TT_CHECK(d, "NpyWriter: dtype ", dtype_, " has no .npy equivalent");
  row_bytes_ = d->size;
  for (size_t i = 1; i < shape_.size(); ++i) row_bytes_ *= shape_[i];
  partial_ = path_;
  partial_ += ".partial";
  file_ = std::fopen(partial_.c_str(), "wb");
  TT_CHECK_AS(ConfigError, file_, "cannot write ", partial_.string(), ": ", errno_text());
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
  const std::string header = npy_header_bytes(dtype_, shape_);
  if (std::fwrite(header.data(), 1, header.size(), file_) != header.size()) {
    const std::string why = errno_text();
    std::fclose(file_);
    file_ = nullptr;
    std::remove(partial_.c_str());
    TT_FAIL("write to ", partial_.string(), " failed: ", why);
  }
  bytes_ = static_cast<int64_t>(header.size());
}

NpyWriter::~NpyWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(partial_.c_str());
  }
}

void NpyWriter::append(const at::Tensor& rows) {
  TT_CHECK(rows.scalar_type() == dtype_, "NpyWriter ", path_.string(), ": rows are ", rows.scalar_type(),
           ", the array is ", dtype_);
  TT_CHECK(rows.dim() == static_cast<int64_t>(shape_.size()), "NpyWriter ", path_.string(), ": rows have ", rows.dim(),
           " dimensions, the array ", shape_.size());
  for (size_t i = 1; i < shape_.size(); ++i)
    TT_CHECK(rows.size(static_cast<int64_t>(i)) == shape_[i], "NpyWriter ", path_.string(), ": rows have size ",
             rows.size(static_cast<int64_t>(i)), " in dimension ", i, ", the array ", shape_[i]);
  at::Tensor t = rows.to(at::kCPU).contiguous();
  append(t.data_ptr(), t.size(0));
}

void NpyWriter::append(const void* data, int64_t rows) {
  TT_CHECK(file_, "NpyWriter ", path_.string(), ": append after close");
  TT_CHECK(rows >= 0 && rows_ + rows <= shape_[0], "NpyWriter ", path_.string(), ": ", rows_ + rows,
           " rows appended, the array has ", shape_[0]);
  const size_t n = static_cast<size_t>(rows * row_bytes_);
  TT_CHECK_AS(WriteError, n == 0 || std::fwrite(data, 1, n, file_) == n, "write to ", partial_.string(),
              " failed: ", errno_text(), " (disk full?)");
  rows_ += rows;
  bytes_ += static_cast<int64_t>(n);
}

void NpyWriter::close() {
  TT_CHECK(file_, "NpyWriter ", path_.string(), ": closed twice");
  TT_CHECK(rows_ == shape_[0], "NpyWriter ", path_.string(), ": ", rows_, " rows written, the header promises ",
           shape_[0], "; the partial file is removed");
  const bool ok = std::fflush(file_) == 0;
  const std::string why = ok ? "" : errno_text();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) {
    std::remove(partial_.c_str());
    TT_FAIL("write to ", partial_.string(), " failed: ", why.empty() ? errno_text() : why, " (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  TT_CHECK(!ec, "cannot rename ", partial_.string(), " to ", path_.string(), ": ", ec.message());
}

}  // namespace tt
