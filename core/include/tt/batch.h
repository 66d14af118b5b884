#pragma once
// A batch is a few named tensors that share their first dimension (the examples), plus,
// for sparse data, "entry" tensors in coordinate form: one row per non-zero, with an int64
// tensor giving each entry's example (e.g. rows/cols/vals of a document-term batch).
#include <ATen/core/Tensor.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tt/export.h"

namespace tt {

struct TT_API Batch {
  std::map<std::string, at::Tensor> tensors;
  int64_t size = 0;  // number of examples (rows of every per-example tensor)
  std::string entry_row_key;           // int64 tensor: the example of each entry ("" = none)
  std::set<std::string> entry_keys;    // tensors with one row per entry (entry_row_key among them)

  const at::Tensor& at(const std::string& name) const;  // error lists the names present
  bool has(const std::string& name) const { return tensors.count(name) > 0; }
  void set(const std::string& name, at::Tensor t);  // a per-example tensor
  // Coordinate-form entries: `row_key` names the int64 example index of each entry.
  void set_entries(const std::string& row_key, std::map<std::string, at::Tensor> entries);
  // Examples [begin, end): rows of every per-example tensor and the entries of those examples
  // (their example index shifted by -begin): the micro-batches of gradient accumulation.
  Batch slice(int64_t begin, int64_t end) const;
  Batch to(const at::Device& device) const;
};

}  // namespace tt
