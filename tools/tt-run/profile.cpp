#include "profile.h"

#include <spdlog/sinks/sink.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "child.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/options.h"
#include "tt/pipeline.h"
#include "tt/registry.h"
#include "tt/report.h"
#include "tt/trainer.h"

namespace tt::profile {

namespace fs = std::filesystem;
using nlohmann::json;

// The profile-memory plugin measures (plugins/profile-memory); this trains the pipeline with it
// for the profiled step and prints what it wrote.
int run(const Options& o) {
  {  // the pipeline as given, before the profile's overrides
    const Pipeline given = load_pipeline(o.file, o.overrides);
    TT_CHECK_AS(ConfigError, !given.has_compare, o.file, " compares variants (its compare: section) and "
                "--profile-memory profiles one pipeline: add the override 'compare=~' (quoted: the shell expands ~) to "
                "profile it without the section, with a variant's changes as overrides");
    TT_CHECK_AS(ConfigError, !given.trainer.is_set("max_steps") || given.trainer.get_int("max_steps") > 0,
                child::trains_no_steps(o.file), " and --profile-memory profiles training steps; to profile "
                "fine-tuning it, give the override trainer.max_steps=", o.step);
  }
  std::vector<std::string> ov = o.overrides;
  ov.push_back("trainer.max_steps=" + std::to_string(o.step));
  ov.push_back("trainer.progress=off");
  ov.push_back("output.plots=false");
  Pipeline p = load_pipeline(o.file, ov);
  TrainerConfig cfg;
  cfg.quiet = true;
  cfg.overwrite = o.overwrite;
  if (!o.run_dir.empty()) {
    cfg.run_dir = o.run_dir;
  } else {
    cfg.run_dir = timestamped_dir(p.output.get_string("dir"), p.name + "-profile");
  }
  // A directory named here and refused before the run wrote to it is not left behind, empty.
  struct RemoveIfEmpty {
    fs::path dir;
    ~RemoveIfEmpty() {
      std::error_code ec;
      if (!dir.empty() && fs::is_empty(dir, ec) && !ec) fs::remove(dir, ec);
    }
  } made{o.run_dir.empty() ? cfg.run_dir : fs::path()};
  for (const auto& c : p.plugins)
    TT_CHECK_AS(ConfigError, c.name != "profile-memory", o.file,
                ": the pipeline lists profile-memory itself; run it with tt-run, or remove it for --profile-memory");
  const auto& component = Registry::global().plugin("profile-memory");
  YAML::Node step_node;
  step_node["step"] = o.step;
  p.plugins.push_back({"profile-memory",
                       tt::Options::parse(step_node, component.schema, "plugins (profile-memory)", "--profile-memory"),
                       "--profile-memory"});
  // A model's fused step (the topic model's) runs only without plugins: the profile, a plugin,
  // sees the usual step (gradient tensors, the optimizer's own step) instead.
  const bool fused = p.model.options.is_set("fused_step") && p.model.options.get_bool("fused_step");
  Trainer trainer(std::move(p), cfg);
  {
    // The console shows the profile (and warnings); the run's log lines go to its log.txt. A
    // few steps' end-of-training report is not a profile's (the topic model's top terms of
    // every topic after 3 steps).
    struct ConsoleWarningsOnly {
      std::shared_ptr<spdlog::sinks::sink> console = log().sinks().front();
      spdlog::level::level_enum was = console->level();
      ConsoleWarningsOnly() { console->set_level(spdlog::level::warn); }
      ~ConsoleWarningsOnly() { console->set_level(was); }
    } quiet_console;
    trainer.fit();
  }
  const fs::path dir = trainer.run_dir();
  TT_CHECK(fs::exists(dir / "memory_profile.json"), "profile: step ", o.step,
           " was not reached (the run has fewer steps: fewer batches than that in one epoch with trainer.epochs set?)");
  const json prof = json::parse(std::ifstream(dir / "memory_profile.json"));
  const json& mem = prof["memory"];
  const int64_t step_peak = prof["step_peak_tensor_bytes"].get<int64_t>();
  const int64_t start_bytes = prof["step_start_tensor_bytes"].get<int64_t>();

  // The tables.
  std::printf("memory profile of %s, step %d (tt's meter; run in %s)\n", trainer.pipeline().name.c_str(), o.step,
              dir.c_str());
  std::printf("\nbreakdown            MiB\n");
  for (const char* k : {"parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes",
                        "teacher_bytes", "held_bytes"}) {
    const std::string key(k);
    if ((key == "teacher_bytes" || key == "held_bytes") && mem.value(k, int64_t{0}) == 0) continue;
    std::printf("  %-22s %10s\n", key == "held_bytes" ? "held by plugins" : key.substr(0, key.size() - 6).c_str(),
                format_mib(mem[k].get<int64_t>(), 2).c_str());
  }
  // what the peak holds beyond those, as compare's table has it
  std::printf("  %-22s %10s  (the peak less the parts above: backward's working memory, such as the blocks "
              "checkpointing re-runs, the step's batch, what a plugin holds without tt::report_held; < 0 where the "
              "gradients, freed before each forward, were not all live at the peak)\n", "rest",
              format_mib(mem["rest_bytes"].get<int64_t>(), 2).c_str());
  for (const char* k : {"peak_tensor_bytes", "peak_rss_bytes"})
    std::printf("  %-22s %10s\n", std::string(k).substr(0, std::string(k).size() - 6).c_str(),
                format_mib(mem[k].get<int64_t>(), 2).c_str());
  std::printf("  %-22s %10s  (live at its start %s MiB; %lld allocations and frees)\n", "profiled step peak",
              format_mib(step_peak, 2).c_str(), format_mib(start_bytes, 2).c_str(), prof["trace_events"].get<long long>() - 1);
  const json& blocks = prof["blocks"];
  if (blocks.empty()) {
    std::printf("\nno per-block table: the model has no tt::nn::BlockStack\n");
  } else {
    int64_t total = 0;
    for (const auto& b : blocks) total += b["activation_bytes"].get<int64_t>();
    std::printf("\n%-14s %14s %8s %12s %12s\n", "block", "activations", "share", "forward ms", "backward ms");
    for (const auto& b : blocks) {
      const int64_t bytes = b["activation_bytes"].get<int64_t>();
      char backward[32] = "-";
      if (!b["backward_ms"].is_null()) std::snprintf(backward, sizeof backward, "%.2f", b["backward_ms"].get<double>());
      std::printf("%-14s %10s MiB %7.1f%% %12.2f %12s\n", b["block"].get<std::string>().c_str(), format_mib(bytes, 2).c_str(),
                  total > 0 ? 100.0 * static_cast<double>(bytes) / static_cast<double>(total) : 0.0,
                  b["forward_ms"].get<double>(), backward);
    }
    std::printf("%-14s %10s MiB\n", "all blocks", format_mib(total, 2).c_str());
    const int64_t micro = prof.value("micro_batches", int64_t{1});
    if (micro > 1)
      std::printf("activations are per micro-batch (the step ran %lld; each one's are freed before the next runs);\n"
                  "forward and backward ms are the step's, over all of them\n", static_cast<long long>(micro));
  }
  if (fused)
    std::printf("\nnote: model.fused_step is on, and a run of this pipeline takes the model's fused step (no gradient\n"
                "tensors; its summary.json has those figures). A profiled step cannot: this is the usual step's profile.\n");
  std::printf("\nphases (ms since the step started):");
  for (const auto& m : prof["phases"]) std::printf(" %s %.1f;", m["what"].get<std::string>().c_str(), m["ms"].get<double>());
  std::printf("\n");
  std::printf("\n%s: memory_profile.json, memory_timeline.dat%s\n", dir.c_str(),
              fs::exists(dir / "memory_timeline.png") ? ", memory_timeline.png" : "");
  return 0;
}

}  // namespace tt::profile
