#pragma once
// The memory meter: exact tensor bytes, RSS, and an optional cap.
//
// install() puts a tracking allocator in front of LibTorch's CPU allocator
// (c10::SetCPUAllocator). It counts the bytes of every live CPU tensor (current and
// peak, exact), can keep freed blocks' pages for reuse as CUDA's caching allocator does (so
// large buffers are not returned to the OS and faulted back in every step; a tensor no idle
// block fits is made of idle blocks' pages, moved, so the pages kept stay near the peak of
// live tensors), and can
// enforce a cap: an allocation that would exceed it throws c10::OutOfMemoryError,
// the error a device would raise, so OOM handling is testable without a GPU.
// With a CUDA build, device figures come from the CUDA caching allocator.
#include <cstdint>
#include <string>
#include <vector>

#include "tt/export.h"

namespace at {
class Tensor;
}

namespace tt {

struct MemorySnapshot {
  int64_t tensor_bytes = 0;       // live CPU tensor bytes (requested sizes)
  int64_t tensor_peak = 0;        // since the last reset_peak()
  int64_t cached_bytes = 0;       // freed blocks held for reuse
  int64_t reserved_bytes = 0;     // tensors' memory held: live blocks (page-rounded) + cached
  int64_t reserved_peak = 0;      // since the last reset_peak()
  int64_t rss = 0;                // process resident set size
  int64_t rss_peak = 0;           // VmHWM
  int64_t device_bytes = 0;       // CUDA allocated (CUDA builds, when a device is used)
  int64_t device_peak = 0;
};

class TT_API Meter {
 public:
  static Meter& global();
  // Installs the tracking allocator (idempotent). tt-run does it before anything else.
  void install();
  bool installed() const;

  int64_t current() const;  // live tensor bytes
  // Live tensor bytes allocated inside a BackgroundScope (the loader's prefetch of the next
  // batch) and not yet adopted, and the rest: the trainer measures what a step adds
  // (activations, optimizer state) on the foreground bytes, so a batch fetched meanwhile is not
  // counted in them.
  int64_t background_current() const;
  int64_t foreground_current() const;
  // The most background bytes live at once since install(): what the prefetch held besides peak().
  int64_t background_peak() const;
  // Makes `t`'s storage foreground from now on (it counts in peak() as if allocated now): the
  // loader hands the prefetched batch to the step with it. A foreground tensor, or one this
  // allocator did not make, is left as it is.
  void adopt(const at::Tensor& t);
  // Marks the tensors this thread allocates while it lives as background ones.
  class TT_API BackgroundScope {
   public:
    BackgroundScope();
    ~BackgroundScope();
    BackgroundScope(const BackgroundScope&) = delete;
    BackgroundScope& operator=(const BackgroundScope&) = delete;

   private:
    bool was_;
  };
  // The most foreground bytes live at once. A prefetched batch counts from when the step takes
  // it, so the peak does not depend on how the loader's thread and the step interleave (it
  // repeats run to run); the process held up to background_peak() more.
  int64_t peak() const;
  void reset_peak();        // peak := foreground, reserved_peak := reserved
  // A second peak of live tensor bytes, from a mark on, that leaves peak() alone: a plugin's
  // own measure of a phase (oom-guard's peak since its out-of-memory retry). Before any mark,
  // the peak since install().
  void mark_peak();         // peak_since_mark := foreground
  int64_t peak_since_mark() const;
  // Memory held for tensors: their blocks (whole pages while caching) and the cached ones;
  // with the tensors' peak, it tells the allocator's share of the process's RSS.
  int64_t reserved() const;
  int64_t reserved_peak() const;
  int64_t allocations() const;  // number of allocations so far

  // A timeline of live (foreground) tensor bytes: after start_trace(), every allocation and free records
  // (seconds since the start, live bytes after it), up to max_events (the first event is the
  // state at the start). For profiling one step; off (one relaxed load per allocation) otherwise.
  struct TraceEvent {
    double seconds;
    int64_t bytes;
  };
  void start_trace(size_t max_events = 1 << 20);
  std::vector<TraceEvent> stop_trace();
  double trace_time() const;  // seconds since start_trace (for marks on the timeline)

  // Cap on live CPU tensor bytes, the foreground's (what peak() measures: the loader's prefetch is
  // not refused, its batch counts once the step takes it); 0 removes it.
  void set_cap(int64_t bytes);
  int64_t cap() const;
  // Cap on the current CUDA device: the caching allocator's memory fraction (a real CUDA
  // out-of-memory error beyond it); 0 removes it. Nothing without a GPU in use.
  static void set_device_cap(int64_t bytes);

  // Keep freed blocks (>= 64 KiB) for reuse; off by default (tt-run: trainer.cache_allocations).
  void set_caching(bool on);
  bool caching() const;
  int64_t cached() const;
  void release_cache();  // give cached blocks back to the OS

  // CUDA caching allocator figures of the current device (0 without CUDA or a GPU).
  static int64_t device_current();
  static int64_t device_peak();
  static void reset_device_peak();
  // Makes cuda:index the current device: the one these statistics (and kernels launched
  // without a device) refer to. A no-op on CPU builds.
  static void use_device(int index);

  static int64_t rss();
  static int64_t rss_peak();
  static int64_t rss_anon();  // RssAnon: resident memory not backed by files (mmap'd data excluded)
  // Gives back the resident pages of the shared libraries' read-only mappings (their code and
  // constants; madvise MADV_PAGEOUT, Linux 5.4+): LibTorch loads some 290 libraries and set-up
  // touches far more of them than a training step does. The kernel reads back any page touched
  // again; pages another process maps too are left alone, and written (copied) pages are never
  // dropped. Returns how far RSS fell (0 where the kernel refuses).
  static int64_t release_library_pages();
  // Starts a new peak RSS (via /proc/self/clear_refs; a no-op where refused). The kernel's
  // high-water mark, and so getrusage's ru_maxrss and /usr/bin/time's figure, then counts from
  // here: the mark reached before is kept for process_rss_peak().
  static void reset_rss_peak();
  static int64_t process_rss_peak();  // the process's peak RSS since it started, across resets
  // What can be allocated without swapping or pushing out working memory: the system's
  // MemAvailable (/proc/meminfo: free memory plus reclaimable page cache), or less where this
  // process's memory cgroup (a container's limit; v2 or v1) leaves less; 0 if unknown.
  static int64_t available();

  MemorySnapshot snapshot() const;
};

}  // namespace tt
