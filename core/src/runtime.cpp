#include "tt/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
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
static const char* g_interrupt_message = "";

static void on_signal(int sig) {
  if (g_interrupt.load()) {  // second signal: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_interrupt.store(true);
  (void)!::write(2, g_interrupt_message, std::strlen(g_interrupt_message));
}

void install_interrupt_handlers(const char* message) {
  g_interrupt_message = message;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
void request_interrupt() { g_interrupt.store(true); }
bool interrupt_requested() { return g_interrupt.load(); }
void clear_interrupt() { g_interrupt.store(false); }

}  // namespace tt
