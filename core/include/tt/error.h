#pragma once
// One error type for everything tt reports to a user, and TT_CHECK to raise it with context.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tt/export.h"

namespace tt {

class TT_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  ~Error() override;
  // tt-run's exit status for this error (see README, "Exit codes").
  virtual int exit_code() const { return 1; }
};

// The pipeline or the command line is wrong (exit 2).
class TT_API ConfigError : public Error {
 public:
  using Error::Error;
  ~ConfigError() override;
  int exit_code() const override { return 2; }
};

// A section has a key its component does not take (Options::parse; exit 2 as any ConfigError):
// its own type, so a caller can add what it knows (pipeline.cpp: a component renamed on the
// command line keeps the file's other keys).
class TT_API UnknownKeyError : public ConfigError {
 public:
  using ConfigError::ConfigError;
  ~UnknownKeyError() override;
};

// A plugin or model library was not found or was refused (exit 3).
class TT_API ModuleError : public Error {
 public:
  using Error::Error;
  ~ModuleError() override;
  int exit_code() const override { return 3; }
};

// Training ran out of memory and no plugin recovered (exit 4).
class TT_API OutOfMemory : public Error {
 public:
  using Error::Error;
  ~OutOfMemory() override;
  int exit_code() const override { return 4; }
};

// The loss became NaN or infinite (exit 5).
class TT_API NumericError : public Error {
 public:
  using Error::Error;
  ~NumericError() override;
  int exit_code() const override { return 5; }
};

// A file tt writes could not be written whole: a full disk, a read-only folder, a file-size
// limit (exit 6). The file named is left as it was before (or absent), never truncated.
class TT_API WriteError : public Error {
 public:
  using Error::Error;
  ~WriteError() override;
  int exit_code() const override { return 6; }
};

// A data-parallel run lost a rank or could not gather them: the rendezvous timed out or was
// refused by the machine, or a collective failed because another rank exited or did not answer
// within TT_DIST_TIMEOUT (exit 8). Often the consequence of another rank's failure, whose own exit
// code says why (tt-run --nproc exits with that one).
class TT_API DistError : public Error {
 public:
  using Error::Error;
  ~DistError() override;
  int exit_code() const override { return 8; }
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// The first line of an error's message, at most `max` characters: LibTorch's errors append
// their C++ stack after it (c10d's a call trace), which a message for users leaves out.
TT_API std::string first_line(const std::string& message, size_t max = 300);

// A path as the user gave it, quoted, and where that is when it is relative, for messages about a
// file that is not there: "'t.txt' (relative to the current directory /home/me)".
TT_API std::string describe_path(const std::string& path);

// Whether two paths name one file: the same file when both exist (links and "./" included), else
// the same absolute, normalized path. For refusing an output that would overwrite an input.
TT_API bool same_file(const std::string& a, const std::string& b);

// A tensor's shape for messages: "[2, 3]".
TT_API std::string shape_text(const std::vector<int64_t>& shape);

// Stopped by Ctrl-C / SIGTERM after writing a checkpoint (exit 130).
class TT_API Interrupted : public Error {
 public:
  using Error::Error;
  ~Interrupted() override;
  int exit_code() const override { return 130; }
};

// So that TT_FAIL_AS and TT_CHECK_AS take the error type as tt's code writes it (ConfigError)
// and as code outside namespace tt does (tt::ConfigError): ::tt::tt::ConfigError is ::tt::ConfigError.
namespace tt = ::tt;

}  // namespace tt

// Throw (if `cond` is false) an error of `Type`, one of the above (ConfigError or
// tt::ConfigError), whose message is the arguments streamed together.
#define TT_FAIL_AS(Type, ...) throw ::tt::Type(::tt::detail::cat(__VA_ARGS__))
#define TT_CHECK_AS(Type, cond, ...)           \
  do {                                         \
    if (!(cond)) TT_FAIL_AS(Type, __VA_ARGS__); \
  } while (0)
#define TT_FAIL(...) TT_FAIL_AS(Error, __VA_ARGS__)
#define TT_CHECK(cond, ...) TT_CHECK_AS(Error, cond, __VA_ARGS__)
