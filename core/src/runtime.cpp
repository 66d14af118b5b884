#include "tt/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include <atomic>
#include <thread>

namespace tt {

int configure_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  return threads;
}

void set_flush_denormal(bool on) { at::globalContext().setFlushDenormal(on); }

void seed_everything(uint64_t seed) { torch::manual_seed(seed); }

static std::atomic<bool> g_interrupt{false};
void request_interrupt() { g_interrupt.store(true); }
bool interrupt_requested() { return g_interrupt.load(); }
void clear_interrupt() { g_interrupt.store(false); }

}  // namespace tt
