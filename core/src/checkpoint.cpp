#include "tt/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>

#include "atomic_file.h"
#include "tt/error.h"

namespace fs = std::filesystem;

namespace tt {
namespace {

std::atomic<int> g_writes{0};

// TT_FAULT_CHECKPOINT_CRASH="N:BYTES": crash during the N-th checkpoint write (testing).
bool crash_plan(int write_index, int64_t& after_bytes) {
  const char* env = std::getenv("TT_FAULT_CHECKPOINT_CRASH");
  if (!env) return false;
  int n = 0;
  long long b = 0;
  if (std::sscanf(env, "%d:%lld", &n, &b) != 2 || n != write_index) return false;
  after_bytes = b;
  return true;
}

}  // namespace

void save_archive_atomic(torch::serialize::OutputArchive& archive, const fs::path& path) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  fs::create_directories(dir);
  AtomicFile file(path);
  const int index = ++g_writes;
  int64_t crash_after = -1;
  const bool crash = crash_plan(index, crash_after);
  try {
    // LibTorch's stream writer calls the writer again from its destructor (to end the zip) while
    // an exception unwinds: AtomicFile::write never throws, commit() reports.
    archive.save_to([&](const void* data, size_t n) -> size_t {
      if (crash && file.written() + static_cast<int64_t>(n) >= crash_after) {
        file.write(data, static_cast<size_t>(std::max<int64_t>(0, crash_after - file.written())));
        ::_exit(86);  // simulated crash mid-write
      }
      file.write(data, n);
      return n;
    });
  } catch (const std::exception& e) {
    file.fail(e.what());
  }
  std::error_code ec;
  bool earlier = false;  // a checkpoint before this one, which a failed write leaves as it was
  for (const auto& e : fs::directory_iterator(dir, ec))
    earlier = earlier || (e.path() != path && e.path().extension() == ".pt");
  file.commit("cannot write checkpoint", earlier ? "(disk full? the earlier checkpoints are kept)" : "(disk full?)");
}

at::Tensor bytes_to_tensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string tensor_to_bytes(const at::Tensor& tensor) {
  TT_CHECK(tensor.scalar_type() == at::kByte && tensor.dim() == 1, "expected a 1-D uint8 tensor of bytes, got ",
           tensor.scalar_type(), " of ", tensor.dim(), " dimensions");
  const at::Tensor t = tensor.contiguous();
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()));
}

fs::path checkpoint_path(const fs::path& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.pt", static_cast<long long>(step));
  return dir / name;
}

std::vector<fs::path> list_checkpoints(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex re("step-[0-9]+\\.pt");
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (std::regex_match(e.path().filename().string(), re)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void prune_checkpoints(const fs::path& dir, int keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove(all[i]);
}

}  // namespace tt
