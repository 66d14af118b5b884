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

TT_API const Schema& trainer_schema();
TT_API const Schema& output_schema();

// Throws tt::Error naming the file (and line:column) for every problem.
TT_API Pipeline load_pipeline(const std::string& path, const std::vector<std::string>& overrides = {});
TT_API Pipeline parse_pipeline(const std::string& yaml_text, const std::string& file_label,
                               const std::vector<std::string>& overrides = {});

}  // namespace tt
