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
#include <vector>

#include "tt/nn.h"

namespace tt::ckpt {

// y = block(x), keeping only x for backward (see above). With recompute_activation, the re-run
// in backward also keeps its MLPs' GELU outputs unsaved (tt::nn::MLPImpl::recompute_activation):
// the block's backward then holds one [B, T, d_ff] tensor less at its peak.
// With `inner`, the block is called as inner->run(index, block, x), in the forward (no grad) and
// in the re-run (with grad, so saved-tensor hooks inner opens act on what the re-run saves);
// inner must outlive the backward.
at::Tensor checkpoint(tt::nn::Block& block, const at::Tensor& x, bool recompute_activation = true,
                      tt::nn::BlockRunner* inner = nullptr, int64_t index = 0);

// Runs the blocks whose index is in `which` through checkpoint(), the others as usual.
// Without grad mode (evaluation, sampling) no block is checkpointed.
// `inner`: the runner this one replaces on the stack (the stack's shared_runner() before
// set_runner), or nullptr. Every block call goes through it: a block not checkpointed, one
// without grad mode, and a checkpointed block's forward and re-run in backward.
//
// Probing (the selective and budget policies): every block is checkpointed and each
// recomputation in backward records the bytes the block holds once re-run with gradients
// (tt's meter: live bytes after its forward minus before). The first backward re-runs the
// blocks in full, as a block that is not checkpointed runs (kept_bytes(): what it keeps from
// its forward to its backward); the next re-runs them as checkpointed runs will
// (recomputed_bytes(): with recompute_activation, the lean re-run), so that the second step's
// peak is the all-checkpointed peak. Without recompute_activation the two are one re-run.
// measured(): both known for every block.
class CheckpointRunner : public tt::nn::BlockRunner {
 public:
  explicit CheckpointRunner(std::set<int64_t> which, std::shared_ptr<tt::nn::BlockRunner> inner = nullptr)
      : which_(std::move(which)), inner_(std::move(inner)) {}
  std::string name() const override { return "checkpoint"; }
  at::Tensor run(int64_t index, tt::nn::Block& block, const at::Tensor& x) override;
  const std::shared_ptr<tt::nn::BlockRunner>& inner() const { return inner_; }
  const std::set<int64_t>& blocks() const { return which_; }
  void set_blocks(std::set<int64_t> which) { which_ = std::move(which); }
  void set_recompute_activation(bool on) { recompute_activation_ = on; }

  void start_probe(int64_t n);  // checkpoint all n blocks and measure them
  bool measured() const;        // every block's bytes known, both ways
  const std::vector<int64_t>& recomputed_bytes() const { return recomputed_; }
  const std::vector<int64_t>& kept_bytes() const { return kept_; }
  void record(int64_t index, int64_t bytes, bool lean);  // from the recomputation in backward

 private:
  std::set<int64_t> which_;
  std::shared_ptr<tt::nn::BlockRunner> inner_;
  std::vector<int64_t> recomputed_, kept_;  // per block, -1 until measured
  bool probing_ = false;
  bool recompute_activation_ = true;
};

// selective: the ceil(fraction * n) blocks holding the most bytes (ties: lower index first).
std::set<int64_t> choose_selective(const std::vector<int64_t>& held, double fraction);

// budget: the fewest checkpointed blocks whose predicted peak fits `budget`. `base` is the
// step peak without any block's activations (every block checkpointed, none re-running);
// blocks run in index order. A block left alone keeps kept[i] from its forward until its
// backward; a checkpointed block holds recomputed[i] while it re-runs in backward, when the
// blocks after it have finished their backward and the blocks before it that are not
// checkpointed still hold theirs. The predicted peak is base plus the larger of the bytes the
// blocks left alone keep at the end of forward and, over the checkpointed blocks, those kept
// before one plus its re-run.
struct BudgetChoice {
  std::set<int64_t> which;
  int64_t predicted_peak = 0;
  bool fits = false;  // false: even checkpointing every block is predicted above the budget
};
int64_t predict_peak(const std::vector<int64_t>& kept, const std::vector<int64_t>& recomputed, int64_t base,
                     const std::set<int64_t>& checkpointed);
BudgetChoice choose_budget(const std::vector<int64_t>& kept, const std::vector<int64_t>& recomputed, int64_t base,
                           int64_t budget);

// The blocks a policy picks in a stack of `n`: "all"; "every" k (0, k, 2k, ...); "blocks" (a
// list). The plugin's schema and its INIT check the settings; here a bad one is a precondition
// (tt::Error).
std::set<int64_t> select_blocks(const std::string& policy, int64_t n, int64_t every,
                                const std::vector<int64_t>& listed);

}  // namespace tt::ckpt
