#pragma once
// Data-parallel gradient synchronization over c10d (tt/dist.h): every rank steps with the
// whole batch's gradient, bitwise the same on all ranks.
#include <cstdint>
#include <set>

namespace tt {

struct Run;

class GradSync {
 public:
  explicit GradSync(Run& run);

  // After every rank ran forward/backward on its part of the batch (`ok`: not dropped). One
  // small all-reduce agrees on the batch's loss, example count, a skip (NaN on any rank), an
  // interrupt and a checkpoint due by time; then the gradients, weighted by the rank's share of the batch for
  // mean-reduced losses, are summed in flattened buckets. Only trainable parameters take
  // part (LoRA: the adapters); sparse gradients are summed densely. Returns false when the
  // step is skipped everywhere. Plugins see the synchronized gradients at BEFORE_STEP.
  bool sync(bool ok, bool sum_reduced);
  // A stop one rank's plugin asked for (at any event of the loop) ends every rank's fit at the
  // same point (the others would wait in the next step's all-reduce), named as that plugin's on
  // every rank: one small all-reduce where the loop next tests whether it is done.
  void agree_on_stop();
  // All ranks start from rank 0's parameters and buffers (after a resume, too).
  void broadcast_model();
  // At the end: every rank's hash of its parameters, for the summary (RunRecord::replica_hashes);
  // the replicas must have stayed bitwise equal, and a difference is warned of.
  void gather_replica_hashes();
  // trainer.dist_rows: owned: each rank trained the rows of its own documents (i % world ==
  // rank); every rank gets every row from its owner.
  void assemble_owned_rows();

  bool owned_rows() const { return owned_rows_; }
  bool interrupted() const { return interrupted_; }         // some rank was interrupted
  // trainer.checkpoint_minutes passed on some rank by the last sync: every rank checkpoints.
  bool checkpoint_due() const { return checkpoint_due_; }
  int64_t global_examples() const { return global_examples_; }  // of the last batch, all ranks

 private:
  Run& run_;
  bool owned_rows_ = false;
  std::set<size_t> owned_row_params_;  // trainable indices whose row gradients stay on their rank
  bool interrupted_ = false;
  bool checkpoint_due_ = false;
  int64_t global_examples_ = 0;
  int64_t bucket_bytes_ = 25 << 20;
};

}  // namespace tt
