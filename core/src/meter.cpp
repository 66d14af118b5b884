#include "tt/meter.h"

#include <chrono>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

#include "tt/error.h"

#include <atomic>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "tt/compat.h"
#include "page_pool.h"
#include "tt/options.h"

#if TT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace tt {
namespace {
#if TT_WITH_CUDA
bool device_allocator_ready() {
  if (c10::cuda::device_count() == 0) return false;
#if TT_TORCH_AT_LEAST(2, 0)
  return c10::cuda::CUDACachingAllocator::get()->initialized();
#else
  return true;
#endif
}
#endif

// Each block starts with this header; the tensor data follows at kHeader bytes (keeping
// the 64-byte alignment LibTorch's CPU allocator guarantees). The DataPtr's context is
// the data pointer itself, so raw_allocate/raw_deleter work too.
constexpr size_t kHeader = 64;
constexpr size_t kCacheMin = 64 * 1024;  // smaller blocks are glibc malloc's business
struct Header {
  size_t requested;        // bytes the tensor asked for
  PagePool::Block* block;  // its pages in the pool; nullptr: from malloc (c10::alloc_cpu)
  bool background;         // allocated inside a Meter::BackgroundScope
};
static_assert(sizeof(Header) <= kHeader, "the header must fit before the data");
thread_local bool t_background = false;

void raise_to(std::atomic<int64_t>& peak, int64_t now) {
  int64_t p = peak.load();
  while (now > p && !peak.compare_exchange_weak(p, now)) {
  }
}

class TrackingAllocator final : public c10::Allocator {
 public:
  // current = foreground + background; peak and marked_peak are foreground peaks
  std::atomic<int64_t> current{0}, peak{0}, count{0}, cap{0}, cached{0}, marked_peak{0};
  std::atomic<int64_t> foreground{0}, background{0}, background_peak{0};
  // Reserved: the pool's pages (live and idle) plus the live blocks malloc holds.
  std::atomic<int64_t> pooled{0}, unpooled{0}, reserved_peak{0};
  std::atomic<bool> caching{false};
  std::atomic<bool> tracing{false};
  std::mutex trace_mu;
  std::vector<Meter::TraceEvent> trace;
  std::chrono::steady_clock::time_point trace_t0;
  size_t trace_max = 0;

  void record(int64_t now_bytes) {
    std::lock_guard<std::mutex> lock(trace_mu);
    if (!tracing.load() || trace.size() >= trace_max) return;
    trace.push_back({std::chrono::duration<double>(std::chrono::steady_clock::now() - trace_t0).count(), now_bytes});
  }

  c10::DataPtr allocate(size_t n) TT_ALLOCATOR_CONST override {
    auto* self = const_cast<TrackingAllocator*>(this);
    return self->do_allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &TrackingAllocator::deleter; }
#if TT_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
#endif

  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    pool_.release();
    sync_pool();
  }
  int64_t reserved() const { return pooled.load() + unpooled.load(); }

  static void deleter(void* data);

 private:
  void sync_pool() {  // under mu_
    cached.store(static_cast<int64_t>(pool_.idle()));
    pooled.store(static_cast<int64_t>(pool_.mapped()));
  }

  c10::DataPtr do_allocate(size_t n) {
    // The cap is on what the peak measures: the foreground's bytes (a batch the loader prefetches
    // counts once the step takes it), so a run planned by its measured peak fits under it.
    const int64_t c = cap.load();
    if (c > 0 && !t_background && foreground.load() + static_cast<int64_t>(n) > c) {
      release_cache();
      TORCH_CHECK_WITH(OutOfMemoryError, false, "tt memory cap exceeded: tried to allocate ", format_bytes(n),
                       "; ", format_bytes(foreground.load()), " of tensors are live and the cap is ", format_bytes(c),
                       " (trainer.memory_cap)");
    }
    void* base = nullptr;
    PagePool::Block* block = nullptr;
    if (caching.load() && n >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      block = pool_.take(n + kHeader);
      if (!block) {  // no address space or memory for fresh pages: try again without the idle ones
        pool_.release();
        block = pool_.take(n + kHeader);
      }
      sync_pool();
      TORCH_CHECK_WITH(OutOfMemoryError, block, "tt: the system could not map ", format_bytes(n),
                       " for a tensor (", format_bytes(current.load()), " of tensors are live)");
      base = block->base;
    } else {
      base = c10::alloc_cpu(n + kHeader);
      unpooled.fetch_add(static_cast<int64_t>(n + kHeader));
    }
    raise_to(reserved_peak, reserved());
    auto* h = static_cast<Header*>(base);
    h->requested = n;
    h->block = block;
    h->background = t_background;
    current.fetch_add(static_cast<int64_t>(n));
    count.fetch_add(1);
    if (t_background) {
      raise_to(background_peak, background.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n));
    } else {
      raise_foreground(static_cast<int64_t>(n));
    }
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &TrackingAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
  }

  // `n` more foreground bytes: the peaks (and the trace) follow the foreground.
  void raise_foreground(int64_t n) {
    const int64_t now = foreground.fetch_add(n) + n;
    raise_to(peak, now);
    raise_to(marked_peak, now);
    if (tracing.load(std::memory_order_relaxed)) record(now);
  }

 public:
  // A background block becomes foreground (the step took the prefetched batch it belongs to).
  void adopt(void* data) {
    auto* h = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeader);
    if (!h->background) return;
    h->background = false;
    background.fetch_sub(static_cast<int64_t>(h->requested));
    raise_foreground(static_cast<int64_t>(h->requested));
  }

 private:
  void free_block(void* data) {
    void* base = static_cast<char*>(data) - kHeader;
    auto* h = static_cast<Header*>(base);
    current.fetch_sub(static_cast<int64_t>(h->requested));
    if (h->background) {
      background.fetch_sub(static_cast<int64_t>(h->requested));
    } else {
      const int64_t now = foreground.fetch_sub(static_cast<int64_t>(h->requested)) - static_cast<int64_t>(h->requested);
      if (tracing.load(std::memory_order_relaxed)) record(now);
    }
    if (h->block) {
      std::lock_guard<std::mutex> lock(mu_);
      pool_.give(h->block);
      if (!caching.load()) pool_.release();
      sync_pool();
      return;
    }
    unpooled.fetch_sub(static_cast<int64_t>(h->requested + kHeader));
    c10::free_cpu(base);
  }

  std::mutex mu_;
  PagePool pool_;
};

TrackingAllocator* g_alloc = nullptr;

void TrackingAllocator::deleter(void* data) {
  if (data) g_alloc->free_block(data);
}

std::once_flag g_install;

int64_t read_kb(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const size_t len = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, len, key) == 0) return std::stoll(line.substr(len + 1)) * 1024;
  return 0;
}

int64_t read_status_kb(const char* key) { return read_kb("/proc/self/status", key); }

}  // namespace

Meter& Meter::global() {
  static Meter m;
  return m;
}

void Meter::install() {
  std::call_once(g_install, [] {
    g_alloc = new TrackingAllocator();  // never freed: tensors may outlive everything
    c10::SetCPUAllocator(g_alloc, /*priority=*/100);
  });
}

bool Meter::installed() const { return g_alloc != nullptr; }
int64_t Meter::current() const { return g_alloc ? g_alloc->current.load() : 0; }
int64_t Meter::background_current() const { return g_alloc ? g_alloc->background.load() : 0; }
int64_t Meter::foreground_current() const { return g_alloc ? g_alloc->foreground.load() : 0; }
int64_t Meter::background_peak() const { return g_alloc ? g_alloc->background_peak.load() : 0; }
void Meter::adopt(const at::Tensor& t) {
  if (!g_alloc || !t.defined() || !t.has_storage() || t.device().type() != c10::DeviceType::CPU) return;
  const c10::DataPtr& p = t.storage().data_ptr();
  if (p.get() && p.get_deleter() == &TrackingAllocator::deleter) g_alloc->adopt(p.get());
}
Meter::BackgroundScope::BackgroundScope() : was_(t_background) { t_background = true; }
Meter::BackgroundScope::~BackgroundScope() { t_background = was_; }
int64_t Meter::peak() const { return g_alloc ? g_alloc->peak.load() : 0; }
void Meter::reset_peak() {
  if (!g_alloc) return;
  g_alloc->peak.store(g_alloc->foreground.load());
  g_alloc->reserved_peak.store(g_alloc->reserved());
}
void Meter::mark_peak() {
  if (g_alloc) g_alloc->marked_peak.store(g_alloc->foreground.load());
}
int64_t Meter::peak_since_mark() const { return g_alloc ? g_alloc->marked_peak.load() : 0; }
int64_t Meter::reserved() const { return g_alloc ? g_alloc->reserved() : 0; }
int64_t Meter::reserved_peak() const { return g_alloc ? g_alloc->reserved_peak.load() : 0; }
int64_t Meter::allocations() const { return g_alloc ? g_alloc->count.load() : 0; }
void Meter::start_trace(size_t max_events) {
  TT_CHECK(g_alloc, "Meter::start_trace: the meter is not installed");
  std::lock_guard<std::mutex> lock(g_alloc->trace_mu);
  g_alloc->trace.clear();
  g_alloc->trace.reserve(max_events);
  g_alloc->trace_max = max_events;
  g_alloc->trace_t0 = std::chrono::steady_clock::now();
  g_alloc->trace.push_back({0.0, g_alloc->foreground.load()});
  g_alloc->tracing.store(true);
}

std::vector<Meter::TraceEvent> Meter::stop_trace() {
  if (!g_alloc) return {};
  g_alloc->tracing.store(false);
  std::lock_guard<std::mutex> lock(g_alloc->trace_mu);
  std::vector<TraceEvent> out;
  out.swap(g_alloc->trace);
  return out;
}

double Meter::trace_time() const {
  return g_alloc ? std::chrono::duration<double>(std::chrono::steady_clock::now() - g_alloc->trace_t0).count() : 0.0;
}

void Meter::set_cap(int64_t bytes) {
  install();
  g_alloc->cap.store(bytes);
}
int64_t Meter::cap() const { return g_alloc ? g_alloc->cap.load() : 0; }
void Meter::set_caching(bool on) {
  install();
  g_alloc->caching.store(on);
  if (!on) g_alloc->release_cache();
}
bool Meter::caching() const { return g_alloc && g_alloc->caching.load(); }
int64_t Meter::cached() const { return g_alloc ? g_alloc->cached.load() : 0; }
void Meter::release_cache() {
  if (g_alloc) g_alloc->release_cache();
  malloc_trim(0);  // and the free pages inside malloc's heaps (small tensors, set-up's temporaries)
#if TT_WITH_CUDA
  if (device_allocator_ready()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

int64_t Meter::rss() {
  // Called every step: one pread on a descriptor kept open, not an ifstream.
  static const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  static const long page = sysconf(_SC_PAGESIZE);
  char buf[128];
  const ssize_t n = fd >= 0 ? ::pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (n <= 0) return 0;
  buf[n] = '\0';
  long long size = 0, resident = 0;
  if (std::sscanf(buf, "%lld %lld", &size, &resident) != 2) return 0;
  return resident * page;
}
int64_t Meter::rss_peak() { return read_status_kb("VmHWM:"); }
int64_t Meter::rss_anon() { return read_status_kb("RssAnon:"); }
namespace {
// A number in a cgroup file ("max" and values of no limit read as -1).
int64_t read_cgroup_bytes(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  try {
    const long long v = std::stoll(word);
    return v <= 0 || v >= (1LL << 60) ? -1 : v;  // cgroup v1 writes its "no limit" as ~2^63
  } catch (const std::exception&) {
    return -1;
  }
}

// What this process's memory cgroup (v2, or v1's memory controller) still allows: its limit less
// its usage, or -1 without a limit. /proc/meminfo knows nothing of a container's limit.
int64_t cgroup_headroom() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  int64_t headroom = -1;
  auto take = [&](const std::string& limit, const std::string& usage) {
    const int64_t l = read_cgroup_bytes(limit), u = read_cgroup_bytes(usage);
    if (l < 0) return;
    const int64_t h = std::max<int64_t>(0, l - std::max<int64_t>(0, u));
    headroom = headroom < 0 ? h : std::min(headroom, h);
  };
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty())  // v2: one hierarchy
      take("/sys/fs/cgroup" + path + "/memory.max", "/sys/fs/cgroup" + path + "/memory.current");
    else if (("," + controllers + ",").find(",memory,") != std::string::npos)
      take("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes",
           "/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
  }
  return headroom;
}
}  // namespace

int64_t Meter::available() {
  const int64_t system = read_kb("/proc/meminfo", "MemAvailable:");
  const int64_t cgroup = cgroup_headroom();
  if (cgroup < 0) return system;
  return system > 0 ? std::min(system, cgroup) : cgroup;
}
int64_t Meter::release_library_pages() {
#ifdef MADV_PAGEOUT
  const int64_t before = rss();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // "begin-end perms offset dev inode path": a shared library's mapping that is not writable
    unsigned long begin = 0, end = 0;
    char perms[8] = {0};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %*s %*s %*s %n", &begin, &end, perms, &path_at) < 3 || path_at <= 0)
      continue;
    const std::string path = line.substr(static_cast<size_t>(path_at));
    const std::string name = path.substr(path.rfind('/') + 1);
    const size_t so = name.find(".so");  // libx.so, libx.so.1.2 (not rows.sorted.npy)
    const bool library = !path.empty() && path[0] == '/' && so != std::string::npos &&
                         (so + 3 == name.size() || name[so + 3] == '.');
    if (perms[1] == 'w' || !library) continue;
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);  // EINVAL before Linux 5.4: kept
  }
  return std::max<int64_t>(0, before - rss());
#else
  return 0;
#endif
}
namespace {
std::atomic<int64_t> g_rss_peak_before_reset{0};  // the highest mark a reset cleared
}  // namespace
void Meter::reset_rss_peak() {
  raise_to(g_rss_peak_before_reset, rss_peak());
  std::ofstream out("/proc/self/clear_refs");
  if (out) out << "5";
}
int64_t Meter::process_rss_peak() { return std::max(g_rss_peak_before_reset.load(), rss_peak()); }

#if TT_WITH_CUDA
// Until the first CUDA allocation the caching allocator has no state for any device: its
// statistics and settings throw ("Allocator not initialized", "Invalid device argument").
static bool have_gpu() { return device_allocator_ready(); }
static c10::cuda::CUDACachingAllocator::DeviceStats device_stats() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
}
// index 0 is StatType::AGGREGATE in every version (the enum moved namespaces in 2.x)
int64_t Meter::device_current() { return have_gpu() ? device_stats().allocated_bytes[0].current : 0; }
int64_t Meter::device_peak() { return have_gpu() ? device_stats().allocated_bytes[0].peak : 0; }
void Meter::reset_device_peak() {
  if (have_gpu()) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
}
void Meter::use_device(int index) {
  if (c10::cuda::device_count() > 0) c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}
// The cap on a GPU: the caching allocator's memory fraction of the current device, beyond which
// CUDA allocations fail with the out-of-memory error a full device raises. The fraction counts
// what the allocator reserves (its cache included), the nearest CUDA has to live bytes.
void Meter::set_device_cap(int64_t bytes) {
  if (!have_gpu()) return;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess || total_bytes == 0) {
    (void)cudaGetLastError();
    return;
  }
  const double fraction =
      bytes > 0 ? std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total_bytes)) : 1.0;
  if (bytes > 0) c10::cuda::CUDACachingAllocator::emptyCache();  // cached blocks count against it
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, c10::cuda::current_device());
}
#else
int64_t Meter::device_current() { return 0; }
int64_t Meter::device_peak() { return 0; }
void Meter::reset_device_peak() {}
void Meter::use_device(int) {}
void Meter::set_device_cap(int64_t) {}
#endif

MemorySnapshot Meter::snapshot() const {
  MemorySnapshot s;
  s.tensor_bytes = current();
  s.tensor_peak = peak();
  s.cached_bytes = cached();
  s.reserved_bytes = reserved();
  s.reserved_peak = reserved_peak();
  s.rss = rss();
  s.rss_peak = rss_peak();
  s.device_bytes = device_current();
  s.device_peak = device_peak();
  return s;
}

}  // namespace tt
