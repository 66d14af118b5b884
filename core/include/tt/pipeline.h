#pragma once
// A pipeline file, parsed and validated into typed options.
//
//   name: quickstart          # run name prefix
//   seed: 0
//   model:     {name: topic, k: 10}
//   data:      {name: topic-synthetic, n_docs: 1000}
//   optimizer: {name: adamw, lr: 0.05}
//   schedule:  {name: cosine_warm_restarts, t0_epochs: 20}
//   plugins:   [checkpoint, {name: amp, dtype: bf16}]
//   trainer:   {epochs: 20, batch_size: 16}
//   output:    {dir: runs}
//
// Each component section is its `name` plus the options of that component's schema.
// Overrides ("trainer.batch_size=64", "plugins.1.dtype=fp16") apply before validation and
// are named as "command line" in errors.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tt/export.h"
#include "tt/options.h"

namespace tt {

struct ComponentSpec {
  std::string name;
  Options options;
  std::string where;  // file:line:col of the section
};

struct TT_API Pipeline {
  std::string file;  // where it came from ("<string>" for tests)
  std::string name;
  uint64_t seed = 0;
  ComponentSpec model, data, optimizer, schedule;
  std::vector<ComponentSpec> plugins;
  Options trainer, output;
  std::vector<std::string> overrides;
  bool has_compare = false;  // a compare: section (tt-run compares its variants; the trainer ignores it)

  // The whole pipeline with every default filled in, as YAML (written to the run dir,
  // printed by --dry-run).
  std::string resolved_yaml() const;
};

// The one dotted-key parser, shared by the pipeline's overrides, tt-run's compare variants
// (`set:`) and the budget planner's probes. Sets KEY ("trainer.batch_size", "plugins.1.dtype")
// in a pipeline's YAML tree to VALUE. The key is map keys and list indexes (numbers, 0 first)
// joined by dots. Walking it:
//   - a missing or null entry on the way becomes an empty map: data.seq_len=64 without data:;
//   - a scalar on the way is a component given by name and becomes {name: <scalar>}:
//       model: topic       + model.k=5          -> model: {name: topic, k: 5}
//       plugins: [amp, x]  + plugins.0.dtype=fp16 -> plugins: [{name: amp, dtype: fp16}, x]
//     (a scalar entry addressed by its index alone is replaced: plugins.0=checkpoint);
//   - a list index must name an existing entry (a list is not extended; set the whole list,
//     plugins=[amp, checkpoint], to add one).
// Errors are ConfigError starting with WHERE, e.g. "command line 'trainer.batch_size=64'".
TT_API void set_dotted(YAML::Node root, const std::string& key, const YAML::Node& value, const std::string& where);

// One command-line override "KEY=VALUE": VALUE is parsed as YAML ("" is null, "[a, b]" a list)
// and set with set_dotted; errors are named "command line 'KEY=VALUE'".
TT_API void apply_override(YAML::Node root, const std::string& key_equals_value);

TT_API const Schema& trainer_schema();
TT_API const Schema& output_schema();

// Refuses (ConfigError at memory_cap's file and line) a trainer.memory_cap set beside a memory
// budget, `budget` naming where that comes from ("trainer.memory_budget", "--budget"): the budget
// is planned and then becomes the cap, so the cap would be ignored.
TT_API void refuse_cap_beside_budget(const Pipeline& p, const std::string& budget);

// Throws tt::Error naming the file (and line:column) for every problem.
TT_API Pipeline load_pipeline(const std::string& path, const std::vector<std::string>& overrides = {});
TT_API Pipeline parse_pipeline(const std::string& yaml_text, const std::string& file_label,
                               const std::vector<std::string>& overrides = {});

}  // namespace tt
