#pragma once
// What every harness shares. tt's readers take paths, so the input is written to a file in a
// scratch folder of this process (removed at exit). A bad file must end in a clear refusal:
// tt::Error (any kind) or LibTorch's c10::Error. Anything else escapes the harness and
// libFuzzer reports it as a crash, as do the sanitizers' findings and a failed expect().
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "tt/error.h"

namespace tt::fuzz {

// This process's scratch folder, made on first use.
const std::filesystem::path& scratch();

// Writes `bytes` to scratch()/name and returns the path.
std::filesystem::path write_file(const std::string& name, std::string_view bytes);

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs f; a refusal (tt::Error, c10::Error) is a correct outcome for a bad input.
template <class F>
void refusing(F&& f) {
  try {
    f();
  } catch (const tt::Error&) {
  } catch (const c10::Error&) {
  }
}

// A property a reader promises: its failure is a finding, reported as a crash with `what`.
inline void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: broken promise: %s\n", what);
    std::abort();
  }
}

// Splits the input at the first NUL: the text before it, and what follows (empty when
// there is no NUL). Harnesses use the part after for options or a second file.
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view in) {
  const size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return {in, {}};
  return {in.substr(0, nul), in.substr(nul + 1)};
}

}  // namespace tt::fuzz
