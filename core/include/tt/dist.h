#pragma once
// Data-parallel training over PyTorch's c10d: Gloo for CPU tensors, NCCL for CUDA tensors
// where tt is built against a CUDA Torch that has it (each rank on cuda:LOCAL_RANK). The context comes from the
// torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): rank 0
// serves a TCPStore at MASTER_ADDR:MASTER_PORT, every rank connects to it and joins one
// ProcessGroupGloo. Without WORLD_SIZE (or with WORLD_SIZE=1) there is no context and
// training is single-process. c10d stays out of this header (pimpl).
//
// TT_DIST_TIMEOUT (seconds, default 60) bounds the rendezvous and every collective, so an
// unreachable master or a dead rank ends the run with an error instead of a hang.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tt/export.h"

namespace tt {
class Options;
}

namespace tt::dist {

struct Env {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout{60000};
  int local_world_size = 0;  // the workers on this machine (LOCAL_WORLD_SIZE); 0 where unset
  // torchrun 2.4+ serves the store at MASTER_PORT from its agent (TORCHELASTIC_USE_AGENT_STORE=True):
  // every rank, rank 0 too, connects to it.
  bool agent_store = false;
  // The launch torchrun names (TORCHELASTIC_RUN_ID/TORCHELASTIC_RESTART_COUNT, "" elsewhere): tt's
  // keys in the store are apart for each, as a store that outlives a launch holds the last one's.
  std::string launch_id;
};

// The value tt-run --nproc sends with SIGTERM (sigqueue) when it stops the other workers after
// one failed: a worker's interrupt handler (tt/runtime.h) then says so, not "Ctrl-C again to abort".
constexpr int kStopAfterWorkerFailed = 0x74747374;

// The torchrun variables as set; nullopt-like world_size 1 when WORLD_SIZE is unset.
// Inconsistent settings (WORLD_SIZE without RANK, RANK >= WORLD_SIZE, a bad port) throw
// ConfigError naming the variable and the fix.
TT_API Env env_from_environment();

// The device `trainer.device` names (cpu, cuda or cuda:N), checked against this machine (CUDA built
// in, a GPU visible; ConfigError naming trainer.device otherwise), for a run alone (`env`
// nullptr) or the data-parallel worker of `env`: there a plain `cuda` is the GPU of its local rank
// (cuda:0 where the worker sees one GPU only, given its own by CUDA_VISIBLE_DEVICES).
TT_API c10::Device worker_device(const Options& trainer, const Env* env);
// tt-run --nproc's check of `trainer.device` before it starts `nproc` workers on this machine:
// each takes the GPU of its local rank (the launcher sets no CUDA_VISIBLE_DEVICES), so a `cuda`
// run needs a plain `cuda` and a GPU per worker.
TT_API void check_device_for_workers(const Options& trainer, int nproc);

class TT_API Context {
 public:
  // The rendezvous (dist_rendezvous.cpp): throws DistError (timed out, unreachable), ConfigError
  // (MASTER_ADDR unresolved, MASTER_PORT in use or another program's, this worker's WORLD_SIZE not
  // rank 0's or its RANK taken: the others are told and fail too), Interrupted (Ctrl-C: at once).
  explicit Context(const Env& env);
  // Ends this rank's part: see shutdown().
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }
  const Env& env() const { return env_; }
  bool is_root() const { return env_.rank == 0; }
  // Whether CUDA tensors go over NCCL (CUDA builds whose Torch has it, with a GPU visible).
  bool has_nccl() const;

  // Collectives (blocking). Tensors are CPU (Gloo) or CUDA (NCCL builds) and contiguous.
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  void all_reduce_sum(at::Tensor& t);
  void all_reduce_max(at::Tensor& t);
  // Sum of `tensors` over ranks, in flattened buckets of at most bucket_bytes each; each
  // tensor is replaced by the sum (dtype kept). Sparse tensors are summed densely.
  void all_reduce_sum_bucketed(std::vector<at::Tensor>& tensors, int64_t bucket_bytes = 25 << 20);
  // out[r] = sum over ranks of in[r]'s chunk... : input split in world_size equal chunks,
  // this rank gets the sum of its chunk (`input` numel divisible by world_size).
  at::Tensor reduce_scatter_sum(const at::Tensor& input);
  // Concatenation of every rank's `chunk` (same numel on every rank), in rank order.
  at::Tensor all_gather(const at::Tensor& chunk);
  void barrier();

  bool any(bool flag);                      // true where any rank passes true
  double sum(double value);                 // sum over ranks (double precision)
  std::string broadcast_string(const std::string& value, int root = 0);  // through the store
  std::vector<std::string> all_gather_strings(const std::string& value);  // in rank order, through the store
  // Every rank passes a description of what it runs (`what`, plural: "resolved pipelines",
  // "models' parameter shapes"); their hashes are compared and a mismatch throws ConfigError naming the
  // ranks that differ, the first line where this rank's text differs from rank 0's, and `fix`.
  void check_same(const std::string& what, const std::string& text,
                  const std::string& fix = "start every worker with the same pipeline file and overrides");

  // Seconds spent in collectives since the last call (the trainer logs it per step).
  double take_comm_seconds();

 private:
  struct Impl;
  Env env_;
  std::unique_ptr<Impl> impl_;
};

// FNV-1a of the raw bytes of `tensors` (CPU copies), as 16 hex digits: equal on two ranks
// exactly when the tensors are bitwise equal (up to hash collisions).
TT_API std::string hash_tensors(const std::vector<at::Tensor>& tensors);

// The process-wide context, made from the environment on the first call; nullptr when the
// process is not part of a multi-process run (WORLD_SIZE unset or 1), and after shutdown().
TT_API Context* context();
// Ends the process-wide context, if any, before the process ends: its process groups go, then
// rank 0 waits (at most 10 s) for the other ranks to be done with the store it serves. tt-run calls
// it last; a process that ends with _Exit must.
TT_API void shutdown();
// Rank and world size without starting anything (0 and 1 outside distributed runs).
TT_API int rank();
TT_API int world_size();

}  // namespace tt::dist
