#pragma once
// Streaming text for the LM: files (or directories of files, recursively, sorted by path)
// read in order in chunks, tokenized on the fly, cut into windows of seq_len + 1 tokens
// (inputs = window[0:seq_len], targets = window[1:]) every `stride` tokens, then passed
// through a shuffle buffer. Memory is bounded by the buffer and one chunk, never by the corpus.
//
// Each file's text is followed by a newline before the next file's, so windows run across
// file boundaries as one token stream. Chunks end at a line break (or at chunk_bytes when a
// line is longer), so where the stream restarts after restore() is a deterministic cut.
//
// Batches: "input" and "target" int64 [B, seq_len].
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tokenizer.h"
#include "tt/dataset.h"
#include "tt/options.h"

namespace tt::lm {

// The text dataset's options: text_schema() binds seq_len, stride, shuffle_buffer,
// max_examples and chunk_bytes (their defaults and ranges are there; code that builds one
// without a schema starts from Options::defaults(text_schema(), ...).to<TextStreamOptions>()).
struct TextStreamOptions {
  std::vector<std::string> paths;  // files or directories (the "train" or "validation" option)
  int64_t seq_len;
  int64_t stride;          // 0: seq_len (windows do not overlap; every token predicted once)
  int64_t shuffle_buffer;  // windows held for shuffling; 0: in order
  int64_t max_examples;    // windows per epoch; 0: all
  int64_t chunk_bytes;     // text read and tokenized at once
  bool binary;             // train on the files' raw bytes even where they are not text
  uint64_t seed = 0;       // the pipeline's seed
};

class TextStream : public StreamDataset {
 public:
  // The options are in their schema's ranges (text_schema()). Checks the paths (missing, empty,
  // no files in a directory: tt::ConfigError naming the path), then counts the epoch's windows in one pass (logged when slow) and the
  // characters and tokens of the text (for bits/char).
  TextStream(TextStreamOptions o, std::shared_ptr<Tokenizer> tokenizer, std::string what);

  int64_t size() const override { return windows_; }
  std::map<std::string, int64_t> info() const override;  // vocab_size, seq_len
  std::string describe() const override;

  void start_epoch(int64_t epoch) override;
  Batch next(int64_t n) override;
  std::string position() const override;
  void restore(const std::string& position) override;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<Tokenizer> tokenizer_ptr() const { return tokenizer_; }
  int64_t total_tokens() const { return tokens_; }   // of the whole text, one pass
  int64_t total_chars() const { return chars_; }     // UTF-8 code points of the whole text
  const TextStreamOptions& options() const { return o_; }
  const std::vector<std::string>& files() const { return files_; }

  // Why the file at `path` is not text as this dataset reads it (chunk by chunk of chunk_bytes,
  // each cut at a line break, checked by not_text_reason: a NUL byte, or more than 2% of a
  // chunk's bytes not UTF-8), or "" where it is. tt-data tokenizer checks its input with it.
  static std::string not_text(const std::string& path, int64_t chunk_bytes);

 private:
  bool fill();                    // reads and tokenizes the next chunk into pending_; false at the end
  bool next_window(std::vector<int32_t>& out);  // from the token stream, before shuffling
  bool next_example(std::vector<int32_t>& out);  // through the shuffle buffer, up to max_examples

  // One chunk of a file: its text (the separator appended to a file's last chunk), where the
  // next chunk starts, and whether it was the file's last.
  struct Chunk {
    std::string text;
    int64_t next_offset = 0;
    bool last = false;
  };
  struct Reader {  // the open file, kept between chunks
    std::ifstream in;
    size_t file = std::numeric_limits<size_t>::max();
    int64_t size = 0;
  };
  // Reads the chunk of files[file] at offset into c ("what" names the dataset in errors).
  static void read_chunk(Reader& r, const std::vector<std::string>& files, size_t file, int64_t offset,
                         int64_t chunk_bytes, const std::string& what, Chunk& c);
  [[noreturn]] void position_mismatch(const std::string& what_differs) const;

  TextStreamOptions o_;
  std::shared_ptr<Tokenizer> tokenizer_;
  std::string what_;
  std::vector<std::string> files_;
  int64_t windows_ = 0, tokens_ = 0, chars_ = 0;

  // position
  int64_t epoch_ = -1;
  size_t file_ = 0;               // next file to read
  int64_t offset_ = 0;            // next byte of that file
  std::vector<int32_t> pending_;  // tokens read but not yet windowed
  int64_t pending_begin_ = 0;     // start of the next window within pending_
  int64_t emitted_ = 0;           // windows returned this epoch
  bool exhausted_ = false;        // no more windows from the files
  std::vector<std::vector<int32_t>> buffer_;  // the shuffle buffer
  std::mt19937_64 rng_;

  Reader reader_;  // not part of the position: reopened as needed
};

Schema text_schema();
Datasets make_text(const Options& o, uint64_t seed);

}  // namespace tt::lm
