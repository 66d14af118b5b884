#pragma once
// The training loop. Builds data, model, plugins, optimizer and schedule from a Pipeline,
// fires events, meters memory, writes the run directory, checkpoints and resumes.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tt/export.h"
#include "tt/pipeline.h"
#include "tt/state.h"

namespace tt {

class Plugin;

struct TrainerConfig {
  std::filesystem::path run_dir;     // empty: <output.dir>/<name>-<timestamp>
  bool resume = false;               // continue from the newest checkpoint in run_dir
  bool overwrite = false;            // run_dir holds a run: empty it first (else that is refused)
  bool quiet = false;                // no progress output, no summary print
};

class TT_API Trainer {
 public:
  explicit Trainer(Pipeline pipeline, TrainerConfig config = {});
  ~Trainer();
  // Adds a plugin object after those the pipeline names (tests, embedding).
  void add_plugin(std::unique_ptr<Plugin> plugin);
  // Before fit(): the file predict() will be given (tt-run --predict). fit() has the model check it
  // (Model::check_predict_input) once the model is built, before any step.
  void will_predict(const std::filesystem::path& input);
  // Before fit(): the command line that started the run, for summary.json (tt-run's argv).
  void set_command(std::vector<std::string> argv);
  // Runs the whole fit. Throws tt::Error subclasses with a message for the user.
  void fit();

  // After fit(): the model continues `prompt` (language models; others refuse with a
  // ConfigError). Also written to RUN_DIR/samples.txt.
  std::string generate(const std::string& prompt, const GenerateOptions& options);

  // After fit(): the model's predictions for the examples in `input`, written to `output`
  // (Model::predict; tt-run --predict), measured by tt's meter on their own. The figures also go
  // into summary.json as "prediction".
  struct Prediction {
    double seconds = 0;
    int64_t peak_tensor_bytes = 0, peak_rss_bytes = 0;
  };
  Prediction predict(const std::filesystem::path& input, const std::filesystem::path& output);

  State& state();
  const Pipeline& pipeline() const;
  const std::filesystem::path& run_dir() const;
  const std::vector<double>& step_losses() const;  // loss of every step taken in this process
  const MemoryBreakdown& memory() const;
  std::string summary_json() const;  // as written to summary.json

  // Reads RUN_DIR/pipeline.yaml; overrides apply on top.
  static Pipeline pipeline_of_run(const std::filesystem::path& run_dir, const std::vector<std::string>& overrides);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tt
