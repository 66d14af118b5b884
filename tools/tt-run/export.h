#pragma once
// tt-run --export safetensors|pt RUN_DIR_OR_CHECKPOINT [--out FILE]: the model weights of a run
// (its newest readable checkpoint) or of one checkpoint file, for other tools. The checkpoint's
// model entry is read as it is: no data, no model library and no training are needed.
#include <string>

namespace tt::export_weights {

struct Options {
  std::string format;  // safetensors | pt
  std::string source;  // a run directory or a checkpoint file
  std::string out;     // default: RUN_DIR/model.safetensors (model_state_dict.pt), or beside the checkpoint
  bool quiet = false;
};

// Writes the file and returns 0; a tt::Error (ConfigError, WriteError) says what went wrong.
int run(const Options& o);

}  // namespace tt::export_weights
