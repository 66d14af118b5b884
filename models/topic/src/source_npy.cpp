#include "source_npy.h"

#include <ATen/Parallel.h>

#include <cstring>

#include "tt/error.h"

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

}  // namespace

NpyDataset::NpyDataset(const std::string& path) : path_(path), map_(path) {
  const NpyHeader& h = map_.header();
  const auto t = h.dtype;
  TT_CHECK_AS(ConfigError, t == at::kFloat || t == at::kDouble || t == at::kInt || t == at::kLong, path_, ": dtype ",
              dtype_name(t), " ('", h.descr,
              "') is not supported for counts; topic-npy reads float32, float64, int32 and int64 "
              "(convert with X.astype(numpy.float32))");
  TT_CHECK_AS(ConfigError, !h.fortran_order, path_,
              ": the array is in Fortran (column-major) order; topic-npy reads rows and needs C order: "
              "save numpy.ascontiguousarray(X)");
  std::string shape;
  for (int64_t d : h.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  TT_CHECK_AS(ConfigError, h.shape.size() == 2, path_, ": expected a 2-D documents x terms matrix, the array has ",
              h.shape.size(), " dimension(s) (shape (", shape, "))");
  n_ = h.shape[0];
  m_ = h.shape[1];
  TT_CHECK_AS(ConfigError, n_ >= 1 && m_ >= 1, path_, ": the matrix is empty (shape (", shape, "))");
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
      switch (dtype) {
        case at::kFloat: std::memcpy(dst, src, static_cast<size_t>(row_bytes)); break;
        case at::kDouble: convert_row<double>(src, dst, m_); break;
        case at::kInt: convert_row<int32_t>(src, dst, m_); break;
        default: convert_row<int64_t>(src, dst, m_); break;
      }
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

std::string NpyDataset::describe() const {
  return path_ + " (memory-mapped " + dtype_name(map_.header().dtype) + "): " + std::to_string(n_) + " docs x " +
         std::to_string(m_) + " terms";
}

Schema npy_schema() {
  Schema s;
  s.add("path", Type::String, "~",
        "the documents x terms .npy (float32/float64/int32/int64, C order), e.g. from tt-data synth-topics");
  add_batch_format_option(s);
  return add_reference_options(s);
}

Datasets make_npy(const Options& o, uint64_t) {
  const std::string path = o.get_string("path");
  o.check(std::filesystem::exists(path), "path",
          "names no such file " + describe_path(path) +
              " (tt-data synth-topics --out DIR writes a synthetic corpus as DIR/X.npy)");
  return file_source(o, std::make_shared<NpyDataset>(path));
}

}  // namespace tt::topic
