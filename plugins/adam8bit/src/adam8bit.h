#pragma once
// Adam / AdamW with 8-bit block-wise quantized moments (quant.h) on CPU.
//
// Parameters with at least `min_8bit_size` elements (and not listed as 32-bit, e.g. the
// embeddings when asked) keep their two moments as bytes plus one float32 absmax per 256;
// the others keep float32 moments and take torch's AdamW arithmetic. One fused pass per
// block: dequantize, update moments and parameter, requantize (tt::parallel_for over
// blocks). The state is allocated as tensors (the meter counts it) on the first step of
// each parameter and saved and loaded with the optimizer (save/load).
#include <torch/optim/optimizer.h>

#include <set>
#include <string>
#include <vector>

#include "tt/optimizer_state.h"

namespace tt::adam8bit {

struct Coeffs;  // quant.h

struct Config {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = true;        // AdamW; false: Adam's L2 penalty added to the gradient
  int64_t min_8bit_size = 4096;  // smaller tensors keep float32 moments
};

class Adam8bit : public torch::optim::Optimizer, public tt::StateTensors, public tt::PerParameterStep {
 public:
  // `groups`: the parameter groups (their options' lr is what the schedule sets);
  // `keep_32bit`: TensorImpl addresses of parameters that keep float32 moments.
  Adam8bit(std::vector<torch::optim::OptimizerParamGroup> groups, Config config,
           std::set<const void*> keep_32bit = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  struct ParamState {
    int64_t step = 0;
    bool eight_bit = false;
    torch::Tensor q1, q2, absmax1, absmax2;  // 8-bit: uint8 moments, float32 absmax per block
    torch::Tensor m, v;                      // 32-bit moments
    bool initialized() const { return q1.defined() || m.defined(); }
  };
  // The state of `p` (nullptr before its first step).
  const ParamState* state_of(const torch::Tensor& p) const;
  // tt::StateTensors: q1, q2, absmax1, absmax2 (8-bit) or m, v (32-bit).
  std::vector<at::Tensor*> state_tensors(const at::Tensor& p) override;
  // Bytes of optimizer state held now (all parameters).
  int64_t state_bytes() const;
  const Config& config() const { return config_; }

 private:
  ParamState& state_for(const torch::Tensor& p);
#if TT_ADAM8BIT_CUDA
  void step_cuda(const torch::Tensor& p, const torch::Tensor& g, ParamState& st, const Coeffs& c);
#endif
  std::vector<const void*> order() const;  // parameters in group order (the archive's indices)

  Config config_;
  std::set<const void*> keep_32bit_;
  std::map<const void*, ParamState> states_;
};

}  // namespace tt::adam8bit
