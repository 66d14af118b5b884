#pragma once
// Checking what a run recorded of its model (tt::ModelRecord, tt/weights.h) against a model
// built over this run's data: load_model and model.init_from.
#include <torch/serialize/input-archive.h>

#include <map>
#include <string>

#include "tt/weights.h"

namespace tt {

class Model;
struct State;

ModelRecord read_model_record(torch::serialize::InputArchive& archive);
// A safetensors header's metadata ("tt.model", "tt.data"), as write_weights wrote it.
ModelRecord record_of_metadata(const std::map<std::string, std::string>& metadata);

// "" when `record` is empty or records the data identity `model` has; else why they differ, as
// a sentence part: "was trained on data that gives X; this run's data gives Y".
std::string recorded_data_mismatch(const ModelRecord& record, const Model& model);
// "" when `record` records no model options or the same kind of model as state's, with the same
// value of each option its schema marks architecture() (tt/options.h); else why not: "was trained
// with model.n_heads = 4, and this run's is 8". The data is recorded_data_mismatch's.
std::string recorded_model_mismatch(const ModelRecord& record, const State& state);

}  // namespace tt
