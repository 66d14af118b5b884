#pragma once
// Reads the model tensors of a tt checkpoint file (the "model" entry), by dotted name.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

namespace tt::test {

inline void collect_tensors(torch::serialize::InputArchive& ar, const std::string& prefix,
                            std::map<std::string, at::Tensor>& out) {
  for (const auto& k : ar.keys()) {
    at::Tensor t;
    torch::serialize::InputArchive sub;
    if (ar.try_read(k, t)) out[prefix + k] = t;
    else if (ar.try_read(k, sub)) collect_tensors(sub, prefix + k + ".", out);
  }
}

inline std::map<std::string, at::Tensor> checkpoint_params(const std::filesystem::path& file) {
  torch::serialize::InputArchive ar, model;
  ar.load_from(file.string());
  ar.read("model", model);
  std::map<std::string, at::Tensor> out;
  collect_tensors(model, "", out);
  return out;
}

}  // namespace tt::test
