#pragma once
// A model's weights as files that other tools read, and back: safetensors (model.safetensors,
// Hugging Face's format: an 8-byte little-endian header length, a JSON header of dtypes, shapes
// and data offsets, then the raw little-endian data) and a PyTorch state dict
// (model_state_dict.pt, LibTorch's pickler: Python's torch.load reads a dict of name -> tensor).
// Both hold the parameters and buffers a checkpoint holds, named as LibTorch's
// named_parameters()/named_buffers() name them ("blocks.0.attn.qkv.weight"), in state_dict order.
//
// Readers check every claim of a file against its bytes, and load_weights checks every name,
// shape and dtype against the model: what does not fit is a ConfigError naming the file, the
// problem and the fix. Writers are atomic (WriteError on a full disk, the target untouched).
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tt/export.h"

namespace torch::nn {
class Module;
}
namespace torch::serialize {
class OutputArchive;
}

namespace tt {

class Model;
struct Datasets;
struct State;

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

enum class WeightsFormat { Safetensors, StateDict };
// "safetensors" or "pt" (the names of output.export and tt-run --export); ConfigError otherwise.
TT_API WeightsFormat weights_format(const std::string& name);
// The file a run writes: model.safetensors, model_state_dict.pt.
TT_API const char* weights_file_name(WeightsFormat format);

// What a file holds, judged by its bytes (not its name): a safetensors file, a torch.save /
// LibTorch pickle of an object (a state dict), a tt checkpoint archive, or none of them.
enum class WeightsFileKind { Safetensors, StateDict, Checkpoint, Unknown };
TT_API WeightsFileKind weights_file_kind(const std::filesystem::path& file);
TT_API const char* kind_name(WeightsFileKind kind);  // "safetensors file", "PyTorch state dict", ...

// The parameters and buffers of `module` as a checkpoint holds them (children that are not
// serializable left out), in PyTorch's state_dict order.
TT_API NamedTensors module_tensors(const torch::nn::Module& module);
// The "model" entry of a tt checkpoint file, the same names and order (ConfigError when the
// archive is damaged or has no model).
// `record`, where given, receives what the checkpoint records of its model (ModelRecord, below).
struct ModelRecord;
TT_API NamedTensors checkpoint_model_tensors(const std::filesystem::path& checkpoint, ModelRecord* record = nullptr);

// What a run records of its model beside its weights: its name and options as YAML, with the
// values its factory derived in place of those left unset (Model::derived_options), and
// Model::data_identity (an LM's tokenizer). A checkpoint holds it ("model/options", "model/data"),
// a safetensors export too (its __metadata__'s "tt.model" and "tt.data"); a state dict does not.
// Empty where nothing is recorded.
struct ModelRecord {
  std::string options_yaml;
  std::optional<std::string> data;
  bool empty() const { return options_yaml.empty() && !data; }
};
TT_API ModelRecord model_record(const State& state);
// The record of a checkpoint or a safetensors file; empty for a state dict or a file without one.
TT_API ModelRecord read_model_record(const std::filesystem::path& file);

// Writers: tensors are copied to the CPU, contiguous, without autograd. `metadata` goes to the
// safetensors header's "__metadata__".
TT_API void write_safetensors(const std::filesystem::path& file, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
TT_API void write_state_dict(const std::filesystem::path& file, const NamedTensors& tensors);
// A safetensors file carries `record` in its metadata; a state dict holds the tensors only.
TT_API void write_weights(const std::filesystem::path& file, WeightsFormat format, const NamedTensors& tensors,
                          const ModelRecord& record = {});

// Readers, in the file's order. `metadata`, where given, receives the safetensors header's.
TT_API NamedTensors read_safetensors(const std::filesystem::path& file,
                                     std::map<std::string, std::string>* metadata = nullptr);
TT_API NamedTensors read_state_dict(const std::filesystem::path& file);
// A safetensors file, a state dict or a tt checkpoint, told apart by content (weights_file_kind).
TT_API NamedTensors read_weights(const std::filesystem::path& file, WeightsFileKind* kind = nullptr);

// Copies `tensors` into the module's parameters and buffers, after checking that their names are
// exactly the module's and that every shape and dtype matches; otherwise a ConfigError naming
// `file` and every name missing, unexpected or mis-shaped, and nothing is changed.
TT_API void load_weights(torch::nn::Module& module, const NamedTensors& tensors, const std::string& file);

// What a checkpoint records of its model beside its weights ("model"), for load_model and
// model.init_from: "model/options", the model's name and options as YAML with the values its
// factory derived in place of those left unset (Model::derived_options), and "model/data",
// Model::data_identity. The trainer's checkpoints hold them; a plugin that writes a checkpoint of
// its own (lora's merged.pt) records them with this.
TT_API void record_model(torch::serialize::OutputArchive& archive, const State& state);

// A model built again from a checkpoint, its weights loaded: a teacher for distillation, a model
// to evaluate beside the one training. `path` is a run directory (its newest readable
// checkpoint) or a checkpoint file. The model's name and options are those the checkpoint
// records: what its run resolved and what its factory derived from that run's data
// (Model::derived_options), so the shape is the checkpoint's whatever `data` is; a checkpoint
// written before tt recorded them takes its run's pipeline.yaml beside checkpoints/ (then a shape
// derived from data is derived from `data`). The model is built over `data`, which must be data
// that model reads: a plugin gives *State::datasets; a checkpoint whose "model/data" differs from
// the model's data_identity over `data` (an LM's other tokenizer) is refused. A newer checkpoint
// that cannot be read is skipped with a warning naming it. It comes in training mode with
// gradients on, as built: set it as State::teacher on INIT and the trainer freezes it. Errors are
// ConfigErrors that begin with `option` (what gave the path, "plugins.distill.teacher") and name
// the file and the fix.
TT_API std::shared_ptr<Model> load_model(const std::string& path, const Datasets& data, const std::string& option);

}  // namespace tt
