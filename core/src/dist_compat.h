#pragma once
// c10d across LibTorch versions, included only by dist.cpp and dist_rendezvous.cpp. In 1.13 ProcessGroupGloo is a
// ProcessGroup and its headers are guarded by USE_C10D_GLOO (Debian's libtorch_cpu.so is built
// with it; gloo's headers come from libgloo-dev). From 2.0 the backends derive from
// c10d::Backend and collectives return c10::intrusive_ptr<c10d::Work> as before; the calls tt
// makes (broadcast, allreduce, allgather, reduce_scatter, barrier with vector arguments) keep
// their signatures. NCCL is used only where LibTorch has CUDA and c10d was built with it.
#include <cstdint>
#include <string>
#include <vector>

#include "tt/compat.h"

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#if TT_WITH_CUDA && defined(TT_WITH_NCCL) && TT_WITH_NCCL
// CMake sets TT_WITH_NCCL where the Torch package ships ProcessGroupNCCL.hpp (the CUDA wheels
// do); the header is guarded by USE_C10D_NCCL like Gloo's by USE_C10D_GLOO.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define TT_DIST_NCCL 1
#else
#define TT_DIST_NCCL 0
#endif

// ProcessGroupGloo::reduce_scatter is declared in every version but throws "does not support
// reduce_scatter" until PyTorch implemented it (2025, LibTorch 2.8; 2.6 still throws, 2.11 has it):
// before that tt reduces with an all-reduce and keeps its shard.
#define TT_DIST_GLOO_REDUCE_SCATTER TT_TORCH_AT_LEAST(2, 8)

namespace tt::compat {
// From 2.4 the TCPStore asks for libuv by default, and a LibTorch built without it (Debian's)
// refuses ("use_libuv was requested but PyTorch was build without libuv support"): there the
// store is made without it.
inline c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, c10d::TCPStoreOptions options) {
#if TT_TORCH_AT_LEAST(2, 4)
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const std::exception& e) {
    if (!options.useLibUV || std::string(e.what()).find("libuv") == std::string::npos) throw;
    options.useLibUV = false;
  }
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

#if TT_TORCH_AT_LEAST(2, 0)
using PgBase = c10d::Backend;
#else
using PgBase = c10d::ProcessGroup;
#endif
using Work = c10d::Work;
}  // namespace tt::compat

namespace tt::dist {
struct Env;
// A store's values are bytes; tt's are text.
inline std::vector<uint8_t> store_value(const std::string& s) { return {s.begin(), s.end()}; }
inline std::string store_text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }
// The rendezvous (dist_rendezvous.cpp): rank 0 serves the store at MASTER_ADDR:MASTER_PORT (or
// torchrun's agent does), every rank connects and checks in; returns once all WORLD_SIZE have,
// within TT_DIST_TIMEOUT, a store whose keys are tt's own (apart per torchrun launch). Throws
// DistError (unreached, timed out), ConfigError (MASTER_ADDR unresolved, the port in use or
// another program's, another WORLD_SIZE than rank 0's or a RANK taken: every worker is told),
// Interrupted (Ctrl-C).
c10::intrusive_ptr<c10d::Store> rendezvous_store(const Env& env);
// Says this rank is done with the store; rank 0 waits for the others that claimed their RANK to
// say so (at most 10 s or TT_DIST_TIMEOUT, 2 s after an interrupt).
void leave_store(c10d::Store& store, const Env& env);
}  // namespace tt::dist
