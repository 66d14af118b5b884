#include "fuzz_util.h"

#include <c10/util/Logging.h>
#include <unistd.h>

#include <fstream>
#include <system_error>

#include "tt/compat.h"

namespace tt::fuzz {

namespace {
std::filesystem::path* dir = nullptr;

#if !TT_TORCH_AT_LEAST(2, 0)
// LibTorch 1.13 symbolizes a backtrace for every c10::Error it throws (dladdr over every frame:
// most of a harness's time on inputs LibTorch refuses); no harness prints it. 2.x makes it lazily.
const bool no_backtraces = (c10::SetStackTraceFetcher([] { return std::string(); }), true);
#endif

void remove_scratch() {
  std::error_code ec;
  if (dir) std::filesystem::remove_all(*dir, ec);
}
}  // namespace

const std::filesystem::path& scratch() {
  if (!dir) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tt-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      std::perror("tt fuzz: mkdtemp");
      std::abort();
    }
    dir = new std::filesystem::path(pattern);
    std::atexit(remove_scratch);
  }
  return *dir;
}

std::filesystem::path write_file(const std::string& name, std::string_view bytes) {
  const auto path = scratch() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "tt fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace tt::fuzz
