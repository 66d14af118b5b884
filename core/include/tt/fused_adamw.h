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
// only the rows present have their moments, weight decay and values updated.
// Anything else the kernel does not cover (non-float32, non-contiguous, amsgrad, CUDA)
// falls back to torch::optim::AdamW's own step for that parameter group.
#include <torch/optim/adamw.h>

#include "tt/export.h"

namespace tt {

class TT_API FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  torch::optim::AdamWParamState& state_of(const torch::Tensor& p);
};

}  // namespace tt
