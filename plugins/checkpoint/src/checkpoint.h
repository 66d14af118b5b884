#pragma once
// Activation checkpointing for models built from tt::nn::BlockStack.
//
// C++ LibTorch has no torch.utils.checkpoint, so this is one: a custom autograd Function in
// the reentrant style. Forward runs the block without recording a graph and keeps only its
// input; backward re-runs the block with gradients enabled, from that input, and
// back-propagates the incoming gradient through the re-run (parameter gradients accumulate
// as usual). The default CPU generator's state (and the CUDA one's, for CUDA inputs) is
// saved before the forward and put back for the re-run, so dropout draws the same masks.
// Memory: a checkpointed block keeps one [B, T, d] tensor instead of everything its ops save;
// the price is a second forward of that block in backward.
#include <memory>
#include <set>
#include <string>

#include "tt/nn.h"

namespace tt::ckpt {

// y = block(x), keeping only x for backward (see above).
at::Tensor checkpoint(tt::nn::Block& block, const at::Tensor& x);

// Runs the blocks whose index is in `which` through checkpoint(), the others as usual.
// Without grad mode (evaluation, sampling) every block runs directly.
class CheckpointRunner : public tt::nn::BlockRunner {
 public:
  explicit CheckpointRunner(std::set<int64_t> which) : which_(std::move(which)) {}
  std::string name() const override { return "checkpoint"; }
  at::Tensor run(int64_t index, tt::nn::Block& block, const at::Tensor& x) override;
  const std::set<int64_t>& blocks() const { return which_; }

 private:
  std::set<int64_t> which_;
};

// The blocks a policy picks in a stack of `n`: "all"; "every" k (0, k, 2k, ...); "blocks" (a
// list). Bad settings throw tt::ConfigError naming plugins.checkpoint and the option.
std::set<int64_t> select_blocks(const std::string& policy, int64_t n, int64_t every,
                                const std::vector<int64_t>& listed);

}  // namespace tt::ckpt
