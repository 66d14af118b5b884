#pragma once
// ZeRO-1: every rank keeps the optimizer state of its shard of the parameters only.
// Parameters are assigned whole to ranks (greedy by size, balanced), laid out per rank in
// one flat buffer padded to the largest shard. A step reduce-scatters the gradients (each
// rank receives the sum of its shard), steps the wrapped optimizer on that shard, and
// all-gathers the updated parameters, so every rank ends the step with the same parameters
// and ~1/world of the optimizer state. Gradient clipping happens on the summed shards (the
// trainer's clip_grad_norm_ would see each rank's partial gradient).
#include <torch/torch.h>

#include <memory>
#include <vector>

namespace tt::dist {
class Context;
}

namespace tt::zero1 {

class Zero1 : public torch::optim::Optimizer {
 public:
  // `inner`: the pipeline's optimizer over all trainable parameters; its groups are cut down
  // to this rank's shard (its state is created lazily at the first step, so only the shard's).
  Zero1(std::shared_ptr<torch::optim::Optimizer> inner, tt::dist::Context& ctx);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // Collective (every rank calls them): the archive of rank 0 holds every rank's shard.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  torch::optim::Optimizer& inner() { return *inner_; }
  // trainer.grad_clip: each step scales the summed gradients so that their global norm (every
  // rank's shard's, all-reduced) is at most max_norm, as torch's clip_grad_norm_ scales the whole
  // gradient; last_norm() is the norm before it.
  void set_max_norm(double max_norm) { max_norm_ = max_norm; }
  double last_norm() const { return last_norm_; }
  int64_t owned_elements() const { return owned_numel_; }
  int64_t total_elements() const { return total_numel_; }
  // Which rank owns each trainable parameter (in the trainer's order).
  const std::vector<int>& owners() const { return owner_; }

 private:
  std::shared_ptr<torch::optim::Optimizer> inner_;
  tt::dist::Context& ctx_;
  std::vector<at::Tensor> params_;   // every trainable parameter, group order
  std::vector<int> owner_;
  std::vector<int64_t> offset_;      // within its owner's region
  int64_t chunk_ = 0;                // elements per rank's region (the largest shard)
  int64_t owned_numel_ = 0, total_numel_ = 0;
  double max_norm_ = -1, last_norm_ = 0;  // max_norm_ < 0: no clipping
};

}  // namespace tt::zero1
