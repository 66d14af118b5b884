#pragma once
// Builds a fit from its Pipeline: processes and device, run directory, data, model (and
// model.init_from), plugins (INIT), optimizer (OPTIMIZER), schedule, data loader, limits.
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tt/plugin.h"

namespace tt {

struct Run;

// `extra_plugins` (Trainer::add_plugin) follow the pipeline's. A new run's pipeline.yaml is
// written here; a resumed run's only once it starts training (write_pipeline_file), so that a
// resume refused for its overrides, or stopped before, leaves the run as it was.
void setup_run(Run& run, std::vector<std::unique_ptr<Plugin>> extra_plugins);

// The run directory's pipeline.yaml: the resolved pipeline (rank 0).
void write_pipeline_file(Run& run);

// A run directory's summary.json as an object (null when missing or not JSON), and the status
// a summary says the run ended with ("completed", "failed", "interrupted"), or "".
nlohmann::json read_summary(const std::filesystem::path& summary);
std::string summary_status(const nlohmann::json& summary);

}  // namespace tt
