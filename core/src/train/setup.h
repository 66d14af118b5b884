#pragma once
// Builds a fit from its Pipeline: processes and device, run directory, data, model (and
// model.init_from), plugins (INIT), optimizer (OPTIMIZER), schedule, data loader, limits.
#include <memory>
#include <vector>

#include "train/run_dir.h"
#include "tt/plugin.h"

namespace tt {

struct Run;

// `extra_plugins` (Trainer::add_plugin) follow the pipeline's. A new run's pipeline.yaml is
// written here; a resumed run's only once it starts training (write_pipeline_file), so that a
// resume refused for its overrides, or stopped before, leaves the run as it was.
void setup_run(Run& run, std::vector<std::unique_ptr<Plugin>> extra_plugins);

// Warns of settings that would change nothing in this run (the trainer, before a run trains).
void warn_of_unused_settings(const Run& run);

// Applies trainer.memory_cap (or a budget tt-run did not plan) for the training loop.
void cap_memory(Run& run);

}  // namespace tt
