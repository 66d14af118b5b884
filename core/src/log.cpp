#include "tt/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace tt {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("tt");
    l->set_pattern("[%H:%M:%S] [%^%l%$] %v");
    if (const char* lvl = std::getenv("TT_LOG_LEVEL")) l->set_level(spdlog::level::from_str(lvl));
    return l;
  }();
  return *logger;
}

}  // namespace tt
