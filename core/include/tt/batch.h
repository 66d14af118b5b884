#pragma once
// A batch is a few named tensors that share their first dimension (the examples).
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "tt/export.h"

namespace tt {

struct TT_API Batch {
  std::map<std::string, at::Tensor> tensors;
  int64_t size = 0;  // number of examples (rows of every tensor)

  const at::Tensor& at(const std::string& name) const;  // error lists the names present
  bool has(const std::string& name) const { return tensors.count(name) > 0; }
  void set(const std::string& name, at::Tensor t);
  // Rows [begin, end) of every tensor: the micro-batches of gradient accumulation.
  Batch slice(int64_t begin, int64_t end) const;
  Batch to(const at::Device& device) const;
};

}  // namespace tt
