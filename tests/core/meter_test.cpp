#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "test_support.h"
#include "tt/meter.h"

using tt::Meter;

TEST(Meter, KnownAllocationMovesCurrentAndPeakByItsBytes) {
  Meter& m = Meter::global();
  ASSERT_TRUE(m.installed());
  m.set_caching(false);
  const int64_t before = m.current();
  m.reset_peak();
  {
    auto t = torch::empty({1000, 1000}, torch::kFloat);
    EXPECT_EQ(m.current() - before, 4000000);
    EXPECT_EQ(m.peak() - before, 4000000);
    auto u = torch::empty({333}, torch::kDouble);
    EXPECT_EQ(m.current() - before, 4000000 + 333 * 8);
  }
  EXPECT_EQ(m.current(), before);
  EXPECT_EQ(m.peak() - before, 4000000 + 333 * 8);
  m.reset_peak();
  EXPECT_EQ(m.peak(), m.current());
}

TEST(Meter, CapRaisesTheDeviceOutOfMemoryError) {
  Meter& m = Meter::global();
  m.set_cap(m.current() + (1 << 20));
  auto small = torch::empty({1000}, torch::kFloat);  // fits
  try {
    auto big = torch::empty({1 << 20}, torch::kFloat);  // 4 MiB does not
    FAIL() << "no out-of-memory error";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("tt memory cap exceeded: tried to allocate 4.00 MiB"), std::string::npos)
        << e.what();
  }
  // the cap is on what the peak measures: the loader's prefetch is not refused, and its batch
  // counts once the step takes it
  m.set_cap(m.foreground_current() + (1 << 20));
  torch::Tensor prefetched;
  std::thread([&] {
    Meter::BackgroundScope scope;
    prefetched = torch::empty({1 << 20}, torch::kFloat);
  }).join();
  EXPECT_EQ(prefetched.numel(), 1 << 20);
  m.adopt(prefetched);
  EXPECT_THROW(torch::empty({1000}, torch::kFloat), c10::OutOfMemoryError);
  m.set_cap(0);
  auto big = torch::empty({1 << 20}, torch::kFloat);
  EXPECT_EQ(big.numel(), 1 << 20);
}

// A cached block is whole pages: the tensor's bytes and the 64-byte header before them.
int64_t block_bytes(int64_t n) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  return (n + 64 + page - 1) / page * page;
}

TEST(Meter, CachingReusesFreedBlocksAndReleases) {
  Meter& m = Meter::global();
  m.set_caching(true);
  void* first;
  {
    auto t = torch::empty({2 << 20}, torch::kFloat);
    first = t.data_ptr();
  }
  EXPECT_GE(m.cached(), block_bytes(8 << 20));
  const int64_t cached = m.cached();
  {
    auto t = torch::empty({2 << 20}, torch::kFloat);
    EXPECT_EQ(t.data_ptr(), first);  // the same block came back
    EXPECT_EQ(m.cached(), cached - block_bytes(8 << 20));
  }
  m.release_cache();
  EXPECT_EQ(m.cached(), 0);
  m.set_caching(false);
}

// A smaller tensor takes the head of a larger idle block; the rest stays cached for others.
TEST(Meter, CachingServesASmallerTensorFromPartOfALargerBlock) {
  Meter& m = Meter::global();
  m.release_cache();
  m.set_caching(true);
  { auto big = torch::empty({8 << 20}, torch::kFloat); }  // 32 MiB
  const int64_t held = m.reserved();
  const int64_t cached = m.cached();
  {
    auto quarter = torch::ones({2 << 20}, torch::kFloat);
    EXPECT_EQ(m.reserved(), held);
    EXPECT_EQ(m.cached(), cached - block_bytes(8 << 20));
    auto other = torch::ones({2 << 20}, torch::kFloat);  // from the same block's rest
    EXPECT_EQ(m.reserved(), held);
    EXPECT_EQ((quarter + other).sum().item<double>(), 2.0 * (2 << 20));
  }
  m.release_cache();
  m.set_caching(false);
}

// The pages of idle blocks serve a tensor none of them holds: they are moved into it (mremap),
// so the memory held does not grow and the process's anonymous RSS does not either, where
// fresh pages would have added the tensor's 32 MiB.
TEST(Meter, CachedPagesServeALargerTensorWithoutGrowingTheMemoryHeld) {
  Meter& m = Meter::global();
  m.release_cache();
  m.set_caching(true);
  std::vector<torch::Tensor> spacers;  // live between the freed blocks, so no two are neighbours
  {
    std::vector<torch::Tensor> parts;
    for (int i = 0; i < 4; ++i) {
      parts.push_back(torch::full({2 << 20}, static_cast<float>(i + 1)));  // 8 MiB each, written
      spacers.push_back(torch::empty({1 << 16}, torch::kFloat));
    }
  }
  EXPECT_EQ(m.cached(), 4 * block_bytes(8 << 20));
  const int64_t held = m.reserved();
  const int64_t anon = Meter::rss_anon();
  {
    auto whole = torch::empty({8 << 20}, torch::kFloat);  // 32 MiB
    EXPECT_EQ(m.reserved(), held);
    EXPECT_EQ(m.cached(), 4 * block_bytes(8 << 20) - block_bytes(32 << 20));
    // Before it is written, its pages still hold what the freed tensors wrote: moved, not fresh.
    const float first = whole[0].item<float>();
    EXPECT_TRUE(first >= 1.0f && first <= 4.0f) << first;
    whole.fill_(5.0f);
    EXPECT_EQ(whole.sum().item<double>(), 5.0 * (8 << 20));
    EXPECT_LT(Meter::rss_anon() - anon, 4 << 20);
  }
  m.release_cache();
  EXPECT_EQ(m.cached(), 0);
  m.set_caching(false);
}

// Ten steps of one mixed sequence of allocations and frees (64 KiB to 6 MiB), each tensor
// written with its own value and checked before it is freed, so two live tensors sharing pages
// would show. The pool maps fresh pages only when no idle ones are left, so what it holds peaks
// at exactly the live blocks' peak, in the first step and every step after.
TEST(Meter, PooledTensorsNeverOverlapAndTheHoldPeaksAtTheLiveBlocksPeak) {
  Meter& m = Meter::global();
  m.release_cache();
  m.set_caching(true);
  std::mt19937 rng(7);
  struct Op {
    bool alloc;
    int64_t floats;  // alloc: the size
    size_t victim;   // free: index into the live list
  };
  std::vector<Op> ops;
  size_t live_n = 0;
  for (int i = 0; i < 80; ++i) {
    if (live_n > 0 && rng() % 3 == 0) {
      ops.push_back({false, 0, rng() % live_n});
      --live_n;
    } else {
      ops.push_back({true, static_cast<int64_t>((16 << 10) + rng() % (1536 << 10)), 0});
      ++live_n;
    }
  }
  int64_t expected = 0;  // the live blocks' peak over a step
  {
    int64_t now = 0;
    std::vector<int64_t> sizes;
    for (const Op& op : ops) {
      if (op.alloc) {
        sizes.push_back(block_bytes(op.floats * 4));
        now += sizes.back();
        expected = std::max(expected, now);
      } else {
        now -= sizes[op.victim];
        sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(op.victim));
      }
    }
  }
  // Checked in place: a comparison tensor would be one more block in the pool.
  const auto holds = [](const torch::Tensor& t, float value) {
    const float* p = t.data_ptr<float>();
    return std::all_of(p, p + t.numel(), [value](float x) { return x == value; });
  };
  m.reset_peak();
  const int64_t before = m.reserved();
  float id = 0;
  for (int step = 0; step < 10; ++step) {
    std::vector<std::pair<torch::Tensor, float>> live;
    for (const Op& op : ops) {
      if (op.alloc) {
        id += 1;
        live.emplace_back(torch::full({op.floats}, id), id);
      } else {
        auto& [t, value] = live[op.victim];
        ASSERT_TRUE(holds(t, value)) << "tensor " << value << " was overwritten (step " << step << ")";
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(op.victim));
      }
    }
    for (auto& [t, value] : live) ASSERT_TRUE(holds(t, value)) << "tensor " << value << " was overwritten";
    live.clear();
    EXPECT_EQ(m.reserved_peak() - before, expected) << "step " << step;
  }
  m.release_cache();
  m.set_caching(false);
}

TEST(Meter, CountsTensorsFromEveryThread) {
  Meter& m = Meter::global();
  m.set_caching(false);
  const int64_t before = m.current();
  std::vector<torch::Tensor> kept(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&kept, i] { kept[i] = torch::empty({250000}, torch::kFloat); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.current() - before, 4 * 1000000);
}

TEST(Meter, ResidentSetSize) {
  EXPECT_GT(Meter::rss(), 1 << 20);
  EXPECT_GE(Meter::rss_peak(), Meter::rss() - (1 << 20));
  auto s = Meter::global().snapshot();
  EXPECT_EQ(s.tensor_bytes, Meter::global().current());
}

namespace {
// A file of `bytes` random bytes, written and synced (its pages clean), mapped private.
struct MappedFile {
  void* at = MAP_FAILED;
  size_t bytes = 0;
  MappedFile(const std::filesystem::path& path, size_t n, int prot, uint32_t seed) : bytes(n) {
    std::vector<uint32_t> words(n / 4);
    std::mt19937 rng(seed);
    for (auto& w : words) w = rng();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(words.data()), static_cast<std::streamsize>(n));
    const int fd = ::open(path.c_str(), O_RDONLY);
    ::fsync(fd);
    at = ::mmap(nullptr, n, prot, MAP_PRIVATE, fd, 0);
    ::close(fd);
  }
  ~MappedFile() {
    if (at != MAP_FAILED) ::munmap(at, bytes);
  }
  uint64_t sum() const {  // touches every page
    uint64_t total = 0;
    const auto* w = static_cast<const uint32_t*>(at);
    for (size_t i = 0; i < bytes / 4; ++i) total += w[i];
    return total;
  }
};
}  // namespace

// Meter::release_library_pages drops the resident pages of read-only mappings of shared libraries
// (a file named like one, here 16 MiB of random bytes, read through): the process's RSS falls
// by about their size and the bytes read back the same. A writable mapping of a library file
// (whose written pages a drop would lose) and a read-only mapping of another file (a dataset,
// named with ".so" inside)
// keep their pages. Where the kernel has no MADV_PAGEOUT (before Linux 5.4) there is nothing to
// test.
TEST(Meter, ReleasingLibraryPagesDropsReadOnlyLibraryMappingsAndTheirBytesReadBack) {
  const auto dir = std::filesystem::temp_directory_path() / ("tt-meter-pages-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    constexpr size_t kBytes = 16 << 20;
    MappedFile lib(dir / "libfake.so.1", kBytes, PROT_READ, 1);
    MappedFile written(dir / "libwritten.so", 1 << 20, PROT_READ | PROT_WRITE, 2);
    MappedFile data(dir / "rows.sorted.npy", 4 << 20, PROT_READ, 3);  // ".so" inside, not a library
    ASSERT_NE(lib.at, MAP_FAILED);
    ASSERT_NE(written.at, MAP_FAILED);
    ASSERT_NE(data.at, MAP_FAILED);
    if (::madvise(lib.at, 4096, MADV_PAGEOUT) != 0 && errno == EINVAL)
      GTEST_SKIP() << "this kernel has no MADV_PAGEOUT (Linux 5.4+)";
    const uint64_t lib_sum = lib.sum(), data_sum = data.sum();
    std::memset(written.at, 0x5a, written.bytes);
    auto rss = [&](const char* name) { return tt::test::mapped_rss_kb(dir / name) * 1024; };
    ASSERT_GE(rss("libfake.so.1"), static_cast<int64_t>(kBytes) - (1 << 20));
    const int64_t data_rss = rss("rows.sorted.npy"), written_rss = rss("libwritten.so");
    ASSERT_EQ(written_rss, static_cast<int64_t>(written.bytes));

    const int64_t released = Meter::release_library_pages();
    EXPECT_LT(rss("libfake.so.1"), 1 << 20);
    EXPECT_GE(released, static_cast<int64_t>(kBytes) - (2 << 20));
    EXPECT_EQ(rss("rows.sorted.npy"), data_rss);
    EXPECT_EQ(rss("libwritten.so"), written_rss);
    EXPECT_EQ(lib.sum(), lib_sum);  // read back from the file
    EXPECT_EQ(data.sum(), data_sum);
    const auto* w = static_cast<const unsigned char*>(written.at);
    EXPECT_TRUE(std::all_of(w, w + written.bytes, [](unsigned char c) { return c == 0x5a; }));
    // LibTorch, whose pages went too, still computes
    const auto a = torch::arange(12, torch::kFloat).view({3, 4});
    EXPECT_EQ(a.mm(a.t()).sum().item<float>(), 1134.0f);  // |column sums|^2
  }
  std::filesystem::remove_all(dir);
}

// Meter::available: MemAvailable, and no more than a memory cgroup leaves. The cgroup part runs
// where a memory cgroup can be made (root with cgroup v1's memory controller or cgroup v2):
// a child moved into one limited to 256 MiB must see at most that.
TEST(Meter, AvailableMemoryIsTheSystemsOrLessUnderACgroupLimit) {
  const int64_t available = Meter::available();
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t total_kb = 0;
  while (meminfo >> key) {
    if (key == "MemTotal:") {
      meminfo >> total_kb;
      break;
    }
  }
  ASSERT_GT(total_kb, 0);
  EXPECT_GT(available, 16 << 20);
  EXPECT_LE(available, total_kb * 1024);

  namespace fs = std::filesystem;
  const std::string name = "tt-test-" + std::to_string(::getpid());
  fs::path dir, limit, procs;
  std::error_code ec;
  if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
    dir = fs::path("/sys/fs/cgroup/memory") / name;
    limit = dir / "memory.limit_in_bytes";
  } else if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    dir = fs::path("/sys/fs/cgroup") / name;
    limit = dir / "memory.max";
  }
  if (dir.empty() || !fs::create_directory(dir, ec)) GTEST_SKIP() << "no memory cgroup can be made here (needs root)";
  if (!fs::exists(limit)) {
    fs::remove(dir, ec);
    GTEST_SKIP() << "a cgroup made here has no memory controller";
  }
  procs = dir / "cgroup.procs";
  { std::ofstream(limit) << (256 << 20); }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    { std::ofstream(procs) << ::getpid(); }
    std::ifstream mine("/proc/self/cgroup");
    std::string line;
    bool moved = false;
    while (std::getline(mine, line)) moved = moved || line.find(name) != std::string::npos;
    const int64_t seen = moved ? Meter::available() : -2;  // -2: the move was refused
    const ssize_t w = ::write(fds[1], &seen, sizeof seen);
    ::_exit(w == sizeof seen ? 0 : 1);
  }
  int64_t seen = -1;
  const ssize_t r = ::read(fds[0], &seen, sizeof seen);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  fs::remove(dir, ec);  // empty once the child has exited
  ASSERT_EQ(r, static_cast<ssize_t>(sizeof seen));
  if (seen == -2) GTEST_SKIP() << "a memory cgroup was made but this process may not move into it";
  EXPECT_GT(seen, 0);
  EXPECT_LE(seen, int64_t{256} << 20) << "a child limited to 256 MiB was told " << seen << " bytes are available";
}

// A batch the loader prefetches on its thread while a step runs is a background tensor: it
// counts in current() but not in foreground_current(), from allocation to free (wherever it
// is freed), so the step's measured activations and optimizer state do not include it.
TEST(Meter, BackgroundTensorsAreKeptApartFromTheForeground) {
  Meter& m = Meter::global();
  ASSERT_TRUE(m.installed());
  const int64_t cur0 = m.current(), fg0 = m.foreground_current(), bg0 = m.background_current();
  torch::Tensor prefetched;
  std::thread([&] {
    Meter::BackgroundScope scope;
    prefetched = torch::empty({1000}, torch::kFloat);
  }).join();
  auto step = torch::empty({500}, torch::kFloat);  // the foreground's own
  EXPECT_EQ(m.current() - cur0, 6000);
  EXPECT_EQ(m.background_current() - bg0, 4000);
  EXPECT_EQ(m.foreground_current() - fg0, 2000);
  {
    Meter::BackgroundScope nested;
    { Meter::BackgroundScope inner; }
    auto also = torch::empty({10}, torch::kFloat);  // still inside the outer scope
    EXPECT_EQ(m.background_current() - bg0, 4040);
  }
  auto after = torch::empty({10}, torch::kFloat);  // the scope ended
  EXPECT_EQ(m.background_current() - bg0, 4000);
  prefetched = torch::Tensor();  // freed on this thread
  EXPECT_EQ(m.background_current(), bg0);
  EXPECT_EQ(m.foreground_current() - fg0, 2040);
}

// The peak follows the foreground: a batch prefetched during the step's peak does not raise it
// (whether it did depended on how the two threads interleaved, so peaks varied run to run); it
// counts from when the step takes it (adopt), as if the step had read it then, and
// background_peak() says what the prefetch held besides.
TEST(Meter, APrefetchedBatchCountsInThePeakFromWhenTheStepTakesIt) {
  Meter& m = Meter::global();
  ASSERT_TRUE(m.installed());
  m.set_caching(false);
  m.reset_peak();
  const int64_t fg0 = m.foreground_current(), bg0 = m.background_current();
  // background_peak() counts from install(): the loader's temporary is made larger than what an
  // earlier test in this process held, so that this prefetch sets the peak whatever ran before
  const int64_t scratch_numel = 2000 + (m.background_peak() - bg0) / 4;
  torch::Tensor batch;
  std::thread([&] {
    Meter::BackgroundScope scope;
    auto scratch = torch::empty({scratch_numel}, torch::kFloat);  // the loader's own, freed there
    batch = torch::empty({1000}, torch::kFloat);
  }).join();
  EXPECT_EQ(m.peak(), fg0);  // nothing of the prefetch
  EXPECT_EQ(m.background_peak() - bg0, 4 * (scratch_numel + 1000));
  const torch::Tensor view = batch.slice(0, 0, 10);
  m.adopt(batch);
  m.adopt(view);  // the same storage: counted once
  EXPECT_EQ(m.background_current(), bg0);
  EXPECT_EQ(m.foreground_current() - fg0, 4000);
  EXPECT_EQ(m.peak() - fg0, 4000);
  auto foreground = torch::empty({500}, torch::kFloat);
  m.adopt(foreground);  // already the foreground's: unchanged
  EXPECT_EQ(m.foreground_current() - fg0, 6000);
  batch = torch::Tensor();
  EXPECT_EQ(m.foreground_current() - fg0, 6000);  // the view still holds the storage
  EXPECT_EQ(m.peak() - fg0, 6000);
}
