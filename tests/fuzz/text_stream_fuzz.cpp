// The LM's text stream (models/transformer/src/text_stream.cpp) over the bytes tokenizer, or
// with TT_FUZZ_SENTENCEPIECE over a SentencePiece model trained when the harness starts
// (tokenizer.cpp). Input: text, then after the first NUL the stream's options and a saved
// position. The text is cut into one to three files; a stream that accepts them must give
// exactly size() windows of in-vocabulary tokens, a stream restored from position() must
// continue with the same windows, and a position from the input must be refused or followed.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "fuzz_util.h"
#include "text_stream.h"
#include "tokenizer.h"

namespace {

std::shared_ptr<tt::lm::Tokenizer> tokenizer;

using Windows = std::vector<std::vector<int64_t>>;

// The windows (input then the last target) of batches of `per_batch`, until the stream ends
// or `limit` windows.
Windows drain(tt::lm::TextStream& s, int64_t per_batch, size_t limit) {
  Windows out;
  while (out.size() < limit) {
    tt::Batch b = s.next(per_batch);
    if (!b.has("input")) break;
    const at::Tensor in = b.at("input"), target = b.at("target");
    for (int64_t r = 0; r < in.size(0); ++r) {
      std::vector<int64_t> w(in[r].data_ptr<int64_t>(), in[r].data_ptr<int64_t>() + in.size(1));
      w.push_back(target[r][in.size(1) - 1].item<int64_t>());
      for (int64_t t : w) tt::fuzz::expect(t >= 0 && t < tokenizer->vocab_size(), "text stream: tokens in the vocabulary");
      out.push_back(std::move(w));
    }
  }
  return out;
}

#ifdef TT_FUZZ_SENTENCEPIECE
constexpr bool sentencepiece = true;
#else
constexpr bool sentencepiece = false;
#endif

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // every input a text of its own: its count kept nowhere (it would fill ~/.cache/tt)
  ::setenv("TT_CACHE_DIR", "off", 1);
#ifdef TT_FUZZ_SENTENCEPIECE
  // A small model with byte fallback, so that any text encodes.
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "The quick brown fox jumps over the lazy dog " + std::to_string(i) +
            ". Tokenizers cut text into pieces; windows of tokens train the model.\n"
            "Grüße, ça va? Ünïcödé text — with punctuation, digits 0123456789 and tabs\tand spaces.\n";
  const auto corpus = tt::fuzz::write_file("tokenizer-corpus.txt", text);
  tt::lm::TokenizerTraining t;
  t.inputs = {corpus.string()};
  t.vocab_size = 320;
  t.threads = 1;
  t.out = (tt::fuzz::scratch() / "tok.model").string();
  tt::lm::train_sentencepiece(t);
  tokenizer = tt::lm::load_tokenizer(t.out);
#else
  tokenizer = tt::lm::load_tokenizer("bytes");
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt::fuzz;
  const auto [text, tail] = split_at_nul(as_view(data, size));
  uint8_t opt[8] = {};
  std::copy_n(tail.begin(), std::min<size_t>(tail.size(), 8), opt);
  const std::string position(tail.size() > 8 ? tail.substr(8) : std::string_view());

  tt::lm::TextStreamOptions o{};
  o.seq_len = 1 + opt[0] % 16;
  o.stride = opt[1] % (o.seq_len + 2);  // 0: seq_len; beyond seq_len skips tokens
  o.shuffle_buffer = opt[2] % 6;
  o.max_examples = opt[3] % 5;
  o.chunk_bytes = 1 + opt[4] % 64;
  o.seed = opt[7];
  o.binary = (opt[5] & 4) != 0 && !sentencepiece;  // raw bytes on purpose (the bytes tokenizer only)
  // One to three files, cut at fractions of the text (their order is the path order).
  const int files = 1 + opt[5] % 3;
  size_t begin = 0;
  for (int f = 0; f < files; ++f) {
    const size_t end = f + 1 == files ? text.size() : std::max(begin, text.size() * (f + 1 + opt[6] % 2) / (files + 1));
    const std::string name = "part" + std::to_string(f) + ".txt";
    o.paths.push_back(write_file(name, text.substr(begin, end - begin)).string());
    begin = end;
  }
  const int64_t per_batch = 1 + opt[6] % 3;

  refusing([&] {
    tt::lm::TextStream s(o, tokenizer, "fuzz");
    s.start_epoch(0);
    // Part of the epoch, the position there, then the rest.
    const size_t cut = static_cast<size_t>(opt[7] % 8);
    Windows first = drain(s, per_batch, cut);
    const std::string saved = s.position();
    Windows rest = drain(s, per_batch, SIZE_MAX);
    expect(static_cast<int64_t>(first.size() + rest.size()) == s.size(), "text stream: size() windows per epoch");

    tt::lm::TextStream resumed(o, tokenizer, "fuzz");
    resumed.restore(saved);
    expect(drain(resumed, per_batch, SIZE_MAX) == rest, "text stream: a restored position continues the same windows");

    if (!position.empty()) {
      refusing([&] {
        tt::lm::TextStream other(o, tokenizer, "fuzz");
        other.restore(position);
        (void)drain(other, per_batch, 4096);
      });
    }
  });
  return 0;
}
