#include "tt/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include <execinfo.h>
#include <sched.h>
#include <semaphore.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace tt {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int configure_threads(int threads) {
  if (threads <= 0) threads = usable_cores();
  at::set_num_threads(threads);
  return threads;
}

void set_flush_denormal(bool on) { at::globalContext().setFlushDenormal(on); }

void seed_everything(uint64_t seed) { torch::manual_seed(seed); }

static std::atomic<bool> g_interrupt{false};
static const char* g_interrupt_message = "";
static const char* g_interrupt_program = "tt";
static std::atomic<const char*> g_phase{"in setup"};
static sem_t g_signalled;  // posted by the first signal: wakes the watchdog

static void on_signal(int sig) {
  if (g_interrupt.load()) {  // second signal: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_interrupt.store(true);
  (void)!::write(2, g_interrupt_message, std::strlen(g_interrupt_message));
  sem_post(&g_signalled);
}

// After the first signal: a process that has not ended within the grace ends here.
static void watchdog(int grace) {
  while (sem_wait(&g_signalled) != 0) {
  }
  std::this_thread::sleep_for(std::chrono::seconds(grace));
  if (!g_interrupt.load()) return;  // cleared: the interrupt was handled and work goes on
  char line[512];
  const int n = std::snprintf(line, sizeof line,
                              "%s: still %s %d s after the interrupt; stopping now (the last complete checkpoint "
                              "is kept; TT_INTERRUPT_GRACE sets this wait)\n",
                              g_interrupt_program, g_phase.load(), grace);
  (void)!::write(2, line, static_cast<size_t>(std::max(0, std::min(n, static_cast<int>(sizeof line) - 1))));
  ::_exit(130);
}

void install_interrupt_handlers(const char* message, const char* program) {
  static std::once_flag once;
  g_interrupt_message = message;
  g_interrupt_program = program;
  std::call_once(once, [] {
    int grace = 15;
    if (const char* env = std::getenv("TT_INTERRUPT_GRACE"); env && std::atoi(env) > 0) grace = std::atoi(env);
    sem_init(&g_signalled, 0, 0);
    std::thread(watchdog, grace).detach();
  });
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

void set_phase(const char* phase) { g_phase.store(phase); }
const char* current_phase() { return g_phase.load(); }
PhaseScope::PhaseScope(const char* phase) : previous_(g_phase.exchange(phase)) {}
PhaseScope::~PhaseScope() { g_phase.store(previous_); }
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
