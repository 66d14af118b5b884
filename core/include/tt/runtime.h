#pragma once
// Process-wide settings a run needs before anything else: threads, denormals, seeds,
// and the interrupt flag that Ctrl-C sets so the trainer can checkpoint and stop.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tt/export.h"

namespace tt {

// FNV-1a 64 over bytes, continuing from `h`, and its 16 hex digits: the same on every machine
// (std::hash need not be). Replicas' parameters, a tokenizer's identity.
constexpr uint64_t kFnv1aOffset = 1469598103934665603ULL;
TT_API uint64_t fnv1a(const void* bytes, size_t n, uint64_t h = kFnv1aOffset);
TT_API std::string hex16(uint64_t h);
inline std::string fnv1a_hex(std::string_view bytes) { return hex16(fnv1a(bytes.data(), bytes.size())); }

// The intra-op threads a request stands for: `threads` when > 0; otherwise OMP_NUM_THREADS when
// it is set, as PyTorch reads it (torchrun sets it for its workers, and so does tt-run --nproc N:
// the cores shared among the N); otherwise every usable core. Throws ConfigError for an
// OMP_NUM_THREADS that is not a positive integer (a nesting list such as "4,2" gives its first).
TT_API int resolve_threads(int threads);
// OMP_NUM_THREADS as a positive integer, or 0 when it is unset or empty (ConfigError if malformed).
TT_API int threads_from_environment();
// resolve_threads(threads) at most usable_cores(): the threads a run actually uses (more than
// the cores only slow it down). Callers that want to warn about the cap compare the two.
TT_API int usable_threads(int threads);
// Sets LibTorch's intra-op threads to usable_threads(threads) and returns that count.
// LibTorch's default here is 1, so tt always sets it.
TT_API int configure_threads(int threads);
// The cores this process may run on (its CPU affinity, which containers and taskset narrow).
TT_API int usable_cores();
// What a time was measured on: the CPU's model name (/proc/cpuinfo's first "model name", else
// "unknown CPU") and the 1-minute load average (-1 where it cannot be read).
TT_API std::string cpu_model();
// Whether the CPU lists `flag` among its instruction-set flags (/proc/cpuinfo's first "flags" line
// on x86, "Features" on Arm), read once per process; false where the file cannot be read.
TT_API bool cpu_has_flag(const std::string& flag);
// tt's version (CMake's project version), as tt-run --version and summary.json give it.
TT_API const char* tt_version();
TT_API double load_average();
// Other processes' share of the machine's 1-minute load average over a measurement (the larger
// of the load before it began and the load after it less its own `threads`), or -1 where the
// load average cannot be read; and the line that warns of it under a table or summary of step
// times ("" below half a core). `whose`: "this comparison's", "this run's".
TT_API double others_load(double load_before, double load_after, int threads);
TT_API std::string load_warning(double others, const std::string& whose, const std::string& again);
TT_API void set_flush_denormal(bool on);
TT_API void seed_everything(uint64_t seed);

TT_API void request_interrupt();  // async-signal-safe
// SIGINT/SIGTERM request an interrupt and print `message` (keep it short, it is written from
// the handler); a second signal kills the process as the default would, unless one of the two
// came from the parent process (the same interrupt passed on, beside a `pkill`'s). A process still alive
// `grace` seconds after the first signal (it was in a phase that does not look at the request:
// a long setup, a checkpoint being written) prints "<program>: still in <phase> N s after the
// interrupt; stopping now ..." and exits with 130. The grace is TT_INTERRUPT_GRACE seconds from
// the environment when set (> 0), else 15. With `message_phase` set, `message` is for that phase
// only (e.g. "training": "after this batch, writing a checkpoint"); in another the line is
// "<program>: stopping (<phase>; Ctrl-C again to abort)"; a SIGTERM from tt-run --nproc after
// another worker failed (tt::dist::kStopAfterWorkerFailed) says that instead.
TT_API void install_interrupt_handlers(const char* message, const char* program = "tt",
                                       const char* message_phase = nullptr);
TT_API bool interrupt_requested();
TT_API void clear_interrupt();
TT_API int interrupt_grace_seconds();

// While one is alive the grace does not run out: a process that waits on a child process, to
// which it passed the interrupt on and which has its own grace, holds one while it waits (and
// bounds that wait itself); the grace starts again when the last hold ends.
class TT_API InterruptGraceHold {
 public:
  InterruptGraceHold();
  ~InterruptGraceHold();
  InterruptGraceHold(const InterruptGraceHold&) = delete;
  InterruptGraceHold& operator=(const InterruptGraceHold&) = delete;
};

// Work the trainer may abandon on an interrupt (a periodic evaluation: it then writes its
// checkpoint and stops at once instead of losing the steps since the last one to the grace). A
// long loop inside such work (a model's evaluate, between batches) calls stop_if_interrupted(),
// which throws Interrupted there and does nothing elsewhere; AbandonableScope marks the work.
TT_API void stop_if_interrupted();
class TT_API AbandonableScope {
 public:
  AbandonableScope();
  ~AbandonableScope();
  AbandonableScope(const AbandonableScope&) = delete;
  AbandonableScope& operator=(const AbandonableScope&) = delete;
};

// What the process is doing, for that message, as it reads after "still": "in setup",
// "training", "evaluating", "writing a checkpoint", "writing outputs"; a string literal.
// PhaseScope sets it for its lifetime.
TT_API void set_phase(const char* phase);
TT_API const char* current_phase();
class TT_API PhaseScope {
 public:
  explicit PhaseScope(const char* phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  const char* previous_;
};

// SIGSEGV, SIGFPE, SIGILL and SIGABRT print "<program>: crashed (<signal>)" and the native
// stack (addresses and symbols) to stderr, then end the process as the signal would.
TT_API void install_crash_report(const char* program);
}  // namespace tt
