// tt::load_model: a model built again from a checkpoint (its options recorded in the checkpoint,
// or its run's pipeline.yaml) and its weights loaded.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/model.h"
#include "tt/registry.h"
#include "tt/weights.h"

namespace fs = std::filesystem;

namespace tt {

namespace {
// Keys the pipeline reader adds to every model section (model.init_from, model.init_average).
const std::vector<std::string> kReaderKeys = {"name", "init_from", "init_average"};

std::string first_line(const std::exception& e) {
  const std::string what = e.what();  // LibTorch appends its C++ stack after the first line
  return what.substr(0, std::min<size_t>(200, what.find('\n')));
}
}  // namespace

std::shared_ptr<Model> load_model(const std::string& path, const Datasets& data, const std::string& option) {
  const fs::path src = path;
  std::vector<fs::path> files;
  fs::path run_dir;
  if (fs::is_directory(src)) {
    run_dir = src;
    files = list_checkpoints(src / "checkpoints");
    TT_CHECK_AS(ConfigError, !files.empty(), option, ": ", path,
                " has no checkpoints (checkpoints/step-*.pt): train it with trainer.checkpoint_every set, or name a "
                "checkpoint file");
  } else {
    TT_CHECK_AS(ConfigError, fs::is_regular_file(src), option, ": ", describe_path(path),
                " does not exist (give a run directory or one of its checkpoint files)");
    const WeightsFileKind kind = weights_file_kind(src);
    TT_CHECK_AS(ConfigError, kind == WeightsFileKind::Checkpoint, option, ": ", path, " is a ", kind_name(kind),
                ", which holds weights but not the model's options: give the run directory that wrote it or one of "
                "its checkpoints (checkpoints/step-*.pt)");
    files.push_back(src);
    run_dir = src.parent_path().filename() == "checkpoints" ? src.parent_path().parent_path() : src.parent_path();
  }
  std::string failures;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    const std::string file = it->string();
    c10::IValue recorded;
    bool has_options = false;
    try {
      if (const std::string damage = archive_damage(*it); !damage.empty()) throw std::runtime_error("damaged: " + damage);
      torch::serialize::InputArchive ar;
      ar.load_from(file);
      has_options = ar.try_read("model/options", recorded);
    } catch (const std::exception& e) {
      failures += "\n  " + file + ": " + first_line(e);
      continue;  // unreadable: the one before, as --resume and model.init_from do
    }
    // The options: those the run resolved and its factory derived, as the checkpoint recorded
    // them; a checkpoint written before tt recorded them has its run's pipeline.yaml.
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
    const ModelComponent& component = Registry::global().model(name);
    const Options options =
        Options::parse(node, component.schema, option + " (model " + name + " of " + from + ")", from, kReaderKeys);
    std::shared_ptr<Model> model = component.factory(options, data);
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
