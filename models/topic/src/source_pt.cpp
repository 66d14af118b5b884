#include "source_pt.h"

#include <fstream>

#include "tt/error.h"
#include "tt/torch_save.h"

namespace tt::topic {

torch::Tensor read_pt_counts(const std::string& path) {
  TT_CHECK_AS(ConfigError, std::ifstream(path, std::ios::binary).good(), "cannot open ", describe_path(path));
  const c10::IValue value = read_torch_save(path,
                                            "topic-pt reads one dense documents x terms tensor saved with "
                                            "torch.save(X, path); save a sparse matrix as X.to_dense(), or with "
                                            "scipy.io.mmwrite for topic-mtx, or X as .npy for topic-npy");
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
