#include "tt/runtime.h"

#include "tt/dist.h"
#include "tt/error.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include <dlfcn.h>
#include <link.h>
#include <execinfo.h>
#include <ucontext.h>
#include <sched.h>
#include <semaphore.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace tt {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

const char* tt_version() { return TT_VERSION; }

namespace {
// The text after the colon of /proc/cpuinfo's first line that starts with one of `keys`, or "".
std::string cpuinfo_field(std::initializer_list<const char*> keys) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    for (const char* key : keys)
      if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) {
        const size_t at = line.find_first_not_of(" \t", line.find(':') + 1);
        return at == std::string::npos ? std::string() : line.substr(at);
      }
  return {};
}
}  // namespace

std::string cpu_model() {
  const std::string model = cpuinfo_field({"model name"});
  return model.empty() ? "unknown CPU" : model;
}

bool cpu_has_flag(const std::string& flag) {
  static const std::set<std::string> flags = [] {
    std::istringstream words(cpuinfo_field({"flags", "Features"}));
    return std::set<std::string>(std::istream_iterator<std::string>(words), std::istream_iterator<std::string>());
  }();
  return flags.count(flag) != 0;
}

double load_average() {
  double load = -1;
  return getloadavg(&load, 1) == 1 ? load : -1;
}

double others_load(double load_before, double load_after, int threads) {
  if (load_before < 0 || load_after < 0) return -1;
  return std::max(load_before, load_after - threads);
}

std::string load_warning(double others, const std::string& whose, const std::string& again) {
  if (others < 0.5) return "";
  char head[64];
  std::snprintf(head, sizeof head, "  ! the load average is about %.1f more than ", others);
  return head + whose + " own threads make: other processes were running, so step times and their ratios are not "
                        "reliable; " + again + "\n";
}

int threads_from_environment() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (v == nullptr) return 0;
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  const char* p = v;
  while (space(*p)) ++p;
  if (*p == '\0') return 0;  // empty or blank: unset, as libgomp takes it
  // OpenMP's syntax: a positive integer, or a comma-separated list of them for nested levels
  // (the first is the outer level, tt's); whitespace around each is allowed. A value above the
  // cores is kept (the caller caps it, with a warning naming it).
  int first = 0;
  bool ok = true;
  for (bool more = true; more && ok;) {
    while (space(*p)) ++p;
    const char* digits = p;
    long long n = 0;
    while (*p >= '0' && *p <= '9') {
      n = std::min<long long>(n * 10 + (*p - '0'), 1 << 20);
      ++p;
    }
    while (space(*p)) ++p;
    ok = p != digits && n >= 1 && (*p == '\0' || *p == ',');
    if (first == 0) first = static_cast<int>(n);
    more = *p == ',';
    if (more) ++p;
  }
  TT_CHECK_AS(ConfigError, ok, "OMP_NUM_THREADS='", v, "' is not a positive number of threads (or a comma-separated ",
              "list of them): set it to one (e.g. 4) or unset it (trainer.threads, when above 0, takes precedence)");
  return first;
}

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  if (const int n = threads_from_environment(); n > 0) return n;
  return usable_cores();
}

int usable_threads(int threads) { return std::min(resolve_threads(threads), usable_cores()); }

int configure_threads(int threads) {
  threads = usable_threads(threads);
  at::set_num_threads(threads);
  return threads;
}

void set_flush_denormal(bool on) { at::globalContext().setFlushDenormal(on); }

void seed_everything(uint64_t seed) { torch::manual_seed(seed); }

static std::atomic<bool> g_interrupt{false};
static const char* g_interrupt_message = "";
static const char* g_interrupt_program = "tt";
static const char* g_message_phase = nullptr;  // the phase g_interrupt_message is for (any when null)
static std::atomic<const char*> g_phase{"in setup"};
static sem_t g_signalled;  // posted by the first signal: wakes the watchdog
static std::atomic<int> g_grace_holds{0};
static std::atomic<int> g_grace{15};

static std::atomic<bool> g_first_from_parent{false};

static void on_signal(int sig, siginfo_t* info, void*) {
  const bool from_parent =
      info && (info->si_code == SI_USER || info->si_code == SI_QUEUE) && info->si_pid == ::getppid();
  // tt-run --nproc stopping this worker because another failed (tt/dist.h): no one pressed Ctrl-C
  const bool worker_failed = from_parent && info->si_code == SI_QUEUE &&
                             info->si_value.sival_int == dist::kStopAfterWorkerFailed;
  if (g_interrupt.load()) {  // second signal: stop now
    // ... unless one of the two came from the parent: it passes on the interrupt it got, and
    // `pkill` or a batch system signals every process, so a child gets the same interrupt twice
    // (tt-run's compare, planner and launcher pass on only the first; they answer a second
    // Ctrl-C with SIGKILL).
    if (from_parent || g_first_from_parent.load()) return;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_interrupt.store(true);
  g_first_from_parent.store(from_parent);
  const char* phase = g_phase.load();
  const auto say = [](const char* text) { (void)!::write(2, text, std::strlen(text)); };
  if (worker_failed && (g_message_phase || *g_interrupt_message)) {  // (nothing said after an error of its own)
    say("\n");
    say(g_interrupt_program);
    say(": stopping (");
    say(phase);
    say("): another worker failed, and tt-run --nproc stops the others\n");
  } else if (g_message_phase && std::strcmp(phase, g_message_phase) != 0) {  // strcmp, strlen: async-signal-safe
    say("\n");
    say(g_interrupt_program);
    say(": stopping (");
    say(phase);
    say("; Ctrl-C again to abort)\n");
  } else {
    say(g_interrupt_message);
  }
  sem_post(&g_signalled);
}

// After the first signal: a process that has not ended within the grace ends here.
static void watchdog(int grace) {
  while (sem_wait(&g_signalled) != 0) {
  }
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::seconds(grace);
  for (;;) {
    if (!g_interrupt.load()) return;  // cleared: the interrupt was handled and work goes on
    if (g_grace_holds.load() > 0)
      deadline = clock::now() + std::chrono::seconds(grace);  // held: the grace starts again after
    else if (clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  char line[512];
  const int n = std::snprintf(line, sizeof line,
                              "%s: still %s %d s after the interrupt; stopping now (the last complete checkpoint "
                              "is kept; TT_INTERRUPT_GRACE sets this wait)\n",
                              g_interrupt_program, g_phase.load(), grace);
  (void)!::write(2, line, static_cast<size_t>(std::max(0, std::min(n, static_cast<int>(sizeof line) - 1))));
  ::_exit(130);
}

void install_interrupt_handlers(const char* message, const char* program, const char* message_phase) {
  static std::once_flag once;
  g_interrupt_message = message;
  g_interrupt_program = program;
  g_message_phase = message_phase;
  std::call_once(once, [] {
    int grace = 15;
    if (const char* env = std::getenv("TT_INTERRUPT_GRACE"); env && std::atoi(env) > 0) grace = std::atoi(env);
    g_grace.store(grace);
    sem_init(&g_signalled, 0, 0);
    // The watchdog takes no SIGINT or SIGTERM: their handlers run on the process's other threads,
    // never two at once on two threads (the thread inherits the mask blocked around its start).
    sigset_t both, before;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &both, &before);
    std::thread(watchdog, grace).detach();
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
  });
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

void set_phase(const char* phase) { g_phase.store(phase); }
const char* current_phase() { return g_phase.load(); }
PhaseScope::PhaseScope(const char* phase) : previous_(g_phase.exchange(phase)) {}
PhaseScope::~PhaseScope() { g_phase.store(previous_); }
void request_interrupt() { g_interrupt.store(true); }
bool interrupt_requested() { return g_interrupt.load(); }
void clear_interrupt() { g_interrupt.store(false); }
int interrupt_grace_seconds() { return g_grace.load(); }
InterruptGraceHold::InterruptGraceHold() { g_grace_holds.fetch_add(1); }
InterruptGraceHold::~InterruptGraceHold() { g_grace_holds.fetch_sub(1); }

namespace {
std::atomic<int> g_abandonable{0};
}  // namespace
void stop_if_interrupted() {
  if (g_abandonable.load() > 0 && g_interrupt.load()) throw Interrupted("interrupted: the work in progress is abandoned");
}
AbandonableScope::AbandonableScope() { g_abandonable.fetch_add(1); }
AbandonableScope::~AbandonableScope() { g_abandonable.fetch_sub(1); }

namespace {
const char* g_crash_program = "tt";

void write_str(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;
}

// "0x…" into buf (at least 19 bytes), without printf (not async-signal-safe).
const char* hex(uintptr_t v, char* buf) {
  char digits[16];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v && n < 16);
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < n; ++i) buf[2 + i] = digits[n - 1 - i];
  buf[2 + n] = '\0';
  return buf;
}

// "  what 0x… (library+0x…, symbol+0x…)": where an address lies. dladdr is not on the list of
// async-signal-safe functions, but it only reads the loader's tables; a crash inside the loader
// itself may hang here, which the plain stack printed first does not depend on.
void describe(const char* what, uintptr_t addr, bool data = false) {
  char buf[24];
  Dl_info info{};
  const bool found = addr != 0 && ::dladdr(reinterpret_cast<void*>(addr), &info) != 0 && info.dli_fname;
  write_str("  ");
  write_str(what);
  write_str(" ");
  write_str(hex(addr, buf));
  if (!found) {  // a data address is seldom in a library; code should be
    write_str(!data        ? " (in no loaded library: a call through a bad or stale function pointer?)\n"
              : addr < 4096 ? " (a null pointer: the code read or wrote through a pointer that is null)\n"
                            : " (memory that is not mapped: a pointer freed, out of bounds, or never set)\n");
    return;
  }
  write_str(" (");
  write_str(info.dli_fname);
  write_str("+");
  write_str(hex(addr - reinterpret_cast<uintptr_t>(info.dli_fbase), buf));
  if (info.dli_sname) {
    write_str(", ");
    write_str(info.dli_sname);
    write_str("+");
    write_str(hex(addr - reinterpret_cast<uintptr_t>(info.dli_saddr), buf));
  }
  write_str(")\n");
}

// The loaded objects' executable segments, for telling code addresses among a stack's words.
struct CodeRange {
  uintptr_t begin, end;
};
CodeRange g_code[512];
int g_code_n = 0;

int collect_code(dl_phdr_info* info, size_t, void*) {
  for (int i = 0; i < info->dlpi_phnum && g_code_n < 512; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      g_code[g_code_n++] = {info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
  }
  return 0;
}

bool is_code(uintptr_t a) {
  for (int i = 0; i < g_code_n; ++i)
    if (a >= g_code[i].begin && a < g_code[i].end) return true;
  return false;
}

void on_crash(int sig, siginfo_t* si, void* context) {
  // async-signal-safe: write(2) and backtrace_symbols_fd (backtrace() was called once before,
  // so that libgcc is loaded and it allocates nothing here); dladdr (see describe) and
  // dl_iterate_phdr only read the loader's tables. The unwinder may itself fault (it reads the
  // instruction bytes at a bad address): the registers and the stack's words go first.
  write_str(g_crash_program);
  write_str(": crashed (");
  write_str(sig == SIGSEGV ? "SIGSEGV" : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : sig == SIGBUS ? "SIGBUS" : "SIGABRT");
  write_str(")\n");
  uintptr_t pc = 0, sp = 0;
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  if (uc) {
    pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
    sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  }
#elif defined(__aarch64__)
  if (uc) {
    pc = static_cast<uintptr_t>(uc->uc_mcontext.pc);
    sp = static_cast<uintptr_t>(uc->uc_mcontext.sp);
  }
#endif
  if ((sig == SIGSEGV || sig == SIGBUS) && si) {  // data unless it is the instruction's own (a bad call)
    const auto fault = reinterpret_cast<uintptr_t>(si->si_addr);
    describe("fault address", fault, fault != pc);
  }
  if (pc) describe("instruction", pc);
  if (sp) {
    // Return addresses among the words above the stack pointer, nearest first (some may be
    // stale: a word that once held one). library+offset resolves with addr2line -f -C -e.
    g_code_n = 0;
    ::dl_iterate_phdr(collect_code, nullptr);
    write_str("  code addresses on the stack, nearest first:\n");
    const auto* word = reinterpret_cast<const uintptr_t*>(sp & ~uintptr_t{7});
    for (int i = 0, shown = 0; i < 1024 && shown < 24; ++i)
      if (is_code(word[i])) {
        describe("  ", word[i]);
        ++shown;
      }
  }
  write_str("  native stack:\n");
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
  Dl_info info{};
  (void)::dladdr(reinterpret_cast<void*>(&install_crash_report), &info);  // the loader's tables, ahead
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction sa {};
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_RESETHAND | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

uint64_t fnv1a(const void* bytes, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

std::string hex16(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace tt
