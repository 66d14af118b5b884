// safetensors (https://github.com/huggingface/safetensors): 8 bytes, the header's length N as a
// little-endian uint64; N bytes of JSON, {"name": {"dtype": "F32", "shape": [2, 3],
// "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}, padded with spaces to a
// multiple of 8; then the data section, each tensor's bytes row-major little-endian at
// [begin, end) relative to its start. The reader holds a file to every claim: offsets inside the
// data section, tensors tiling it with no gap or overlap, each byte range exactly its shape.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "atomic_file.h"
#include "tt/pread_file.h"
#include "tt/error.h"
#include "tt/weights.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian, as is this machine's");

namespace fs = std::filesystem;

namespace tt {
namespace {

constexpr uint64_t kMaxHeader = 100 << 20;  // as Hugging Face's reader: a larger header is not a real one

struct Dtype {
  const char* name;
  at::ScalarType type;
};
constexpr Dtype kSafetensorsDtypes[] = {{"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
                             {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
                             {"U8", at::kByte},    {"BOOL", at::kBool}};

std::string dtype_list() {
  std::string s;
  for (const auto& d : kSafetensorsDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}


struct Entry {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

}  // namespace

void write_safetensors(const fs::path& file, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const auto* d = std::find_if(std::begin(kSafetensorsDtypes), std::end(kSafetensorsDtypes),
                                 [&](const Dtype& x) { return x.type == c.scalar_type(); });
    TT_CHECK(d != std::end(kSafetensorsDtypes), "cannot write ", name, " to ", file.string(), ": safetensors has no ",
             c.scalar_type(), " (tt writes ", dtype_list(), ")");
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", d->name}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  std::error_code ec;  // a folder that cannot be made: AtomicFile's WriteError names the file
  if (!file.parent_path().empty()) fs::create_directories(file.parent_path(), ec);
  AtomicFile out(file);
  out.write(len, 8);
  out.write(text.data(), text.size());
  for (const auto& c : data) out.write(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  out.commit("cannot write", "(disk full? nothing was written there)");
}

NamedTensors read_safetensors(const fs::path& file, std::map<std::string, std::string>* metadata) {
  const std::string f = file.string();
  const std::string fix = "; write it again with safetensors' save_file (or tt's export)";
  detail::PreadFile in(file.string());
  TT_CHECK_AS(ConfigError, in.ok(), "cannot open ", f, ": ", std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(in.size());
  unsigned char len[8];
  TT_CHECK_AS(ConfigError, size >= 8 && in.read(0, len, 8), f, ": not a safetensors file: ", size,
              " bytes, shorter than the 8-byte header length it starts with", fix);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  TT_CHECK_AS(ConfigError, n <= size - 8, f, ": the safetensors header length (", n,
              " bytes) is larger than the file (", size, " bytes): the file is truncated or not safetensors", fix);
  TT_CHECK_AS(ConfigError, n <= kMaxHeader, f, ": the safetensors header length (", n,
              " bytes) is over the 100 MiB any real header takes: not a safetensors file", fix);
  std::string text(static_cast<size_t>(n), '\0');
  TT_CHECK_AS(ConfigError, in.read(8, text.data(), text.size()), f, ": cannot read its header: ", std::strerror(errno));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (const auto at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    TT_FAIL_AS(ConfigError, f, ": the safetensors header is not valid JSON (", what, ")", fix);
  }
  TT_CHECK_AS(ConfigError, header.is_object(), f, ": the safetensors header is JSON but not an object of tensors",
              fix);
  const uint64_t data_size = size - 8 - n;
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      bool strings = v.is_object();
      if (strings)
        for (const auto& m : v) strings = strings && m.is_string();
      TT_CHECK_AS(ConfigError, strings, f, ": __metadata__ must map strings to strings", fix);
      if (metadata)
        for (const auto& [k, m] : v.items()) (*metadata)[k] = m.get<std::string>();
      continue;
    }
    const std::string where = f + ": tensor '" + name + "'";
    TT_CHECK_AS(ConfigError, v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                where, " needs dtype, shape and data_offsets", fix);
    const auto& dt = v["dtype"];
    TT_CHECK_AS(ConfigError, dt.is_string(), where, ": dtype must be a string such as \"F32\"", fix);
    const auto* d = std::find_if(std::begin(kSafetensorsDtypes), std::end(kSafetensorsDtypes),
                                 [&](const Dtype& x) { return dt.get<std::string>() == x.name; });
    TT_CHECK_AS(ConfigError, d != std::end(kSafetensorsDtypes), where, " has dtype '", dt.get<std::string>(),
                "', which tt does not read (", dtype_list(), "); convert it to one of those");
    Entry e{name, d->type, {}, 0, 0};
    const auto& shape = v["shape"];
    TT_CHECK_AS(ConfigError, shape.is_array(), where, ": shape must be a list of sizes", fix);
    uint64_t numel = 1;
    for (const auto& s : shape) {
      TT_CHECK_AS(ConfigError, s.is_number_unsigned(), where, ": shape ", shape.dump(),
                  " must hold non-negative integers", fix);
      const uint64_t k = s.get<uint64_t>();
      TT_CHECK_AS(ConfigError, !__builtin_mul_overflow(numel, k, &numel) && numel <= size, where, ": shape ",
                  shape.dump(), " has more elements than the file holds bytes", fix);
      e.shape.push_back(static_cast<int64_t>(k));
    }
    const auto& off = v["data_offsets"];
    TT_CHECK_AS(ConfigError, off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                where, ": data_offsets must be [begin, end], two non-negative integers", fix);
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    TT_CHECK_AS(ConfigError, e.begin <= e.end, where, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin", fix);
    TT_CHECK_AS(ConfigError, e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end,
                "] run past the end of the data section (", data_size, " bytes): the file is truncated or its header lies",
                fix);
    const uint64_t bytes = numel * c10::elementSize(e.type);
    TT_CHECK_AS(ConfigError, e.end - e.begin == bytes, where, ": shape ", shape_text(e.shape), " of ", d->name,
                " needs ", bytes, " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, fix);
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const auto& e : entries) {
    TT_CHECK_AS(ConfigError, e.begin >= at, f, ": tensors '", prev ? prev->name : "", "' and '", e.name,
                "' overlap (data_offsets ", prev ? prev->end : 0, " and ", e.begin, "): the header lies", fix);
    TT_CHECK_AS(ConfigError, e.begin == at, f, ": ", e.begin - at, " bytes of the data section before tensor '", e.name,
                "' belong to no tensor (a gap at offset ", at, "): the header lies", fix);
    at = e.end;
    prev = &e;
  }
  TT_CHECK_AS(ConfigError, at == data_size, f, ": the last ", data_size - at, " bytes of the data section belong to no tensor",
              fix);
  NamedTensors out;
  for (const auto& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
    const uint64_t data = 8 + n + e.begin;
    TT_CHECK_AS(ConfigError, in.read(data, t.data_ptr(), e.end - e.begin), f, ": cannot read tensor '", e.name, "'");
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace tt
