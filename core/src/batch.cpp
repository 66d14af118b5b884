#include "tt/batch.h"

#include "tt/error.h"

namespace tt {

const at::Tensor& Batch::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    std::string have;
    for (const auto& [k, v] : tensors) have += (have.empty() ? "" : ", ") + k;
    TT_FAIL("batch has no tensor '", name, "' (it has: ", have, "): the dataset and the model do not match");
  }
  return it->second;
}

void Batch::set(const std::string& name, at::Tensor t) {
  if (tensors.empty()) size = t.size(0);
  TT_CHECK(t.size(0) == size, "batch tensor '", name, "' has ", t.size(0), " rows, the batch has ", size);
  tensors[name] = std::move(t);
}

Batch Batch::slice(int64_t begin, int64_t end) const {
  Batch b;
  b.size = end - begin;
  for (const auto& [k, v] : tensors) b.tensors[k] = v.slice(0, begin, end);
  return b;
}

Batch Batch::to(const at::Device& device) const {
  Batch b;
  b.size = size;
  for (const auto& [k, v] : tensors) b.tensors[k] = v.to(device);
  return b;
}

}  // namespace tt
