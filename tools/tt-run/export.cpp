#include "export.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/weights.h"

namespace fs = std::filesystem;

namespace {

// A comparison's variant: its summary.json says its checkpoints were removed (compare.cpp).
bool weights_removed(const fs::path& summary) {
  std::ifstream in(summary);
  const nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
  return !s.is_discarded() && s.is_object() && s.contains("checkpoints_removed");
}

}  // namespace

namespace tt::export_weights {

int run(const Options& o) {
  const WeightsFormat format = weights_format(o.format);
  const fs::path src = o.source;
  TT_CHECK_AS(ConfigError, !o.source.empty(), "--export ", o.format, " needs a run directory or a checkpoint file, e.g. "
              "tt-run --export ", o.format, " runs/NAME");
  NamedTensors tensors;
  ModelRecord record;  // what the checkpoint records of its model: a safetensors export carries it
  fs::path out = o.out;
  fs::path from;
  if (fs::is_directory(src)) {
    const auto files = list_checkpoints(fs::is_directory(src / "checkpoints") ? src / "checkpoints" : src);
    TT_CHECK_AS(ConfigError, !files.empty() || !weights_removed(src / "summary.json"),
                src.string(), " is a variant of a comparison, which keeps its measurements, not its weights: train its "
                "pipeline (tt-run ", (src / "pipeline.yaml").string(), " --run-dir DIR) to export them");
    TT_CHECK_AS(ConfigError, !files.empty(), src.string(), " has no checkpoints (checkpoints/step-*.pt) to export; "
                "name a run directory or a checkpoint file (or train with output.export)");
    std::string failures;
    for (auto it = files.rbegin(); it != files.rend() && from.empty(); ++it) {
      try {
        tensors = checkpoint_model_tensors(*it, &record);
        from = *it;
      } catch (const ConfigError& e) {
        failures += std::string("\n  ") + e.what();  // unreadable: the one before (as --resume does)
      }
    }
    TT_CHECK_AS(ConfigError, !from.empty(), "no readable checkpoint in ", src.string(), ":", failures);
    if (from != files.back())  // said whatever --quiet asks: these are not the run's newest weights
      std::fprintf(stderr, "tt-run: warning: the newest checkpoint%s of %s could not be read, so the weights are %s's, "
                   "not the run's last:%s\n", failures.find('\n', 1) == std::string::npos ? "" : "s", src.string().c_str(),
                   from.filename().string().c_str(), failures.c_str());
    if (out.empty()) out = src / weights_file_name(format);
  } else {
    TT_CHECK_AS(ConfigError, fs::is_regular_file(src), src.string(), " does not exist (give a run directory or a "
                "checkpoint file)");
    const WeightsFileKind kind = weights_file_kind(src);
    TT_CHECK_AS(ConfigError, kind == WeightsFileKind::Checkpoint, src.string(), " is a ", kind_name(kind),
                ", not a tt checkpoint: --export reads a run directory or one of its checkpoints/step-*.pt");
    tensors = checkpoint_model_tensors(src, &record);
    from = src;
    if (out.empty())
      out = src.parent_path() / (src.stem().string() + (format == WeightsFormat::Safetensors ? ".safetensors" : "_state_dict.pt"));
  }
  // An export replaces a new file or an earlier export, never a checkpoint or another file.
  std::error_code ec;
  if (fs::exists(out, ec)) {
    const WeightsFileKind kind = fs::is_regular_file(out, ec) ? weights_file_kind(out) : WeightsFileKind::Unknown;
    TT_CHECK_AS(ConfigError, kind == WeightsFileKind::Safetensors || kind == WeightsFileKind::StateDict, "--out ",
                out.string(), " exists and is ", kind == WeightsFileKind::Checkpoint ? "a tt checkpoint" : "not an "
                "exported weights file", ": --export writes a new file or replaces an earlier export; name another "
                "file");
  }
  write_weights(out, format, tensors, record);
  if (!o.quiet) std::printf("%zu tensors of %s written to %s\n", tensors.size(), from.string().c_str(), out.string().c_str());
  return 0;
}

}  // namespace tt::export_weights
