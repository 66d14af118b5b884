#pragma once
// An optimizer whose per-parameter state is a few tensors it updates in place. Plugins may move
// those tensors (offload puts them in a memory-mapped file): the optimizer must then keep using
// the tensor it is given. torch's Adam/AdamW (and tt's FusedAdamW) need not implement this:
// their states are known types (exp_avg, exp_avg_sq, max_exp_avg_sq).
#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <vector>

#include "tt/export.h"

namespace tt {

class TT_API StateTensors {
 public:
  virtual ~StateTensors();
  // The state tensors of `p`, empty before its first step. Each may be replaced (through the
  // pointer) by a tensor of the same shape, dtype and contents.
  virtual std::vector<at::Tensor*> state_tensors(const at::Tensor& p) = 0;
};

// An optimizer whose step() updates each parameter of its groups from that parameter's gradient,
// options and state alone, so that one parameter can be stepped as soon as its gradient is ready
// (tt::step_parameter, the optimizer step in backward: tt/extension.h, 11). Deriving from it
// declares so. LibTorch's SGD, Adam, AdamW, Adagrad and RMSprop (and tt's FusedAdamW) are such
// optimizers without deriving from it; LBFGS, and a wrapper whose step() does more than step its
// groups' parameters (offload's, zero1's), are not.
class TT_API PerParameterStep {
 public:
  virtual ~PerParameterStep();
};

// The parameter groups of `opt`: the same parameters, copies of its options. What an optimizer
// that wraps another (offload's, zero1's, adam8bit's) is constructed with.
TT_API std::vector<torch::optim::OptimizerParamGroup> param_groups_of(torch::optim::Optimizer& opt);

}  // namespace tt
