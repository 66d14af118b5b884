#pragma once
// Helpers shared by the tests (the static library tt_test_support, with their main): temp dirs,
// small pipelines, subprocesses, a tiny mean-reduced regression model registered in-process,
// files, shell quoting and ConfigError messages.
#include <gtest/gtest.h>

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tt/error.h"
#include "tt/pipeline.h"
#include "tt/plugin.h"

namespace tt {
class Trainer;
}

// Expects `part` in `text` (a std::string or a C string), showing the text where it is missing;
// `text` is evaluated once (it may be a call that runs the code under test).
#define EXPECT_HAS(text, part)                                                \
  do {                                                                        \
    const std::string tt_expect_has_text_(text);                              \
    EXPECT_NE(tt_expect_has_text_.find(part), std::string::npos) << tt_expect_has_text_; \
  } while (0)

namespace tt::test {

// A new empty directory under the system's temporary directory, named after `tag`. It is removed
// when the test that made it passes (a suite's set-up's: when the program passes) and kept, its
// path on stderr, when it fails; TT_KEEP_TEST_DIRS=1 keeps them all.
std::filesystem::path temp_dir(const std::string& tag);
// Makes temp_dir's clean-up happen (the tests' main calls it once).
void install_temp_dir_cleanup();
std::string source_dir();
std::string tt_run_bin();
std::string tt_data_bin();

// A path in single quotes, for a shell command.
std::string quote(const std::filesystem::path& p);

// Writes `text` to `p` as it is.
void write_text(const std::filesystem::path& p, const std::string& text);

// The message of the `E` that `f` throws (`expected` names it); a test failure if it throws
// nothing or another type.
template <class E, class F>
std::string message_of(F&& f, const char* expected) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << expected << ", got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected " << expected << ", nothing was thrown";
  return "";
}

// The message of the ConfigError `f` throws, as message_of.
template <class F>
std::string config_error(F&& f) {
  return message_of<ConfigError>(std::forward<F>(f), "a ConfigError");
}

// The message of the ConfigError `f` throws, or "" when it throws none (the input was accepted).
template <class F>
std::string refusal_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Copies of the parameters of a trainer's model, in order.
std::vector<at::Tensor> params_of(Trainer& t);

// A small topic-model pipeline (64 docs x 50 terms, batch 16 => 4 batches per epoch).
std::string topic_yaml(const std::filesystem::path& out_dir, const std::string& trainer_extra = "",
                       const std::string& top_extra = "");

struct RunResult {
  int rc = -1;
  std::string output;
};
// Runs a shell command, stdout and stderr together.
RunResult run(const std::string& command);

// Registers "test-regression" (model, mean-reduced MSE), "test-eval-mode" (the same, its
// evaluate() reporting in_training_mode and grad_enabled), "test-bad-loss" (its loss not reduced
// or detached, as its option `how` says) and "test-regression-data".
void register_test_components();

// A pipeline of the test-regression model with validation data (64 examples, batch 16, SGD),
// its trainer section extended by `trainer_extra` ("  max_steps: 4\n"); registers the components.
Pipeline regression_pipeline(const std::filesystem::path& out_dir, const std::string& trainer_extra);

// A plugin that calls `f` on one event.
class OnEvent : public Plugin {
 public:
  OnEvent(Event e, std::function<void(State&)> f) : e_(e), f_(std::move(f)) {}
  void on(Event e, State& s) override {
    if (e == e_) f_(s);
  }

 private:
  Event e_;
  std::function<void(State&)> f_;
};

std::string read_file(const std::filesystem::path& p);

// The JSON document in `p` (a run's summary.json, a report); throws std::runtime_error naming the
// file when it is missing or not JSON, so a failed test says which file.
nlohmann::json read_json(const std::filesystem::path& p);

// A run folder's summary.json (read_json).
nlohmann::json summary_of(const std::filesystem::path& run_dir);

// Resident kB of this process's mappings of `file` (/proc/self/smaps).
int64_t mapped_rss_kb(const std::filesystem::path& file);

// A Python interpreter that imports `module` (python3-torch / python3-numpy), or "": the first
// python3 on PATH may be another Python than Debian's, so /usr/bin/python3 is tried too.
std::string python_with(const std::string& module);

// A CSV file (compare.csv, --predict-out's predictions) as rows of header -> field: quoted fields
// unquoted, no field spanning lines; a row with another number of fields than the header is a
// test failure.
std::vector<std::map<std::string, std::string>> csv_rows(const std::filesystem::path& file);

// The per-step lines (those with a "loss") of a run's metrics.jsonl, as JSON text.
std::vector<std::string> step_lines(const std::filesystem::path& metrics_jsonl);

// A tiny transformer LM pipeline on a generated text file in `dir`, run through tt-run:
// run(tag, plugins, trainer) writes dir/tag.yaml and trains into dir/tag.
struct TinyLm {
  std::filesystem::path dir;
  std::string model = "{name: transformer, d_model: 64, n_layers: 4, n_heads: 4, sample_tokens: 0}";
  int seq_len = 128;
  std::string data;  // when set, the whole data section (else train.txt at seq_len)
  explicit TinyLm(const std::string& tag);
  RunResult run(const std::string& tag, const std::string& plugins, const std::string& trainer,
                const std::string& extra_top = "") const;
  nlohmann::json summary(const std::string& tag) const;  // dir/tag's summary.json
  // Copies run `from` to `to` as if it had stopped after the checkpoint of step `step`
  // (later checkpoints and the summary removed), then resumes `to` with tt-run --resume.
  RunResult resume_copy(const std::string& from, const std::string& to, int step) const;
};

}  // namespace tt::test
