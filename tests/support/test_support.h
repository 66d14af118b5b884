#pragma once
// Helpers shared by the tests: temp dirs, small pipelines, subprocesses, a tiny
// mean-reduced regression model registered in-process.
#include <filesystem>
#include <string>
#include <vector>

#include "tt/pipeline.h"

namespace tt::test {

std::filesystem::path temp_dir(const std::string& tag);
std::string source_dir();
std::string tt_run_bin();

// A small topic-model pipeline (64 docs x 50 terms, batch 16 => 4 batches per epoch).
std::string topic_yaml(const std::filesystem::path& out_dir, const std::string& trainer_extra = "",
                       const std::string& top_extra = "");

struct RunResult {
  int rc = -1;
  std::string output;
};
// Runs a shell command, stdout and stderr together.
RunResult run(const std::string& command);

// Registers "test-regression" (model, mean-reduced MSE) and "test-regression-data".
void register_test_components();

std::string read_file(const std::filesystem::path& p);

}  // namespace tt::test
