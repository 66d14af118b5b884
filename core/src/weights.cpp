// Weights files (tt/weights.h): the state dict through LibTorch's pickler (read with
// tt/torch_save.h), what a file is, the tensors of a module or a checkpoint, and loading checked
// against the model. safetensors is safetensors.cpp.
#include "tt/weights.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <fstream>
#include <set>

#include "atomic_file.h"
#include "model_record.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/torch_save.h"

namespace fs = std::filesystem;

namespace tt {
namespace {


void collect(const torch::nn::Module& m, const std::string& prefix, NamedTensors& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) out.emplace_back(prefix + p.key(), p.value());
  for (const auto& b : m.named_buffers(/*recurse=*/false)) out.emplace_back(prefix + b.key(), b.value());
  for (const auto& c : m.named_children())
    if (c.value()->is_serializable()) collect(*c.value(), prefix + c.key() + ".", out);
}

void collect(torch::serialize::InputArchive& ar, const std::string& prefix, NamedTensors& out) {
  for (const auto& k : ar.keys()) {
    at::Tensor t;
    torch::serialize::InputArchive sub;
    if (ar.try_read(k, t)) out.emplace_back(prefix + k, t);
    else if (ar.try_read(k, sub)) collect(sub, prefix + k + ".", out);
  }
}

// Up to 8 names, then how many more.
std::string some(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 8) s += " and " + std::to_string(names.size() - 8) + " more";
  return s;
}

}  // namespace

WeightsFormat weights_format(const std::string& name) {
  if (name == "safetensors") return WeightsFormat::Safetensors;
  if (name == "pt") return WeightsFormat::StateDict;
  TT_FAIL_AS(ConfigError, "unknown weights format '", name, "': safetensors (model.safetensors) or pt (a PyTorch state "
             "dict, model_state_dict.pt)");
}

const char* weights_file_name(WeightsFormat format) {
  return format == WeightsFormat::Safetensors ? "model.safetensors" : "model_state_dict.pt";
}

const char* kind_name(WeightsFileKind kind) {
  switch (kind) {
    case WeightsFileKind::Safetensors: return "safetensors file";
    case WeightsFileKind::StateDict: return "PyTorch state dict";
    case WeightsFileKind::Checkpoint: return "tt checkpoint";
    case WeightsFileKind::Unknown: break;
  }
  return "file of unknown kind";
}

WeightsFileKind weights_file_kind(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char head[9] = {};
  in.read(head, sizeof head);
  const auto got = in.gcount();
  if (got >= 4 && std::string(head, 4) == std::string("PK\x03\x04", 4)) {
    // A damaged archive is treated as a checkpoint, whose reader explains the damage.
    if (!archive_damage(file).empty()) return WeightsFileKind::Checkpoint;
    try {
      caffe2::serialize::PyTorchStreamReader reader(file.string());
      // A TorchScript archive (torch::serialize, tt's checkpoints) keeps its constants apart;
      // torch.save and torch::pickle_save write data.pkl alone.
      if (reader.hasRecord("constants.pkl")) return WeightsFileKind::Checkpoint;
      if (reader.hasRecord("data.pkl")) return WeightsFileKind::StateDict;
    } catch (const c10::Error&) {
    }
    return WeightsFileKind::Checkpoint;
  }
  // safetensors: a length, then the JSON header's opening brace.
  if (got == 9 && head[8] == '{') return WeightsFileKind::Safetensors;
  if (file.extension() == ".safetensors") return WeightsFileKind::Safetensors;  // its reader says what is wrong
  return WeightsFileKind::Unknown;
}

NamedTensors module_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  collect(module, "", out);
  return out;
}

NamedTensors checkpoint_model_tensors(const fs::path& checkpoint, ModelRecord* record) {
  const std::string f = checkpoint.string();
  if (const std::string damage = archive_damage(checkpoint); !damage.empty())
    TT_FAIL_AS(ConfigError, f, ": damaged: ", damage, "; use an older checkpoint of the run");
  torch::serialize::InputArchive ar, model;
  try {
    ar.load_from(f);
  } catch (const c10::Error& e) {
    TT_FAIL_AS(ConfigError, f, ": not a tt checkpoint (", first_line(e.what_without_backtrace()), ")");
  }
  TT_CHECK_AS(ConfigError, ar.try_read("model", model), f, ": a TorchScript archive without a \"model\" entry, not a "
              "tt checkpoint: give a run directory or one of its checkpoints (lora's merged.pt is one; its adapters.pt "
              "holds the adapters alone, which plugins: [{name: lora, load: FILE}] reads)");
  if (record) *record = read_model_record(ar);
  NamedTensors out;
  collect(model, "", out);
  return out;
}

void write_state_dict(const fs::path& file, const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;  // keeps insertion order: Python gets the state_dict order
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().to(at::kCPU).contiguous());
  // torch::pickle_save's archive, without the type tag LibTorch's pickler puts on a typed dict
  // (a call of torch.jit._pickle.restore_type_tag): torch.load's weights_only mode, the default
  // from PyTorch 2.6, refuses that global. A plain dict of tensors is what it reads.
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* p, size_t n) { pickled.insert(pickled.end(), p, p + n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
    bytes.insert(bytes.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  std::error_code ec;  // a folder that cannot be made: AtomicFile's WriteError names the file
  if (!file.parent_path().empty()) fs::create_directories(file.parent_path(), ec);
  AtomicFile out(file);
  out.write(bytes.data(), bytes.size());
  out.commit("cannot write", "(disk full? nothing was written there)");
}

void write_weights(const fs::path& file, WeightsFormat format, const NamedTensors& tensors, const ModelRecord& record) {
  if (format == WeightsFormat::StateDict) return write_state_dict(file, tensors);
  std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (!record.empty()) {
    metadata["tt.model"] = record.options_yaml;
    if (record.data) metadata["tt.data"] = *record.data;
  }
  write_safetensors(file, tensors, metadata);
}

NamedTensors read_state_dict(const fs::path& file) {
  const std::string f = file.string();
  const std::string save = "save a dict of tensors: torch.save({k: v.detach() for k, v in model.state_dict().items()}, path)";
  TT_CHECK_AS(ConfigError, weights_file_kind(file) != WeightsFileKind::Checkpoint || !archive_damage(file).empty(), f,
              ": a tt checkpoint (a TorchScript archive), not a state dict; export one with tt-run --export pt ", f);
  const c10::IValue value = read_torch_save(file, save);
  TT_CHECK_AS(ConfigError, value.isGenericDict(), f, ": holds a ", value.tagKind(), ", not a dict of name -> tensor; ",
              save);
  NamedTensors out;
  for (const auto& kv : value.toGenericDict()) {
    TT_CHECK_AS(ConfigError, kv.key().isString(), f, ": a key of the dict is a ", kv.key().tagKind(),
                ", not a name; ", save);
    const std::string name = kv.key().toStringRef();
    TT_CHECK_AS(ConfigError, kv.value().isTensor(), f, ": '", name, "' holds a ", kv.value().tagKind(),
                ", not a tensor; ", save);
    at::Tensor t = kv.value().toTensor();
    TT_CHECK_AS(ConfigError, t.layout() == at::kStrided, f, ": '", name, "' is a sparse tensor; save it with .to_dense()");
    out.emplace_back(name, t.detach());
  }
  return out;
}

NamedTensors read_weights(const fs::path& file, WeightsFileKind* kind) {
  const WeightsFileKind k = weights_file_kind(file);
  if (kind) *kind = k;
  switch (k) {
    case WeightsFileKind::Safetensors: return read_safetensors(file);
    case WeightsFileKind::StateDict: return read_state_dict(file);
    case WeightsFileKind::Checkpoint: return checkpoint_model_tensors(file);
    case WeightsFileKind::Unknown: break;
  }
  std::string why = archive_damage(file);
  TT_FAIL_AS(ConfigError, file.string(), ": neither a tt checkpoint nor a PyTorch state dict (", why,
             ") nor a safetensors file (no JSON header); give a run directory, a checkpoint, a .pt state dict "
             "written by torch.save or a .safetensors file");
}

void load_weights(torch::nn::Module& module, const NamedTensors& tensors, const std::string& file) {
  const NamedTensors own = module_tensors(module);
  std::map<std::string, at::Tensor> given;
  std::vector<std::string> unexpected, missing, misfit, twice;
  for (const auto& [name, t] : tensors)
    if (!given.emplace(name, t).second) twice.push_back(name);
  std::set<std::string> names;
  for (const auto& [name, t] : own) {
    names.insert(name);
    const auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (!it->second.sizes().equals(t.sizes())) {
      misfit.push_back(name + " is " + shape_text(it->second.sizes().vec()) + " there but " + shape_text(t.sizes().vec()) + " here");
    } else if (it->second.scalar_type() != t.scalar_type()) {
      misfit.push_back(name + " is " + std::string(c10::toString(it->second.scalar_type())) + " there but " +
                       c10::toString(t.scalar_type()) + " here");
    }
  }
  for (const auto& [name, t] : tensors)
    if (!names.count(name)) unexpected.push_back(name);
  std::string problems;
  if (!missing.empty()) problems += "\n  missing (" + std::to_string(missing.size()) + "): " + some(missing);
  if (!unexpected.empty()) problems += "\n  unexpected (" + std::to_string(unexpected.size()) + "): " + some(unexpected);
  if (!misfit.empty()) problems += "\n  mis-shaped (" + std::to_string(misfit.size()) + "): " + some(misfit);
  if (!twice.empty()) problems += "\n  given twice: " + some(twice);
  TT_CHECK_AS(ConfigError, problems.empty(), file, " does not fit this model:", problems,
              "\nuse the model settings it was trained with, and the names tt exports (tt-run --export pt RUN_DIR)");
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : own) t.copy_(given.at(name));
}

}  // namespace tt
