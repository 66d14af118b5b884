#pragma once
// Tokenizers for the transformer LM: bytes (no model file: ids 0..255 are the UTF-8 bytes)
// and SentencePiece (libsentencepiece; a .model file trained with `tt-data tokenizer`).
// No torch here: the text stream, tt-data and tests use it.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tt::lm {

class Tokenizer {
 public:
  virtual ~Tokenizer();
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids outside [0, vocab_size) are an error (tt::Error naming the id).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // "bytes (256)" or "sentencepiece tok.model (bpe, 1024)".
  virtual std::string describe() const = 0;
  // The spec it was loaded from ("bytes" or the model path), stored with runs/checkpoints.
  virtual std::string spec() const = 0;
  // What the ids mean, wherever the file lies: "bytes", or "sentencepiece (bpe, 1024) <FNV-1a
  // of the .model file>". Checkpoints record it (Model::data_identity).
  virtual std::string identity() const = 0;
};

class ByteTokenizer : public Tokenizer {
 public:
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string describe() const override { return "bytes (256)"; }
  std::string spec() const override { return "bytes"; }
  std::string identity() const override { return "bytes"; }
};

// `spec` is "bytes" or a SentencePiece .model path. A missing, empty or unreadable model is a
// tt::Error naming the file and how to make one (tt-data tokenizer ...).
std::shared_ptr<Tokenizer> load_tokenizer(const std::string& spec);

// Why this build cannot open SentencePiece, or "" when it can. A build with AddressSanitizer
// (TT_SANITIZE) cannot: the library is opened with RTLD_DEEPBIND, which ASan refuses.
std::string sentencepiece_unavailable();

struct TokenizerTraining {
  std::vector<std::string> inputs;  // text files, or directories (their files, recursively, sorted)
  int64_t vocab_size = 1024;
  std::string model_type = "bpe";   // bpe | unigram | char | word
  bool byte_fallback = true;
  double character_coverage = 1.0;
  int64_t max_sentences = 2000000;  // input_sentence_size: lines sampled for training (0: all)
  int threads = 0;                  // 0: OMP_NUM_THREADS when set, else all cores
  std::string out;                  // the .model path; a .vocab is written beside it
};
// The files of `inputs` in the order given: a file itself, a directory's regular files
// (recursively, sorted by path; links to files read, links to directories not followed: those
// and what is neither a file nor a directory, such as a broken link, are skipped with a
// warning). The text dataset and tt-data tokenizer read the same files. A missing input, one
// neither a file nor a directory, or a directory without files: tt::ConfigError beginning
// "what: " and naming it.
std::vector<std::string> text_files(const std::vector<std::string>& inputs, const std::string& what);

// Trains a SentencePiece model; errors (no input, vocab too large for the text) name the fix.
// Identity normalization and no dummy prefix: decode(encode(text)) == text, also for
// concatenated chunks (see tokenizer.cpp for the exceptions). Returns notes for the user: a
// BPE model's input file holding over 32,767 characters without a space is read with such runs
// cut into lines (SentencePiece's BPE trainer crashes on them), and a note says so.
// `files`: text_files(t.inputs) where the caller listed them already (empty: listed here).
std::vector<std::string> train_sentencepiece(const TokenizerTraining& t, std::vector<std::string> files = {});
// Refuses options out of range (ConfigError naming the flag); train_sentencepiece calls it first.
void check_training(const TokenizerTraining& t);

// Number of UTF-8 code points in `s` (for bits/char).
int64_t utf8_chars(std::string_view s);

}  // namespace tt::lm
