#pragma once
// The training checkpoint archive (checkpoints/step-N.pt): model, optimizer, every plugin's
// state, the random generator, the loop's position and the text stream's position. Written
// atomically by rank 0 (tt/checkpoint.h); read back by --resume, newest readable first.
#include <filesystem>
#include <string>

namespace torch::serialize {
class InputArchive;
}
namespace torch::nn {
class Module;
}

namespace tt {

struct Run;

// Writes checkpoints/step-<step>.pt and prunes to trainer.keep_checkpoints. Every rank calls
// it (a sharded optimizer's save is collective); rank 0 writes.
void save_checkpoint(Run& run);
// --resume: the newest readable checkpoint of the run directory; an unreadable one is skipped
// with a warning, a mismatched pipeline is an error that says what differs.
void load_checkpoint(Run& run);
// The model's tensors from an archive, shapes checked (Module::load would take any shape).
// Returns what does not match ("" when everything does).
std::string load_model_checked(Run& run, torch::serialize::InputArchive& model_archive);
// Refuses a model (with what plugins added at INIT) that has a submodule, parameter or buffer
// named with a word TorchScript reserves ("in", "None"): LibTorch's archives write such a name
// but cannot read it.
void check_archive_names(const torch::nn::Module& model, const std::string& model_name);
// model.init_from / model.init_average (train/init_from.cpp).
void init_model_from(Run& run, const std::string& from, int64_t average);

}  // namespace tt
