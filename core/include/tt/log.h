#pragma once
// The one logger of a tt process. Plugins and models call tt::log() so that they share
// the core's sinks and level instead of each .so getting its own spdlog registry.
#include <spdlog/spdlog.h>

#include "tt/export.h"

namespace tt {
TT_API spdlog::logger& log();
}
