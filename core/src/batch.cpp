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
  if (tensors.size() == entry_keys.size()) size = t.size(0);  // the first per-example tensor
  TT_CHECK(t.size(0) == size, "batch tensor '", name, "' has ", t.size(0), " rows, the batch has ", size);
  tensors[name] = std::move(t);
}

void Batch::set_entries(const std::string& row_key, std::map<std::string, at::Tensor> entries) {
  auto it = entries.find(row_key);
  TT_CHECK(it != entries.end(), "batch entries need their example index '", row_key, "'");
  const int64_t nnz = it->second.size(0);
  for (auto& [k, v] : entries) {
    TT_CHECK(v.size(0) == nnz, "batch entry tensor '", k, "' has ", v.size(0), " rows, '", row_key, "' has ", nnz);
    entry_keys.insert(k);
    tensors[k] = std::move(v);
  }
  entry_row_key = row_key;
}

Batch Batch::slice(int64_t begin, int64_t end) const {
  Batch b;
  b.size = end - begin;
  b.entry_row_key = entry_row_key;
  b.entry_keys = entry_keys;
  at::Tensor keep;
  if (!entry_row_key.empty()) {
    const at::Tensor& r = tensors.at(entry_row_key);
    keep = ((r >= begin) & (r < end)).nonzero().squeeze(1);
  }
  for (const auto& [k, v] : tensors) {
    if (!entry_keys.count(k)) {
      b.tensors[k] = v.slice(0, begin, end);
    } else {
      auto sel = v.index_select(0, keep);
      b.tensors[k] = k == entry_row_key ? sel - begin : sel;
    }
  }
  return b;
}

Batch Batch::to(const at::Device& device) const {
  Batch b = *this;
  for (auto& [k, v] : b.tensors) v = v.to(device);
  return b;
}

}  // namespace tt
