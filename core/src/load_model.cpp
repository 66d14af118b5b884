// tt::load_model: a model built again from a checkpoint (its options recorded in the checkpoint,
// or its run's pipeline.yaml) and its weights loaded.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "model_record.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/model.h"
#include "tt/pipeline.h"
#include "tt/registry.h"
#include "tt/state.h"
#include "tt/weights.h"

namespace fs = std::filesystem;

namespace tt {

namespace {
// Keys the pipeline reader adds to every model section (model.init_from, model.init_average).
const std::vector<std::string> kReaderKeys = {"name", "init_from", "init_average"};

}  // namespace

ModelRecord model_record(const State& state) {
  TT_CHECK(state.pipeline && state.model, "model_record: the state has no pipeline or model yet");
  const std::map<std::string, std::string> derived = state.model->derived_options();
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << state.pipeline->model.name;
  for (const auto& [k, v] : state.pipeline->model.options.resolved()) {
    auto d = derived.find(k);
    out << YAML::Key << k << YAML::Value << YAML::Load(d != derived.end() ? d->second : v);
  }
  out << YAML::EndMap;
  return {out.c_str(), state.model->data_identity()};
}

void record_model(torch::serialize::OutputArchive& archive, const State& state) {
  const ModelRecord r = model_record(state);
  archive.write("model/options", c10::IValue(r.options_yaml));
  archive.write("model/data", c10::IValue(r.data.value_or("")));
}

ModelRecord read_model_record(torch::serialize::InputArchive& archive) {
  ModelRecord r;
  c10::IValue v;
  if (archive.try_read("model/options", v)) r.options_yaml = v.toStringRef();
  if (archive.try_read("model/data", v)) r.data = v.toStringRef();
  return r;
}

ModelRecord read_model_record(const fs::path& file) {
  const WeightsFileKind kind = weights_file_kind(file);
  if (kind == WeightsFileKind::Checkpoint) {
    torch::serialize::InputArchive ar;
    ar.load_from(file.string());
    return read_model_record(ar);
  }
  if (kind != WeightsFileKind::Safetensors) return {};
  std::map<std::string, std::string> metadata;
  read_safetensors(file, &metadata);
  return record_of_metadata(metadata);
}

ModelRecord record_of_metadata(const std::map<std::string, std::string>& metadata) {
  ModelRecord r;
  if (auto it = metadata.find("tt.model"); it != metadata.end()) r.options_yaml = it->second;
  if (auto it = metadata.find("tt.data"); it != metadata.end()) r.data = it->second;
  return r;
}

std::string recorded_data_mismatch(const ModelRecord& record, const Model& model) {
  if (!record.data) return "";
  const std::string& was = *record.data;
  const std::string now = model.data_identity();
  if (was == now) return "";
  return "was trained on data that gives " + (was.empty() ? std::string("nothing to check") : was) +
         "; this run's data gives " + (now.empty() ? std::string("nothing to check") : now);
}

std::string recorded_model_mismatch(const ModelRecord& record, const State& state) {
  if (record.options_yaml.empty()) return "";
  YAML::Node was;
  try {
    was = YAML::Load(record.options_yaml);
  } catch (const YAML::Exception&) {  // not as tt writes it: nothing to check the model by
    return "";
  }
  const YAML::Node now = YAML::Load(model_record(state).options_yaml);
  const std::string name = now["name"].Scalar();
  if (!was.IsMap() || !was["name"] || was["name"].Scalar() != name)
    return "is a model of another kind (" + (was.IsMap() && was["name"] ? was["name"].Scalar() : std::string("?")) +
           "), not " + name;
  for (const auto& spec : Registry::global().model(name).schema.specs()) {
    // a value not recorded, or recorded unset (~: a model that derives it without saying), is not known
    if (!spec.architecture || !was[spec.key] || !now[spec.key] || was[spec.key].IsNull() || now[spec.key].IsNull())
      continue;
    const std::string a = YAML::Dump(was[spec.key]), b = YAML::Dump(now[spec.key]);
    if (a != b) return "was trained with model." + spec.key + " = " + a + ", and this run's is " + b;
  }
  return "";
}

std::shared_ptr<Model> load_model(const std::string& path, const Datasets& data, const std::string& option) {
  const fs::path src = path;
  std::vector<fs::path> files;
  fs::path run_dir;
  if (fs::is_directory(src)) {  // a run directory, or its checkpoints/
    const bool run = fs::is_directory(src / "checkpoints");
    files = list_checkpoints(run ? src / "checkpoints" : src);
    run_dir = run ? src : src.parent_path();
    TT_CHECK_AS(ConfigError, !files.empty(), option, ": ", path,
                " has no checkpoints (checkpoints/step-*.pt): train it with trainer.checkpoint_every set, or name a "
                "checkpoint file");
  } else {
    TT_CHECK_AS(ConfigError, fs::is_regular_file(src), option, ": ", describe_path(path),
                " does not exist (give a run directory or one of its checkpoint files)");
    const WeightsFileKind kind = weights_file_kind(src);
    TT_CHECK_AS(ConfigError, kind != WeightsFileKind::Unknown, option, ": ", path,
                " is not a checkpoint: give a run directory or one of its checkpoints (checkpoints/step-*.pt)");
    TT_CHECK_AS(ConfigError, kind == WeightsFileKind::Checkpoint, option, ": ", path, " is a ", kind_name(kind),
                ", which holds weights but not the model's options: give the run directory that wrote it or one of "
                "its checkpoints (checkpoints/step-*.pt)");
    files.push_back(src);
    run_dir = src.parent_path().filename() == "checkpoints" ? src.parent_path().parent_path() : src.parent_path();
  }
  std::string failures;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    const std::string file = it->string();
    torch::serialize::InputArchive ar;
    try {
      if (const std::string damage = archive_damage(*it); !damage.empty()) throw std::runtime_error("damaged: " + damage);
      ar.load_from(file);
    } catch (const std::exception& e) {
      log().warn("{}: skipping {}, which cannot be read ({})", option, file, first_line(e.what(), 200));
      failures += "\n  " + file + ": " + first_line(e.what(), 200);
      continue;  // unreadable: the one before, as --resume and model.init_from do
    }
    // The options: those the run resolved and its factory derived, as the checkpoint recorded
    // them; a checkpoint written before tt recorded them has its run's pipeline.yaml.
    c10::IValue recorded;
    const bool has_options = ar.try_read("model/options", recorded);
    YAML::Node node;
    std::string from = file;
    if (has_options) {
      node = YAML::Load(recorded.toStringRef());
    } else {
      const fs::path yaml = run_dir / "pipeline.yaml";
      TT_CHECK_AS(ConfigError, fs::is_regular_file(yaml), option, ": ", file,
                  " does not record its model's options and there is no pipeline.yaml beside checkpoints/ (",
                  yaml.string(), "): give the checkpoint inside the run directory that wrote it");
      node = YAML::LoadFile(yaml.string())["model"];
      from = yaml.string();
    }
    TT_CHECK_AS(ConfigError, node.IsMap() && node["name"].IsScalar(), option, ": ", from, " has no model name");
    const std::string name = node["name"].Scalar();
    std::shared_ptr<Model> model;
    try {
      const ModelComponent& component = Registry::global().model(name);
      // Recorded options have no file position worth naming: messages name them as what they are.
      std::map<std::string, std::string> origins;
      if (has_options) {
        origins[""] = "the checkpoint's model options";
        for (const auto& kv : node) origins[kv.first.Scalar()] = origins[""];
      }
      const Options options = Options::parse(node, component.schema, "model", from, kReaderKeys, origins);
      model = component.factory(options, data);
    } catch (const ConfigError& e) {
      TT_FAIL_AS(ConfigError, option, ": the model (", name, ") of ", file, " cannot be built over this run's data: ",
                 e.what());
    }
    const std::string mismatch = recorded_data_mismatch(read_model_record(ar), *model);
    TT_CHECK_AS(ConfigError, mismatch.empty(), option, ": the model of ", file, " ", mismatch,
                ": its weights would mean other things here; train it on this run's data settings (an LM's "
                "data.tokenizer) or use those");
    try {
      load_weights(*model, checkpoint_model_tensors(*it), file);
    } catch (const ConfigError& e) {
      TT_FAIL_AS(ConfigError, option, ": ", e.what(),
                 has_options ? "" : " (the checkpoint does not record the options its model derived from its data: "
                                    "give it the data it was trained on)");
    }
    log().info("{}: {} from {}", option, model->describe(), file);
    return model;
  }
  TT_FAIL_AS(ConfigError, option, ": no readable checkpoint in ", path, ":", failures);
}

}  // namespace tt
