#pragma once
// Builds a fit from its Pipeline: processes and device, run directory, data, model (and
// model.init_from), plugins (INIT), optimizer (OPTIMIZER), schedule, data loader, limits.
#include <memory>
#include <vector>

#include "tt/plugin.h"

namespace tt {

struct Run;

// `extra_plugins` (Trainer::add_plugin) follow the pipeline's.
void setup_run(Run& run, std::vector<std::unique_ptr<Plugin>> extra_plugins);

}  // namespace tt
