#include "tt/dist.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "dist_compat.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/runtime.h"

using Clock = std::chrono::steady_clock;

namespace tt::dist {

struct Context::Impl {
  explicit Impl(const Env& e) : env(e) {}
  const Env& env;  // the Context's (it neither copies nor moves, and outlives its Impl)
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::PgBase> pg;    // Gloo: CPU tensors (and the small control values)
  c10::intrusive_ptr<compat::PgBase> nccl;  // NCCL: CUDA tensors, on CUDA builds with NCCL
  double comm_seconds = 0;
  int64_t string_seq = 0;

  // A finished collective's Work (and the buffers it holds) may still be referenced by the Gloo
  // thread that ran it for a moment after wait() returns; that thread would then free a temporary
  // buffer (a flattened bucket) at an arbitrary point later in the step, where the meter would
  // count it against whatever was being measured (the optimizer state of the first step). Waits
  // until this thread holds the last reference, so the buffers die here, when their owner drops them.
  // Gloo's (CPU) works only: NCCL's are released by its watchdog thread much later, and their
  // buffers are device memory, measured by the device allocator's own figures.
  static void own_last_reference(const c10::intrusive_ptr<compat::Work>& work) {
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    while (work.use_count() > 1 && Clock::now() < until) std::this_thread::yield();
  }

  // Runs one collective and waits for it; c10d/Gloo failures (a peer gone, the timeout) become
  // tt::Error naming the operation.
  void run(const char* op, const std::function<c10::intrusive_ptr<compat::Work>()>& start, bool cpu) {
    const auto t0 = Clock::now();
    try {
      auto work = start();
      work->wait();
      if (cpu) own_last_reference(work);
    } catch (const c10::Error& e) {
      std::string what = e.what_without_backtrace();
      TT_FAIL_AS(DistError, "distributed ", op,
                 " failed (another rank exited, or it did not answer within TT_DIST_TIMEOUT): ", first_line(what));
    } catch (const std::exception& e) {
      TT_FAIL_AS(DistError, "distributed ", op,
                 " failed (another rank exited, or it did not answer within TT_DIST_TIMEOUT): ", e.what());
    }
    comm_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // The process group for a tensor's device: NCCL for CUDA tensors where tt has it (its
  // collectives run on the tensor's GPU, this rank's cuda:LOCAL_RANK), Gloo otherwise.
  // The NCCL group is made on the first collective of a CUDA tensor, which every rank reaches
  // in the same order; a CPU-only run never makes one.
  compat::PgBase& pg_for(const at::Tensor& t) {
    if (!t.is_cuda()) return *pg;
#if TT_DIST_NCCL
    if (!nccl) {
      // With blocking wait a collective that outlives TT_DIST_TIMEOUT throws instead of hanging
      // the GPU stream (the variable's name before LibTorch 2.2, then TORCH_NCCL_BLOCKING_WAIT).
#if TT_TORCH_AT_LEAST(2, 2)
      setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
#else
      setenv("NCCL_BLOCKING_WAIT", "1", 0);
#endif
      try {
        auto opts = c10d::ProcessGroupNCCL::Options::create();
        opts->timeout = env.timeout;
        auto prefixed = c10::make_intrusive<c10d::PrefixStore>("nccl", store);
        nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, env.rank, env.world_size, opts);
      } catch (const std::exception& e) {
        std::string what = e.what();
        TT_FAIL_AS(DistError, "distributed: rank ", env.rank, " could not make the NCCL process group for CUDA "
                   "tensors (", first_line(what), "); check that every rank has its own GPU (cuda:LOCAL_RANK)");
      }
    }
    return *nccl;
#else
    TT_FAIL("distributed: a CUDA tensor reached a collective but this tt has no NCCL backend (its Torch package "
            "lacks ProcessGroupNCCL, or nccl.h was not found when it was built): train on device: cpu, or build tt "
            "against a CUDA Torch with NCCL");
#endif
  }
};

Context::Context(const Env& env) : env_(env), impl_(std::make_unique<Impl>(env_)) {
  const auto t0 = Clock::now();
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  impl_->store = rendezvous_store(env);
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create(env.timeout);
    // Bind where the master is reached from: loopback for a local run.
    const bool local = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
    opts->devices.push_back(local ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                  : c10d::ProcessGroupGloo::createDefaultDevice());
    opts->threads = 2;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("gloo", impl_->store);
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, env.rank, env.world_size, opts);
  } catch (const std::exception& e) {
    TT_CHECK_AS(Interrupted, !interrupt_requested(), "interrupted during the distributed rendezvous at ", where,
                ": nothing was trained");
    std::string what = e.what();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    TT_FAIL_AS(DistError, "distributed rendezvous: rank ", env.rank, " could not join the Gloo process group through ",
               where, " (", first_line(what), ", after ", fmt::format("{:.1f}", secs), " s of TT_DIST_TIMEOUT's ",
               env.timeout.count() / 1000.0, "). Check that all ", env.world_size, " workers were started with the "
               "same MASTER_ADDR/MASTER_PORT, that they reach one another, or raise TT_DIST_TIMEOUT");
  }
  log().info("distributed: rank {} of {} (local rank {}), master {}, Gloo{}", env.rank, env.world_size, env.local_rank,
             where, has_nccl() ? " (CPU tensors; NCCL for CUDA tensors on their first collective)" : "");
}

bool Context::has_nccl() const { return TT_DIST_NCCL && at::hasCUDA(); }

Context::~Context() {
  // The process groups first: a rank still in a collective with this one fails at once instead of
  // at its timeout. Then each rank says it is done with the store; rank 0, which serves it, waits
  // for the others (leave_store): one may still be reading what rank 0 set last (a refusal's
  // reason, a last gather), and a store gone breaks that read off.
  impl_->nccl.reset();
  impl_->pg.reset();
  if (impl_->store) leave_store(*impl_->store, env_);
}

void Context::broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (tensors.empty()) return;
  c10d::BroadcastOptions o;
  o.rootRank = root;
  // One flat buffer per dtype: one collective instead of one per tensor.
  std::map<std::pair<std::string, at::ScalarType>, std::vector<size_t>> by_type;
  for (size_t i = 0; i < tensors.size(); ++i)
    by_type[{tensors[i].device().str(), tensors[i].scalar_type()}].push_back(i);
  for (auto& [key, idx] : by_type) {
    std::vector<at::Tensor> parts;
    for (size_t i : idx) parts.push_back(tensors[i].detach().reshape(-1));
    std::vector<at::Tensor> flat{at::cat(parts)};
    impl_->run("broadcast", [&] { return impl_->pg_for(flat[0]).broadcast(flat, o); }, flat[0].is_cpu());
    int64_t off = 0;
    at::NoGradGuard no_grad;
    for (size_t i : idx) {
      const int64_t n = tensors[i].numel();
      tensors[i].detach().copy_(flat[0].narrow(0, off, n).view(tensors[i].sizes()));
      off += n;
    }
  }
}

void Context::all_reduce_sum(at::Tensor& t) {
  std::vector<at::Tensor> v{t};
  impl_->run("all-reduce", [&] { return impl_->pg_for(t).allreduce(v); }, t.is_cpu());
}

void Context::all_reduce_max(at::Tensor& t) {
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  impl_->run("all-reduce (max)", [&] { return impl_->pg_for(t).allreduce(v, o); }, t.is_cpu());
}

void Context::all_reduce_sum_bucketed(std::vector<at::Tensor>& tensors, int64_t bucket_bytes) {
  // Buckets of consecutive tensors of one dtype; every bucket's all-reduce is started before
  // any is waited for, so Gloo's threads work on them while the next is flattened.
  struct Bucket {
    std::vector<size_t> idx;
    at::Tensor flat;
    c10::intrusive_ptr<compat::Work> work;
  };
  std::vector<Bucket> buckets;
  Bucket cur;
  int64_t cur_bytes = 0;
  at::ScalarType cur_type = at::kFloat;
  at::Device cur_device = at::kCPU;
  auto close = [&] {
    if (cur.idx.empty()) return;
    std::vector<at::Tensor> parts;
    for (size_t i : cur.idx) {
      const at::Tensor& t = tensors[i];
      parts.push_back((t.is_sparse() ? t.to_dense() : t).reshape(-1));
    }
    cur.flat = at::cat(parts);
    buckets.push_back(std::move(cur));
    cur = Bucket();
    cur_bytes = 0;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    const int64_t b = t.numel() * static_cast<int64_t>(t.element_size());
    if (!cur.idx.empty() && (t.scalar_type() != cur_type || t.device() != cur_device || cur_bytes + b > bucket_bytes))
      close();
    cur_type = t.scalar_type();
    cur_device = t.device();
    cur.idx.push_back(i);
    cur_bytes += b;
  }
  close();
  const auto t0 = Clock::now();
  const double before = impl_->comm_seconds;
  for (auto& bk : buckets) {
    try {
      if (!bk.work) {
        std::vector<at::Tensor> v{bk.flat};
        bk.work = impl_->pg_for(bk.flat).allreduce(v);
      }
    } catch (const std::exception& e) {
      std::string what = e.what();
      TT_FAIL_AS(DistError, "distributed gradient all-reduce could not start: ", first_line(what));
    }
  }
  for (auto& bk : buckets) {
    try {
      bk.work->wait();
      if (bk.flat.is_cpu()) Impl::own_last_reference(bk.work);
    } catch (const std::exception& e) {
      std::string what = e.what();
      TT_FAIL_AS(DistError, "distributed gradient all-reduce failed (another rank exited, or it did not answer "
                 "within TT_DIST_TIMEOUT): ", first_line(what));
    }
    int64_t off = 0;
    for (size_t i : bk.idx) {
      const int64_t n = tensors[i].numel();
      at::Tensor part = bk.flat.narrow(0, off, n).view(tensors[i].sizes());
      if (tensors[i].is_sparse()) tensors[i] = part.clone();
      else tensors[i].copy_(part);
      off += n;
    }
  }
  impl_->comm_seconds = before + std::chrono::duration<double>(Clock::now() - t0).count();
}

at::Tensor Context::reduce_scatter_sum(const at::Tensor& input) {
  const int64_t w = world_size();
  TT_CHECK(input.numel() % w == 0, "reduce_scatter_sum: ", input.numel(), " values do not split in ", w);
  at::Tensor flat = input.reshape(-1).contiguous();
  const int64_t chunk = flat.numel() / w;
  if (flat.is_cuda() || TT_DIST_GLOO_REDUCE_SCATTER) {
    std::vector<std::vector<at::Tensor>> in(1);
    for (int64_t r = 0; r < w; ++r) in[0].push_back(flat.narrow(0, r * chunk, chunk).contiguous());
    std::vector<at::Tensor> out{at::empty({chunk}, flat.options())};
    impl_->run("reduce-scatter", [&] { return impl_->pg_for(flat).reduce_scatter(out, in); }, flat.is_cpu());
    return out[0];
  }
  // Gloo before LibTorch 2.8 has no reduce_scatter: an all-reduce (a ring's reduce-scatter plus
  // all-gather) and this rank's chunk of it.
  at::Tensor sum = flat.clone();
  all_reduce_sum(sum);
  return sum.narrow(0, rank() * chunk, chunk).clone();
}

at::Tensor Context::all_gather(const at::Tensor& chunk) {
  const int64_t w = world_size();
  std::vector<at::Tensor> in{chunk.contiguous().reshape(-1)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int64_t r = 0; r < w; ++r) out[0].push_back(at::empty_like(in[0]));
  impl_->run("all-gather", [&] { return impl_->pg_for(in[0]).allgather(out, in); }, in[0].is_cpu());
  return at::cat(out[0]);
}

void Context::barrier() {
  // A one-value all-reduce: Gloo's barrier has no timeout of its own in every version.
  at::Tensor t = at::zeros({1});
  all_reduce_sum(t);
}

bool Context::any(bool flag) {
  at::Tensor t = at::full({1}, flag ? 1.0f : 0.0f);
  all_reduce_max(t);
  return t.item<float>() > 0;
}

double Context::sum(double value) {
  at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kDouble));
  all_reduce_sum(t);
  return t.item<double>();
}

std::string Context::broadcast_string(const std::string& value, int root) {
  const std::string key = "tt/string/" + std::to_string(impl_->string_seq++);
  try {
    if (rank() == root) impl_->store->set(key, store_value(value));
    return store_text(impl_->store->get(key));  // waits up to the store's timeout
  } catch (const std::exception& e) {
    std::string what = e.what();
    TT_FAIL_AS(DistError, "distributed: rank ", rank(), " did not receive ", key, " from rank ", root, " (rank ", root,
               " exited, or it did not answer within TT_DIST_TIMEOUT): ", first_line(what));
  }
}

std::vector<std::string> Context::all_gather_strings(const std::string& value) {
  const std::string prefix = "tt/gather/" + std::to_string(impl_->string_seq++) + "/";
  std::vector<std::string> out(world_size());
  try {
    impl_->store->set(prefix + std::to_string(rank()), store_value(value));
    for (int r = 0; r < world_size(); ++r) out[r] = store_text(impl_->store->get(prefix + std::to_string(r)));
  } catch (const std::exception& e) {
    std::string m = e.what();
    TT_FAIL_AS(DistError, "distributed: the ranks did not all send ", prefix,
               " (a rank exited, or it did not answer within TT_DIST_TIMEOUT): ", first_line(m));
  }
  return out;
}

std::string hash_tensors(const std::vector<at::Tensor>& tensors) {
  uint64_t h = kFnv1aOffset;
  for (const auto& t0 : tensors) {
    const at::Tensor t = t0.detach().to(at::kCPU).contiguous();
    h = fnv1a(t.data_ptr(), t.nbytes(), h);
  }
  return hex16(h);
}

namespace {
// Where `mine` first differs from `theirs` (rank 0's), line by line: "line 12 is 'threads: 4'
// here, 'threads: 2' on rank 0".
std::string first_difference(const std::string& theirs, const std::string& mine) {
  std::istringstream a(theirs), b(mine);
  std::string x, y;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(a, x)), more_b = static_cast<bool>(std::getline(b, y));
    if (!more_a && !more_b) return "";
    if (!more_a) x = "(the end)";
    if (!more_b) y = "(the end)";
    if (x != y) {
      const auto cut = [](std::string t) { return t.size() > 100 ? t.substr(0, 100) + "..." : t; };
      return detail::cat("line ", line, " is '", cut(y), "' here, '", cut(x), "' on rank 0");
    }
  }
}
}  // namespace

void Context::check_same(const std::string& what, const std::string& text, const std::string& fix) {
  const std::string mine = fnv1a_hex(text);
  const std::vector<std::string> hashes = all_gather_strings(mine);
  std::string differ;
  for (int r = 0; r < world_size(); ++r)
    if (hashes[r] != hashes[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (differ.empty()) return;
  const std::string first = broadcast_string(text);  // rank 0's, for every rank to compare with
  const std::string where = mine == hashes[0] ? std::string() : ": " + first_difference(first, text);
  TT_FAIL_AS(ConfigError, "distributed: the ranks' ", what, " differ (rank(s) ", differ, " from rank 0; this is rank ",
             rank(), where, "): ", fix);
}

double Context::take_comm_seconds() { return std::exchange(impl_->comm_seconds, 0.0); }

namespace {
std::once_flag g_once;
std::unique_ptr<Context> g_context;
}  // namespace

void shutdown() { g_context.reset(); }

Context* context() {
  std::call_once(g_once, [] {
    Env e = env_from_environment();
    if (e.world_size > 1) g_context = std::make_unique<Context>(e);
  });
  return g_context.get();
}

int rank() {
  Context* c = context();
  return c ? c->rank() : 0;
}
int world_size() {
  Context* c = context();
  return c ? c->world_size() : 1;
}

}  // namespace tt::dist
