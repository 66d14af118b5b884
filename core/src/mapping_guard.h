#pragma once
// Memory-mapped input files (NpyMap) under watch: a file that shrinks while it is read makes the
// next read past its new end raise SIGBUS; the handler installed here names the file and exits 1
// instead of the process dying without a word. Core-internal.
#include <cstddef>
#include <string>

namespace tt {
void watch_mapping(const char* base, size_t length, const std::string& path);
void unwatch_mapping(const char* base);
}  // namespace tt
