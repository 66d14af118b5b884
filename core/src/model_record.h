#pragma once
// Checking what a checkpoint recorded of its model's data (record_model, tt/weights.h) against a
// model built over this run's data: load_model and model.init_from.
#include <torch/serialize/input-archive.h>

#include <string>

namespace tt {

class Model;

// "" when `archive` records no data identity or the same as `model`'s; else why they differ,
// as a sentence part: "was trained on data whose tokenizer is X; this run's data gives Y".
std::string recorded_data_mismatch(torch::serialize::InputArchive& archive, const Model& model);

}  // namespace tt
