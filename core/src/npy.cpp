#include "tt/npy.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <regex>

#include "tt/error.h"

namespace tt {

static const char* descr_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "<f4";
    case at::kDouble: return "<f8";
    case at::kLong: return "<i8";
    case at::kInt: return "<i4";
    case at::kShort: return "<i2";
    case at::kByte: return "|u1";
    case at::kChar: return "|i1";
    case at::kBool: return "|b1";
    case at::kHalf: return "<f2";
    default: TT_FAIL("write_npy: dtype ", t, " has no .npy equivalent; convert to float first");
  }
}

void write_npy(const std::filesystem::path& path, const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
  std::string shape = "(";
  for (int64_t i = 0; i < t.dim(); ++i) shape += std::to_string(t.size(i)) + (t.dim() == 1 ? "," : (i + 1 < t.dim() ? ", " : ""));
  shape += ")";
  std::string header = std::string("{'descr': '") + descr_of(t.scalar_type()) + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary);
  TT_CHECK(out.good(), "cannot write ", path.string());
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  TT_CHECK(out.good(), "write to ", path.string(), " failed (disk full?)");
}

at::Tensor read_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  TT_CHECK(in.good(), path.string(), ": cannot open .npy file");
  char magic[8];
  in.read(magic, 8);
  TT_CHECK(in.good() && std::string(magic, 6) == "\x93NUMPY", path.string(), ": not a .npy file (bad magic)");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t l;
    in.read(reinterpret_cast<char*>(&l), 2);
    hlen = l;
  } else {
    in.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string header(hlen, '\0');
  in.read(header.data(), hlen);
  std::smatch m;
  TT_CHECK(std::regex_search(header, m, std::regex("'descr':\\s*'([^']+)'")), path.string(), ": no dtype in header");
  const std::string descr = m[1];
  TT_CHECK(header.find("'fortran_order': False") != std::string::npos, path.string(),
           ": Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  TT_CHECK(std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")), path.string(), ": no shape");
  std::vector<int64_t> shape;
  std::string dims = m[1];
  std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
    shape.push_back(std::stoll(it->str()));
  at::ScalarType st;
  if (descr == "<f4") st = at::kFloat;
  else if (descr == "<f8") st = at::kDouble;
  else if (descr == "<i8") st = at::kLong;
  else if (descr == "<i4") st = at::kInt;
  else if (descr == "<i2") st = at::kShort;
  else if (descr == "|u1") st = at::kByte;
  else if (descr == "|i1") st = at::kChar;
  else if (descr == "|b1") st = at::kBool;
  else TT_FAIL(path.string(), ": dtype '", descr, "' is not supported (use float32/float64/int)");
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(st));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  TT_CHECK(in.gcount() == static_cast<std::streamsize>(t.nbytes()), path.string(), ": file is truncated (expected ",
           t.nbytes(), " data bytes)");
  return t;
}

void write_csv(const std::filesystem::path& path, const at::Tensor& matrix) {
  at::Tensor t = matrix.detach().to(at::kCPU).to(at::kDouble).contiguous();
  TT_CHECK(t.dim() == 2, "write_csv: expected a matrix");
  std::FILE* f = std::fopen(path.c_str(), "w");
  TT_CHECK(f, "cannot write ", path.string());
  const double* d = t.data_ptr<double>();
  for (int64_t i = 0; i < t.size(0); ++i) {
    for (int64_t j = 0; j < t.size(1); ++j) std::fprintf(f, j ? ",%.8g" : "%.8g", d[i * t.size(1) + j]);
    std::fputc('\n', f);
  }
  std::fclose(f);
}

}  // namespace tt
