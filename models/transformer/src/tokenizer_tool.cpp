// tt-data tokenizer: trains a SentencePiece model (tok.model, tok.vocab beside it) for the
// transformer LM's text dataset, then reports how many characters a token covers.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data_tools.h"
#include "tokenizer.h"
#include "tt/cli.h"
#include "tt/error.h"

namespace tt::lm {

namespace {

struct TokenizerArgs {
  TokenizerTraining training;
  bool no_byte_fallback = false;
};

// Up to `limit` bytes of the inputs, file after file (a newline between files, as the text
// stream reads them), cut at a code point boundary.
std::string sample_text(const std::vector<std::string>& files, size_t limit) {
  std::string text;
  for (const auto& f : files) {
    if (text.size() >= limit) break;
    if (!text.empty()) text += '\n';
    std::ifstream in(f, std::ios::binary);
    std::string chunk(limit - std::min(limit, text.size()), '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    chunk.resize(static_cast<size_t>(in.gcount()));
    text += chunk;
  }
  size_t end = std::min(limit, text.size());
  while (end > 0 && end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text;
}

void run_tokenizer(TokenizerArgs a) {
  auto& t = a.training;
  t.byte_fallback = !a.no_byte_fallback;
  check_training(t);  // before it says what it trains
  const auto files = text_files(t.inputs, "--input");
  std::fprintf(stderr, "tokenizer: training a %s SentencePiece model of %lld tokens on %zu file%s%s...\n",
               t.model_type.c_str(), static_cast<long long>(t.vocab_size), files.size(), files.size() == 1 ? "" : "s",
               t.byte_fallback ? " (byte fallback)" : "");
  const auto start = std::chrono::steady_clock::now();
  const auto notes = train_sentencepiece(t, files);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const auto tok = load_tokenizer(t.out);
  const std::string sample = sample_text(files, size_t{1} << 20);
  const auto tokens = tok->encode(sample).size();
  const auto vocab = std::filesystem::path(t.out).replace_extension(".vocab");
  for (const auto& note : notes) std::fprintf(stderr, "tokenizer: %s\n", note.c_str());
  std::fprintf(stderr, "tokenizer: wrote %s and %s in %.1f s\n", t.out.c_str(), vocab.c_str(), seconds);
  if (tokens > 0)
    std::fprintf(stderr, "tokenizer: %.2f characters per token on the first %.2f MB of the input\n",
                 static_cast<double>(utf8_chars(sample)) / static_cast<double>(tokens),
                 static_cast<double>(sample.size()) / 1e6);
  std::fprintf(stderr, "tokenizer: use it in a pipeline with\n  data: {name: text, train: [...], tokenizer: %s}\n",
               t.out.c_str());
}

}  // namespace

int tokenizer_tool(const std::vector<std::string>& args) {
  TokenizerArgs a;
  auto& t = a.training;
  CLI::App app{
      "train a SentencePiece tokenizer (tok.model and tok.vocab) for the transformer LM's text data; decoding "
      "gives back the exact text",
      "tt-data tokenizer"};
  app.add_option("--input", t.inputs, "text files or directories (their files, recursively), one sentence a line")
      ->required()
      ->expected(1, -1);
  app.add_option("--vocab-size", t.vocab_size, "tokens in the vocabulary (byte fallback alone takes 259)")
      ->required();
  app.add_option("--out", t.out, "the model file, ending in .model (its .vocab is written beside it)")->required();
  app.add_option("--model-type", t.model_type, "bpe, unigram, char or word")->capture_default_str();
  app.add_option("--character-coverage", t.character_coverage,
                 "share of the characters the vocabulary must hold (the rarest others become bytes)")
      ->capture_default_str();
  app.add_option("--max-sentences", t.max_sentences, "lines sampled for training (0: all)")->capture_default_str();
  app.add_option("--threads", t.threads, "threads, at most the usable cores (0: OMP_NUM_THREADS when set, else all cores)")->capture_default_str();
  app.add_flag("--no-byte-fallback", a.no_byte_fallback,
               "unseen characters become <unk> instead of their UTF-8 bytes (decoding is then lossy)");
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, app.get_name());
  }
  run_tokenizer(std::move(a));
  return 0;
}

}  // namespace tt::lm
