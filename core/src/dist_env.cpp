// The torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and
// TT_DIST_TIMEOUT, read and checked: tt/dist.h's env_from_environment.
#include <cerrno>
#include <cstdlib>

#include "tt/dist.h"
#include "tt/error.h"

namespace tt::dist {

namespace {
const char* getenv_or_null(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int64_t parse_int_env(const char* name, const char* value, int64_t lo, int64_t hi, const char* fix) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value, &end, 10);
  TT_CHECK_AS(ConfigError, errno == 0 && end != value && *end == '\0' && v >= lo && v <= hi, name, "='", value,
              "' is not an integer in [", lo, ", ", hi, "]: ", fix);
  return v;
}
}  // namespace

Env env_from_environment() {
  Env e;
  const char* ws = getenv_or_null("WORLD_SIZE");
  const char* rk = getenv_or_null("RANK");
  const char* how = "set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every worker, or start them with "
                    "tt-run --nproc N";
  if (!ws) {
    TT_CHECK_AS(ConfigError, !rk, "RANK is set (", rk, ") but WORLD_SIZE is not: ", how);
    return e;
  }
  e.world_size = static_cast<int>(parse_int_env("WORLD_SIZE", ws, 1, 1 << 16, how));
  if (e.world_size == 1 && !rk) return e;
  TT_CHECK_AS(ConfigError, rk, "WORLD_SIZE is set (", ws, ") but RANK is not: ", how);
  e.rank = static_cast<int>(parse_int_env("RANK", rk, 0, e.world_size - 1, "RANK must be below WORLD_SIZE"));
  const char* lr = getenv_or_null("LOCAL_RANK");
  e.local_rank = lr ? static_cast<int>(parse_int_env("LOCAL_RANK", lr, 0, 1 << 16, how)) : e.rank;
  if (const char* a = getenv_or_null("MASTER_ADDR")) e.master_addr = a;
  if (const char* p = getenv_or_null("MASTER_PORT"))
    e.master_port = static_cast<int>(parse_int_env("MASTER_PORT", p, 1, 65535, "use a free TCP port, e.g. 29500"));
  if (const char* t = getenv_or_null("TT_DIST_TIMEOUT")) {
    char* end = nullptr;
    double s = std::strtod(t, &end);
    TT_CHECK_AS(ConfigError, end != t && *end == '\0' && s > 0, "TT_DIST_TIMEOUT='", t,
                "' must be a positive number of seconds");
    e.timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  return e;
}

}  // namespace tt::dist
