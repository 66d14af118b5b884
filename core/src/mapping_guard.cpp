#include "mapping_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace tt {

namespace {
// A mapped file that shrinks while it is read (truncated, rewritten in place) makes the next
// read of a page past its new end raise SIGBUS. The handler names the file from the faulting
// address and exits 1, instead of the process dying with no word. Only async-signal-safe calls.
struct MappedRange {
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[512] = {};
};
MappedRange g_mapped[64];
struct sigaction g_previous_bus {};

void write_all(const char* text) {
  size_t n = std::strlen(text);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w, n -= static_cast<size_t>(w);
  }
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (auto& r : g_mapped) {
    if (addr < r.begin.load() || addr >= r.end.load()) continue;
    write_all("\ntt: error: ");
    write_all(r.path);
    write_all(" changed while it was being read (SIGBUS: it was truncated or rewritten during training). "
              "Leave input files alone while tt reads them: write a new file and point the pipeline at it.\n");
    ::_exit(1);
  }
  // not one of ours: what was there before (the default ends the process with the signal)
  if (g_previous_bus.sa_flags & SA_SIGINFO) {
    if (g_previous_bus.sa_sigaction) return g_previous_bus.sa_sigaction(sig, info, context);
  } else if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN && g_previous_bus.sa_handler) {
    return g_previous_bus.sa_handler(sig);
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

}  // namespace

void watch_mapping(const char* base, size_t length, const std::string& path) {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_bus);
    return true;
  }();
  (void)installed;
  for (auto& r : g_mapped) {
    uintptr_t free_slot = 0;
    if (!r.end.compare_exchange_strong(free_slot, 1)) continue;  // claimed: [0, 1) matches nothing
    std::strncpy(r.path, path.c_str(), sizeof r.path - 1);
    r.begin.store(reinterpret_cast<uintptr_t>(base));
    r.end.store(reinterpret_cast<uintptr_t>(base) + length);
    return;
  }
}

void unwatch_mapping(const char* base) {
  for (auto& r : g_mapped)
    if (r.begin.load() == reinterpret_cast<uintptr_t>(base) && r.end.load() != 0) {
      r.end.store(0);
      r.begin.store(0);
    }
}

}  // namespace tt
