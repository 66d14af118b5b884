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
//
// defer_rows() goes further for such a parameter: the zero-gradient updates of the absent
// rows are not applied step by step but accumulated as per-step coefficients and applied in
// closed form when a row is next needed (catch_up_rows, before a forward reads it) and for
// all rows every kDeferWindow steps and at flush() (before anything reads the whole
// parameter or the optimizer state: evaluation, checkpoints, outputs). Over s zero-gradient
// steps m and v only decay (b1^s, b2^s) and the parameter follows
//   p_s = p_0 D + (m_0 / sqrt(v_0)) (K0 - e K1 + e^2 K2),  e = eps / sqrt(v_0),
// with D, K0..K2 scalars of the recorded learning rates and bias corrections (the series in
// e is AdamW's eps expanded to third order; elements whose eps is not small against
// sqrt(v) -- e > a/256 -- take the step-by-step loop instead). The result agrees with the
// dense update to float rounding (not bitwise), at a cost of O(rows touched) per step
// instead of O(all rows): the topic model's n x k document matrix no longer bounds its step.
// Anything else the kernel does not cover (non-float32, non-contiguous, amsgrad, CUDA)
// falls back to torch::optim::AdamW's own step for that parameter group.
#include <torch/optim/adamw.h>

#include <map>
#include <memory>
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
  // dense_rows() with the absent rows' updates deferred (see above).
  void defer_rows(const torch::Tensor& p);
  // Bring `rows` (int64 indices, repeats allowed) of a deferred parameter up to date.
  void catch_up_rows(const torch::Tensor& p, const torch::Tensor& rows);
  // Bring every deferred parameter up to date (parameters and optimizer state).
  void flush();
  // For a model that trains a step itself (Model::fused_step), without gradient tensors and
  // with the arithmetic of step() (the same rounding):
  struct Coefficients {
    float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, neg_step_size;
  };
  // True when p is a parameter of this optimizer that these calls cover (contiguous float32 on
  // the CPU, its group without amsgrad).
  bool fusable(const torch::Tensor& p) const;
  // One step of a dense parameter whose gradient comes a block of elements at a time:
  // begin_dense_step advances p's step count, then apply() for every element once (blocks
  // may be applied from several threads when they do not overlap).
  class DenseStep {
   public:
    // Elements [begin, begin + count) of p (flat) take the gradient g[0..count).
    void apply(int64_t begin, const float* g, int64_t count) const;

   private:
    friend class FusedAdamW;
    Coefficients c_{};
    float *p_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  };
  DenseStep begin_dense_step(const torch::Tensor& p);
  // One step of a 2-D parameter marked with defer_rows() or dense_rows() whose gradient is zero
  // outside `rows` (ascending, distinct): g holds those rows' gradients, count x p.size(1).
  void step_rows(const torch::Tensor& p, const int64_t* rows, const float* g, int64_t count);
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  static constexpr int64_t kDeferWindow = 128;  // steps between full catch-ups

 private:
  torch::optim::AdamWParamState& state_of(const torch::Tensor& p);
  const torch::optim::AdamWOptions* options_of(const torch::Tensor& p) const;  // its group's, or null
  struct Deferred;
  void rows_step(const torch::Tensor& p, Deferred* d, const int64_t* rows, const float* g, int64_t count,
                 const Coefficients& c);
  std::set<const void*> dense_rows_;  // TensorImpl of parameters marked with dense_rows()
  std::map<const void*, std::shared_ptr<Deferred>> deferred_;  // parameters marked with defer_rows()
  Deferred* deferred_of(const torch::Tensor& p);
  void flush_one(Deferred& d);
  void catch_up_row(Deferred& d, int64_t row, float* p, float* m, float* v, int64_t width);
};

}  // namespace tt
