#include "source_pt.h"

#include <fstream>
#include <iterator>

#include "tt/checkpoint.h"
#include "tt/error.h"

namespace tt::topic {

torch::Tensor read_pt_counts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TT_CHECK_AS(ConfigError, in.good(), "cannot open ", describe_path(path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TT_CHECK_AS(ConfigError, !in.bad(), path, ": read failed");
  const auto starts = [&](const char* magic, size_t n) {
    return bytes.size() >= n && std::equal(magic, magic + n, bytes.begin());
  };
  if (!starts("PK\x03\x04", 4)) {
    if (starts("\x80", 1) || starts("\x8a\x0a\x6c\xfc", 4))
      TT_FAIL_AS(ConfigError, path,
                 ": this is the legacy (non-zip) torch.save format; save it again with "
                 "torch.save(X, path) in PyTorch 1.6 or later (or convert X to .npy for topic-npy)");
    TT_FAIL_AS(ConfigError, path,
               ": not a .pt file (not a zip archive as torch.save writes); save the document-term "
               "matrix with torch.save(X, path), or use topic-npy for a .npy file");
  }
  if (const std::string damage = archive_damage(path); !damage.empty())
    TT_FAIL_AS(ConfigError, path, ": the archive is damaged (", damage, "); save it again with torch.save(X, path)");
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    TT_FAIL_AS(ConfigError, path, ": cannot unpickle the tensor: ", e.what_without_backtrace(),
               " (topic-pt reads one dense tensor saved with torch.save(X, path), not a dict or a model's state; "
               "save a sparse matrix as X.to_dense(), or with scipy.io.mmwrite for topic-mtx)");
  }
  TT_CHECK_AS(ConfigError, value.isTensor(), path, ": holds a ", value.tagKind(),
              ", not a tensor; save the document-term matrix alone: torch.save(X, path)");
  torch::Tensor t = value.toTensor();
  TT_CHECK_AS(ConfigError, t.layout() == torch::kStrided, path,
              ": the tensor is sparse; save X.to_dense(), or the "
              "matrix with scipy.io.mmwrite for topic-mtx");
  TT_CHECK_AS(ConfigError, t.dim() == 2, path, ": expected a 2-D documents x terms tensor, it has ", t.dim(),
              " dimension(s) (shape ", t.sizes(), ")");
  TT_CHECK_AS(ConfigError,
              (t.is_floating_point() || c10::isIntegralType(t.scalar_type(), /*includeBool=*/false)) && !t.is_complex(),
              path, ": the tensor is ", t.scalar_type(), "; counts must be a float or integer tensor");
  TT_CHECK_AS(ConfigError, t.size(0) >= 1 && t.size(1) >= 1, path, ": the matrix is empty (shape ", t.sizes(), ")");
  t = t.to(torch::kCPU).to(torch::kFloat).contiguous();
  check_count_rows(t, path);
  return t;
}

Schema pt_schema() {
  Schema s;
  s.add("path", Type::String, "~", "a .pt file holding one documents x terms tensor (torch.save(X, path))");
  add_batch_format_option(s);
  return add_reference_options(s);
}

Datasets make_pt(const Options& o, uint64_t) {
  const std::string path = o.get_string("path");
  o.check(std::filesystem::exists(path), "path", "names no such file " + describe_path(path));
  return file_source(o, std::make_shared<PtDataset>(path));
}

}  // namespace tt::topic
