#pragma once
// Process-wide settings a run needs before anything else: threads, denormals, seeds,
// and the interrupt flag that Ctrl-C sets so the trainer can checkpoint and stop.
#include <cstdint>

#include "tt/export.h"

namespace tt {
// threads <= 0 means every core. LibTorch's default here is 1, so tt always sets it.
TT_API int configure_threads(int threads);
TT_API void set_flush_denormal(bool on);
TT_API void seed_everything(uint64_t seed);

TT_API void request_interrupt();  // async-signal-safe
// SIGINT/SIGTERM request an interrupt and print `message` (keep it short, it is written from
// the handler); a second signal kills the process as the default would.
TT_API void install_interrupt_handlers(const char* message);
TT_API bool interrupt_requested();
TT_API void clear_interrupt();

// SIGSEGV, SIGFPE, SIGILL and SIGABRT print "<program>: crashed (<signal>)" and the native
// stack (addresses and symbols) to stderr, then end the process as the signal would.
TT_API void install_crash_report(const char* program);
}  // namespace tt
