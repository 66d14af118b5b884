// model.init_from: the weights of another run (its newest readable checkpoint), of one
// checkpoint file, of a safetensors file or of a PyTorch state dict (.pt, torch.save of a dict),
// the file told apart by its content (tt/weights.h); loaded before plugins act on the model
// (LoRA adapts the loaded weights).
// model.init_average N > 1: the elementwise mean of the newest N readable checkpoints' floating
// parameters and buffers (accumulated in double); other buffers come from the newest.
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "model_record.h"
#include "train/checkpoints.h"
#include "train/run.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/weights.h"

namespace fs = std::filesystem;

namespace tt {

namespace {
// Refuses weights recorded (tt::ModelRecord) with other data (an LM's tokenizer: checked before
// the names and shapes, which another vocabulary also changes), or, once their names and shapes
// fit, another kind of model or another value of an architecture() option than this run's: the
// same tensors would mean other things.
void check_record(const Options& M, const ModelRecord& record, const State& state, const std::string& file,
                  bool shapes_fit) {
  const std::string other =
      shapes_fit ? recorded_model_mismatch(record, state) : recorded_data_mismatch(record, *state.model);
  M.check(other.empty(), "init_from",
          file + "'s model " + other + ": its weights would mean other things here; use the " +
              (shapes_fit ? "model settings" : "data settings") + " it was trained with" +
              (shapes_fit ? "" : " (an LM's data.tokenizer)"));
}
}  // namespace

void init_model_from(Run& run, const std::string& from, int64_t average) {
  Model& model = *run.state.model;
  const Options& M = run.pipeline.model.options;  // its messages name the pipeline's line
  const fs::path src = from;
  std::vector<fs::path> files;
  if (fs::is_directory(src)) {
    files = list_checkpoints(fs::is_directory(src / "checkpoints") ? src / "checkpoints" : src);
    M.check(!files.empty(), "init_from",
            from + " has no checkpoints (checkpoints/step-*.pt); train it with trainer.checkpoint_every, or name a "
                   "checkpoint file");
  } else {
    M.check(fs::is_regular_file(src), "init_from",
            describe_path(from) + " does not exist (give a run directory, a checkpoint, a .safetensors file or a .pt state dict)");
    M.check(average == 1, "init_average",
            std::to_string(average) + " needs init_from to be a run directory with that many checkpoints, not the file " +
                from);
    if (const WeightsFileKind kind = weights_file_kind(src); kind != WeightsFileKind::Checkpoint) {
      // A safetensors export records its model (tt/weights.h): checked as a checkpoint's is. A
      // state dict, or another tool's file, has nothing to check by.
      ModelRecord record;
      NamedTensors tensors;
      try {
        std::map<std::string, std::string> metadata;
        tensors = kind == WeightsFileKind::Safetensors ? read_safetensors(src, &metadata) : read_weights(src);
        record = record_of_metadata(metadata);
      } catch (const ConfigError& e) {
        M.fail("init_from", e.what());
      }
      check_record(M, record, run.state, from, false);
      try {
        load_weights(model, tensors, from);
      } catch (const ConfigError& e) {
        M.fail("init_from", e.what());
      }
      check_record(M, record, run.state, from, true);
      log().info("model weights from {} ({})", from, kind_name(kind));
      // Unchecked data (an LM's tokenizer: the ids would mean other tokens) is warned of; a model
      // without data to check is told in the log only (the shipped tabular weights).
      if (record.empty())
        log().log(model.data_identity().empty() ? spdlog::level::info : spdlog::level::warn,
                  "model.init_from: {} records no model options or tokenizer (a {}{}): that they are this run's is "
                  "not checked, only the tensors' names and shapes", from, kind_name(kind),
                  kind == WeightsFileKind::Safetensors ? " of another tool's or an older tt's"
                                                       : "; tt's safetensors export records them");
      return;
    }
    files.push_back(src);
  }
  std::string failures;
  std::vector<fs::path> used;
  std::map<std::string, at::Tensor> sum, newest;  // floating tensors' sums; the newest's others
  auto tensors = [&] {
    std::vector<std::pair<std::string, at::Tensor>> all;
    for (const auto& t : model.named_parameters()) all.emplace_back(t.key(), t.value());
    for (const auto& t : model.named_buffers()) all.emplace_back(t.key(), t.value());
    return all;
  };
  for (auto it = files.rbegin(); it != files.rend() && static_cast<int64_t>(used.size()) < average; ++it) {
    torch::serialize::InputArchive ar, model_ar;
    try {
      if (const std::string damage = archive_damage(*it); !damage.empty())
        throw std::runtime_error("damaged: " + damage);
      ar.load_from(it->string());
      ar.read("model", model_ar);
    } catch (const std::exception& e) {
      const std::string what = e.what();  // LibTorch appends its C++ stack after the first line
      failures += "\n  " + it->string() + ": " + first_line(what, 200);
      continue;  // unreadable: try the one before (as --resume does)
    }
    const ModelRecord record = read_model_record(ar);
    check_record(M, record, run.state, it->string(), false);
    std::string mismatch;
    try {
      mismatch = load_model_checked(run, model_ar);
    } catch (const std::exception& e) {
      std::string what = e.what();
      mismatch = first_line(what);
    }
    // a run fine-tuned with adapters (tt::nn's adapter_<plugin> tensors, e.g. lora's) holds them beside the base
    const std::string fix = mismatch.find(".adapter_") != std::string::npos
                                ? "its adapters are a plugin's: use its merged weights (lora's export_merged: true "
                                  "writes RUN/merged.pt) or give the plugin again with its adapters (plugins: [{name: "
                                  "lora, load: RUN/adapters.pt}]) and the base weights it was trained from"
                                : "use the model settings of the run that wrote it (its pipeline.yaml)";
    M.check(mismatch.empty(), "init_from", it->string() + " does not fit this model (" + mismatch + "): " + fix);
    check_record(M, record, run.state, it->string(), true);
    used.push_back(*it);
    if (average == 1) break;
    torch::NoGradGuard no_grad;
    for (const auto& [name, t] : tensors()) {
      if (!t.is_floating_point()) {
        if (!newest.count(name)) newest[name] = t.clone();
      } else if (!sum.count(name)) {
        sum[name] = t.to(torch::kDouble).clone();
      } else {
        sum[name] += t.to(torch::kDouble);
      }
    }
  }
  M.check(!used.empty(), "init_from", "has no readable checkpoint in " + from + ":" + failures);
  M.check(static_cast<int64_t>(used.size()) == average, "init_average",
          std::to_string(average) + " checkpoints asked for, but " + from + " has " + std::to_string(used.size()) +
              " readable ones" + (failures.empty() ? std::string() : ":" + failures) +
              " (lower init_average, or keep more with trainer.keep_checkpoints when training it)");
  if (average == 1) {
    log().info("model weights from {} ({})", used[0].string(), kind_name(WeightsFileKind::Checkpoint));
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : tensors()) {
    if (t.is_floating_point()) t.copy_(sum.at(name) / static_cast<double>(average));
    else t.copy_(newest.at(name));
  }
  std::string names;
  for (const auto& u : used) names += (names.empty() ? "" : ", ") + u.filename().string();
  log().info("model weights: the mean of {} checkpoints of {} ({})", average, from, names);
}

}  // namespace tt
