// The torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, its agent's TORCHELASTIC_* variables) and TT_DIST_TIMEOUT, read and checked: tt/dist.h's env_from_environment; and the
// device of a worker (worker_device, check_device_for_workers).
#include <torch/cuda.h>

#include <cerrno>
#include <cstdlib>

#include "tt/dist.h"
#include "tt/error.h"
#include "tt/options.h"

namespace tt::dist {

namespace {
const char* getenv_or_null(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int64_t parse_int_env(const char* name, const char* value, int64_t lo, int64_t hi, const char* fix) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value, &end, 10);
  TT_CHECK_AS(ConfigError, errno == 0 && end != value && *end == '\0' && v >= lo && v <= hi, name, "='", value,
              "' is not an integer in [", lo, ", ", hi, "]: ", fix);
  return v;
}
}  // namespace

Env env_from_environment() {
  Env e;
  const char* ws = getenv_or_null("WORLD_SIZE");
  const char* rk = getenv_or_null("RANK");
  const char* how = "set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every worker, or start them with "
                    "tt-run --nproc N";
  if (!ws) {
    TT_CHECK_AS(ConfigError, !rk, "RANK is set (", rk, ") but WORLD_SIZE is not: ", how);
    return e;
  }
  e.world_size = static_cast<int>(parse_int_env("WORLD_SIZE", ws, 1, 1 << 16, how));
  if (e.world_size == 1 && !rk) return e;
  TT_CHECK_AS(ConfigError, rk, "WORLD_SIZE is set (", ws, ") but RANK is not: ", how);
  e.rank = static_cast<int>(parse_int_env("RANK", rk, 0, e.world_size - 1, "RANK must be below WORLD_SIZE"));
  const char* lr = getenv_or_null("LOCAL_RANK");
  e.local_rank = lr ? static_cast<int>(parse_int_env("LOCAL_RANK", lr, 0, 1 << 16, how)) : e.rank;
  if (const char* lw = getenv_or_null("LOCAL_WORLD_SIZE")) {
    e.local_world_size = static_cast<int>(
        parse_int_env("LOCAL_WORLD_SIZE", lw, 1, e.world_size, "the workers on this machine, at most WORLD_SIZE"));
    if (!lr) e.local_rank = e.rank % e.local_world_size;  // ranks numbered machine by machine
    TT_CHECK_AS(ConfigError, e.local_rank < e.local_world_size, "LOCAL_RANK (", e.local_rank,
                ") must be below LOCAL_WORLD_SIZE (", e.local_world_size, "): ", how);
  }
  if (const char* a = getenv_or_null("MASTER_ADDR")) e.master_addr = a;
  if (const char* p = getenv_or_null("MASTER_PORT"))
    e.master_port = static_cast<int>(parse_int_env("MASTER_PORT", p, 1, 65535, "use a free TCP port, e.g. 29500"));
  if (const char* agent = getenv_or_null("TORCHELASTIC_USE_AGENT_STORE")) e.agent_store = std::string(agent) == "True";
  if (const char* id = getenv_or_null("TORCHELASTIC_RUN_ID")) {
    const char* restart = getenv_or_null("TORCHELASTIC_RESTART_COUNT");
    e.launch_id = std::string(id) + "/" + (restart ? restart : "0");
  }
  if (const char* t = getenv_or_null("TT_DIST_TIMEOUT")) {
    char* end = nullptr;
    double s = std::strtod(t, &end);
    TT_CHECK_AS(ConfigError, end != t && *end == '\0' && s > 0, "TT_DIST_TIMEOUT='", t,
                "' must be a positive number of seconds");
    e.timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  return e;
}

namespace {
// trainer.device parsed, and a CUDA device checked to be there.
c10::Device named_device(const Options& trainer) {
  const std::string name = trainer.get_string("device");
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(name);
  } catch (const std::exception&) {
    trainer.fail("device", "must be cpu, cuda or cuda:N, got '" + name + "'");
  }
  if (device.is_cuda() && !torch::cuda::is_available())
    trainer.fail("device", TT_WITH_CUDA ? "is cuda but no CUDA device is visible"
                                        : "is cuda but this tt is built without CUDA (LibTorch is CPU-only)");
  return device;
}
}  // namespace

c10::Device worker_device(const Options& trainer, const Env* env) {
  const c10::Device device = named_device(trainer);
  if (!env || !device.is_cuda() || device.has_index()) return device;
  // One GPU per worker, as torchrun does it: `cuda` is cuda:LOCAL_RANK.
  const int64_t n = static_cast<int64_t>(torch::cuda::device_count());
  const int local = env->local_rank;
  // one visible GPU: the launcher gave each worker its own (CUDA_VISIBLE_DEVICES per worker)
  trainer.check(local < n || n == 1, "device",
                "is cuda but local rank " + std::to_string(local) + " has no GPU of its own (" + std::to_string(n) +
                    " visible): start at most " + std::to_string(n) + " workers per machine");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(n == 1 ? 0 : local));
}

void check_device_for_workers(const Options& trainer, int nproc) {
  const c10::Device device = named_device(trainer);
  if (!device.is_cuda() || nproc <= 1) return;
  // two workers on one GPU would fail inside NCCL after setup
  const int64_t n = static_cast<int64_t>(torch::cuda::device_count());
  trainer.check(!device.has_index(), "device", "is " + device.str() + " but --nproc " + std::to_string(nproc) +
                                                   " workers each take the GPU of their local rank: give cuda");
  trainer.check(nproc <= n, "device",
                "is cuda but --nproc " + std::to_string(nproc) + " starts more workers than the " + std::to_string(n) +
                    " visible GPUs (one each): give --nproc " + std::to_string(n) + " or fewer");
}

}  // namespace tt::dist
