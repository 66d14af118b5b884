#pragma once
// AdamW with the update fused into one pass over memory.
//
// LibTorch's AdamW makes about ten passes over every parameter per step (separate
// mul_, add_, addcmul_, sqrt, div, add_, addcdiv_ kernels). For models whose step is
// dominated by the optimizer (the topic model updates every row of L each step) one
// vectorized, multi-threaded pass is several times faster. Same state layout as
// torch::optim::AdamW (exp_avg, exp_avg_sq, step), so checkpoints are interchangeable, and
// the same arithmetic, so results agree to float rounding.
//
// Sparse gradients (COO, rows of a 2-D parameter) get a lazy update, as torch's SparseAdam:
// only the rows present have their moments, weight decay and values updated. A parameter
// marked with dense_rows() instead gets AdamW's dense semantics from a sparse gradient: the
// absent rows have gradient zero and every row is updated, exactly as if the zeros had been
// materialized (bitwise: the same arithmetic with g = 0), without the n-row gradient tensor.
// Anything else the kernel does not cover (non-float32, non-contiguous, amsgrad, CUDA)
// falls back to torch::optim::AdamW's own step for that parameter group.
#include <torch/optim/adamw.h>

#include <set>

#include "tt/export.h"

namespace tt {

class TT_API FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  // Sparse gradients of `p` (a 2-D float32 parameter) mean "zero in the other rows".
  void dense_rows(const torch::Tensor& p);
  bool has_dense_rows(const torch::Tensor& p) const;

 private:
  torch::optim::AdamWParamState& state_of(const torch::Tensor& p);
  std::set<const void*> dense_rows_;  // TensorImpl of parameters marked with dense_rows()
};

}  // namespace tt
