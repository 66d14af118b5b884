#include "tt/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include <execinfo.h>
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

namespace {
const char* g_crash_program = "tt";

void write_str(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;
}

void on_crash(int sig) {
  // async-signal-safe: write(2) and backtrace_symbols_fd only (backtrace() was called once
  // before, so that libgcc is loaded and it allocates nothing here)
  write_str(g_crash_program);
  write_str(": crashed (");
  write_str(sig == SIGSEGV ? "SIGSEGV" : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : "SIGABRT");
  write_str("); native stack:\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace

void install_crash_report(const char* program) {
  g_crash_program = program;
  void* warm[1];
  (void)::backtrace(warm, 1);
  for (int sig : {SIGSEGV, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction sa {};
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace tt
