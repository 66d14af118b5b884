// Tokenizers (bytes, SentencePiece), their training, and tt-data tokenizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "test_support.h"
#include "text_stream.h"
#include "tokenizer.h"
#include "tt/error.h"

namespace fs = std::filesystem;
using tt::lm::load_tokenizer;
using tt::test::quote;
using tt::test::run;
using tt::test::tt_data_bin;
using tt::test::write_text;

// A build with AddressSanitizer cannot open SentencePiece (tokenizer.h says why): its tests skip.
#define TT_SKIP_WITHOUT_SENTENCEPIECE()                                          \
  if (const std::string why = tt::lm::sentencepiece_unavailable(); !why.empty()) \
  GTEST_SKIP() << why

namespace {


// Deterministic English-like sentences, one a line (~65 bytes each).
std::string english_like(int sentences, unsigned seed) {
  static const char* const kWords[] = {
      "the",   "of",     "and",    "to",    "in",      "a",     "is",     "that",   "for",     "it",
      "was",   "with",   "be",     "by",    "on",      "not",   "he",     "this",   "are",     "or",
      "his",   "from",   "at",     "which", "but",     "have",  "an",     "they",   "you",     "were",
      "her",   "she",    "there",  "been",  "one",     "all",   "we",     "their",  "would",   "when",
      "river", "garden", "letter", "quiet", "morning", "house", "city",   "market", "history", "window",
      "said",  "walked", "found",  "under", "between", "after", "before", "little", "strange", "people"};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::uniform_int_distribution<int> length(4, 16), mark(0, 9), number(0, 1999);
  std::string text;
  for (int s = 0; s < sentences; ++s) {
    std::string sentence;
    const int n = length(rng);
    for (int i = 0; i < n; ++i) {
      if (i > 0) sentence += mark(rng) == 0 ? ", " : " ";
      sentence += mark(rng) == 1 && i > 0 ? std::to_string(number(rng)) : kWords[word(rng)];
    }
    sentence[0] = static_cast<char>(std::toupper(sentence[0]));
    text += sentence + (mark(rng) == 2 ? "?" : ".") + "\n";
  }
  return text;
}

// Expects `f` to throw a tt::Error (or subclass E) whose message contains every one of `parts`.
template <class E = tt::Error, class F>
void expect_error(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

const std::vector<std::string> kRoundTrip = {
    "The river walked under the quiet garden.",
    "  two leading spaces, two  inside and trailing  ",
    "lines\nand\n\nblank lines\n",
    "tabs\tand\r\ncarriage returns",
    "Zürich, naïve café — «quotes» ½ 日本語 🙂 never seen in training",
    "digits 0123456789 and 3.14159",
    "",
    " ",
    "\x01 control \x7f",
};

}  // namespace

TEST(ByteTokenizer, RoundTripsUtf8) {
  tt::lm::ByteTokenizer t;
  const std::string text = "héllo wörld — 日本語 🙂\n\t\x01";
  const auto ids = t.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<uint8_t>(text[i]));
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.spec(), "bytes");
  EXPECT_EQ(t.describe(), "bytes (256)");
}

TEST(ByteTokenizer, OutOfRangeIdIsAnErrorNamingIt) {
  tt::lm::ByteTokenizer t;
  expect_error([&] { t.decode({72, 105, 256}); }, {"256", "0..255"});
  expect_error([&] { t.decode({-1}); }, {"-1"});
}

TEST(ByteTokenizer, Utf8CharsCountsCodePoints) {
  EXPECT_EQ(tt::lm::utf8_chars(""), 0);
  EXPECT_EQ(tt::lm::utf8_chars("abc"), 3);
  EXPECT_EQ(tt::lm::utf8_chars("héllo"), 5);
  EXPECT_EQ(tt::lm::utf8_chars("日本語"), 3);
  EXPECT_EQ(tt::lm::utf8_chars("🙂 ok"), 4);
}

TEST(LoadTokenizer, BytesSpecAndMissingEmptyOrGarbageFiles) {
  EXPECT_EQ(load_tokenizer("bytes")->spec(), "bytes");
  const fs::path dir = tt::test::temp_dir("tok-load");
  const fs::path missing = dir / "missing.model", empty = dir / "empty.model", garbage = dir / "garbage.model";
  write_text(empty, "");
  write_text(garbage, "this is not a SentencePiece model, just some text\n");
  expect_error([&] { load_tokenizer(missing.string()); }, {missing.string(), "not found", "tt-data tokenizer"});
  expect_error([&] { load_tokenizer(empty.string()); }, {empty.string(), "empty", "tt-data tokenizer"});
  if (const std::string why = tt::lm::sentencepiece_unavailable(); !why.empty())  // (an ASan build) says so, naming the file
    expect_error([&] { load_tokenizer(garbage.string()); }, {garbage.string(), why});
  else
    expect_error([&] { load_tokenizer(garbage.string()); },
                 {garbage.string(), "not a SentencePiece model", "tt-data tokenizer", "tokenizer: bytes"});
  fs::remove_all(dir);
}

// One model trained for the suite: bpe, 400 tokens, byte fallback, on ~300 KB of text.
class SentencePieceTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!tt::lm::sentencepiece_unavailable().empty()) return;  // each test skips, saying why
    dir_ = tt::test::temp_dir("tok-sp");
    write_text(dir_ / "train.txt", english_like(4500, 1));
    tt::lm::TokenizerTraining t;
    t.inputs = {(dir_ / "train.txt").string()};
    t.vocab_size = 400;
    t.threads = 2;
    t.out = (dir_ / "tok.model").string();
    tt::lm::train_sentencepiece(t);
    tok_ = load_tokenizer(t.out);
  }
  static void TearDownTestSuite() {
    tok_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override { TT_SKIP_WITHOUT_SENTENCEPIECE(); }
  static const tt::lm::Tokenizer& tok() { return *tok_; }
  static inline fs::path dir_;
  static inline std::shared_ptr<tt::lm::Tokenizer> tok_;
};

TEST_F(SentencePieceTokenizer, DescribesItself) {
  EXPECT_EQ(tok().vocab_size(), 400);
  const std::string model = (dir_ / "tok.model").string();
  EXPECT_EQ(tok().spec(), model);
  EXPECT_EQ(tok().describe(), "sentencepiece " + model + " (bpe, 400)");
  std::ifstream vocab(dir_ / "tok.vocab");
  int lines = 0;
  for (std::string line; std::getline(vocab, line);) ++lines;
  EXPECT_EQ(lines, 400);
}

// Identity normalization, no dummy prefix, byte fallback: exact, even for unseen characters,
// leading/trailing/repeated spaces and newlines (never in training: lines are sentences).
TEST_F(SentencePieceTokenizer, RoundTripsExactly) {
  for (const auto& text : kRoundTrip) {
    const auto ids = tok().encode(text);
    for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 400) << id;
    EXPECT_EQ(tok().decode(ids), text);
  }
  EXPECT_TRUE(tok().encode("").empty());
}

// What the text stream relies on: chunks tokenized apart decode to the whole text.
TEST_F(SentencePieceTokenizer, ConcatenatedChunksDecodeToTheWholeText) {
  const std::string a = "The city was quiet.\n", b = "She walked after the market.\n";
  auto ids = tok().encode(a);
  const auto more = tok().encode(b);
  ids.insert(ids.end(), more.begin(), more.end());
  EXPECT_EQ(tok().decode(ids), a + b);
  EXPECT_EQ(ids, tok().encode(a + b));  // cut at a line break: the same tokens
}

TEST_F(SentencePieceTokenizer, CompressesTheTextItWasTrainedOn) {
  const std::string text = english_like(300, 2);  // unseen sentences, the same language
  const auto ids = tok().encode(text);
  EXPECT_EQ(tok().decode(ids), text);
  // 400 tokens are mostly the 256 bytes: ~1.9 characters a token here (bytes: 1)
  EXPECT_GT(static_cast<double>(tt::lm::utf8_chars(text)) / static_cast<double>(ids.size()), 1.5);
}

TEST_F(SentencePieceTokenizer, OutOfRangeIdIsAnErrorNamingIt) {
  expect_error([&] { tok().decode({5, 400}); }, {"400", "0..399"});
  expect_error([&] { tok().decode({-3}); }, {"-3"});
}

TEST_F(SentencePieceTokenizer, ConcurrentEncodesAgree) {
  const std::string text = english_like(200, 3);
  const auto expected = tok().encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) g = tok().encode(text);
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

TEST(SentencePieceTraining, DirectoriesAreExpandedRecursivelySortedAndWhatIsNotReadIsSaid) {
  const fs::path dir = tt::test::temp_dir("tok-dirs");
  fs::create_directories(dir / "b" / "c");
  write_text(dir / "b" / "c" / "z.txt", "z");
  write_text(dir / "b" / "a.txt", "a");
  write_text(dir / "one.txt", "1");
  fs::create_directories(dir / "elsewhere");
  write_text(dir / "elsewhere" / "e.txt", "e");
  fs::create_directory_symlink(dir / "elsewhere", dir / "b" / "d");  // not followed (a sibling's read twice): said
  fs::create_symlink(dir / "gone.txt", dir / "b" / "broken.txt");  // a link to nothing: said, not read
  fs::create_symlink(dir / "one.txt", dir / "b" / "c" / "linked.txt");  // a link to a file: read
  testing::internal::CaptureStderr();
  const auto files = tt::lm::text_files({(dir / "one.txt").string(), (dir / "b").string()}, "data.train");
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(files, (std::vector<std::string>{(dir / "one.txt").string(), (dir / "b" / "a.txt").string(),
                                             (dir / "b" / "c" / "linked.txt").string(),
                                             (dir / "b" / "c" / "z.txt").string()}));
  EXPECT_NE(said.find("data.train: 2 entries under " + (dir / "b").string() + " are not a file and not read (the first: " +
                      (dir / "b" / "broken.txt").string() + ", a link to nothing)"),
            std::string::npos) << said;
  const auto linked_dir = tt::lm::text_files({(dir / "elsewhere").string(), (dir / "b" / "c").string()}, "x");
  EXPECT_EQ(linked_dir.size(), 3u);  // a directory named itself is read, links or not
  fs::remove(dir / "b" / "broken.txt");
  testing::internal::CaptureStderr();
  tt::lm::text_files({(dir / "b").string()}, "data.train");
  const std::string said2 = testing::internal::GetCapturedStderr();
  EXPECT_NE(said2.find("(the first: " + (dir / "b" / "d").string() + ", a link to a directory, not followed: name it itself)"),
            std::string::npos) << said2;
  fs::create_directories(dir / "empty");
  expect_error<tt::ConfigError>([&] { tt::lm::text_files({(dir / "empty").string()}, "--input"); },
                                {"--input: no files in the directory " + (dir / "empty").string()});
  expect_error<tt::ConfigError>([&] { tt::lm::text_files({(dir / "none.txt").string()}, "--input"); },
                                {"--input: no such file or directory '" + (dir / "none.txt").string()});
  fs::remove_all(dir);
}

TEST(SentencePieceTraining, BadArgumentsAreConfigErrorsNamingTheFix) {
  TT_SKIP_WITHOUT_SENTENCEPIECE();
  const fs::path dir = tt::test::temp_dir("tok-bad");
  write_text(dir / "small.txt", english_like(40, 4));
  tt::lm::TokenizerTraining t;
  t.inputs = {(dir / "small.txt").string()};
  t.threads = 1;
  t.out = (dir / "tok.bin").string();
  expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); }, {"--out must end in .model"});
  t.out = (dir / "tok.model").string();
  t.inputs = {(dir / "nowhere.txt").string()};
  expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); }, {(dir / "nowhere.txt").string()});
  t.inputs = {(dir / "small.txt").string()};
  t.vocab_size = 5000;
  expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); },
                                {"Vocabulary size too high", "try a smaller --vocab-size"});
  t.vocab_size = 100;
  expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); }, {"a larger --vocab-size", "259"});
  t.vocab_size = 400;
  t.model_type = "bigram";
  expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); }, {"--model-type", "bigram"});
  t.model_type = "bpe";
  // not text (the text dataset refuses it; SentencePiece trained on it), and text without a line
  // SentencePiece reads ("no reason given")
  write_text(dir / "latin1.txt", std::string(2000, '\xE9'));
  t.inputs = {(dir / "latin1.txt").string()};
  expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); },
                                {"latin1.txt is not a text file (", "are not valid UTF-8", "give UTF-8 text files"});
  std::string one_line;
  while (one_line.size() <= (size_t{1} << 20)) one_line += "a line that never ends ";
  write_text(dir / "one-line.txt", one_line);
  t.inputs = {(dir / "one-line.txt").string()};
  expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); },
                                {"SentencePiece read no sentence", "skips lines over 1 MiB", "fold -s -w 2000"});
  fs::remove_all(dir);
}

// tt-data tokenizer refuses what the text dataset would refuse, wherever in a file it is (it read
// the first MiB only, so a file it trained on could then be refused by tt-run): a NUL byte past
// that MiB, and a chunk with more than 2% Latin-1 bytes in a file otherwise UTF-8.
TEST(SentencePieceTraining, RefusesWhatTheTextDatasetRefusesAnywhereInAFile) {
  const fs::path dir = tt::test::temp_dir("tok-late-binary");
  std::string text;
  while (text.size() < (size_t{3} << 19)) text += "plain words make up most of this file, line after line.\n";
  std::string nul = text, latin1 = text;
  nul[size_t{1300} << 10] = '\0';
  for (size_t i = size_t{1200} << 10; i < (size_t{1220} << 10); i += 2) latin1[i] = '\xe9';
  write_text(dir / "nul.txt", nul);
  write_text(dir / "latin1.txt", latin1);
  write_text(dir / "text.txt", text);
  tt::lm::TokenizerTraining t;
  t.threads = 1;
  t.vocab_size = 300;
  t.out = (dir / "tok.model").string();
  for (const auto* name : {"nul.txt", "latin1.txt"}) {
    const std::string path = (dir / name).string();
    const std::string why = tt::lm::TextStream::not_text(path, int64_t{256} << 10);
    ASSERT_FALSE(why.empty()) << name;
    t.inputs = {path};
    expect_error<tt::ConfigError>([&] { tt::lm::train_sentencepiece(t); }, {path + " is not a text file (" + why + ")"});
  }
  EXPECT_NE(tt::lm::TextStream::not_text((dir / "nul.txt").string(), int64_t{256} << 10)
                .find("a NUL byte at offset " + std::to_string(size_t{1300} << 10)), std::string::npos);
  EXPECT_NE(tt::lm::TextStream::not_text((dir / "latin1.txt").string(), int64_t{256} << 10).find("are not valid UTF-8"),
            std::string::npos);
  EXPECT_EQ(tt::lm::TextStream::not_text((dir / "text.txt").string(), int64_t{256} << 10), "");
}

// SentencePiece's BPE trainer crashes (SIGSEGV) on a word of 32,768 characters or more: such
// runs are cut for training, and a note names the file and line. Runs are counted in characters:
// 20,000 two-byte characters (40,000 bytes) are left as they are, and the other model types
// read the file unchanged. The copy is gone afterwards.
TEST(SentencePieceTraining, ABpeRunOverTheTrainersLimitIsCutWithANoteNotACrash) {
  TT_SKIP_WITHOUT_SENTENCEPIECE();
  const fs::path dir = tt::test::temp_dir("tok-long");
  const fs::path tmp = dir / "tmp";
  fs::create_directories(tmp);
  std::string blob;
  for (int i = 0; i < 20000; ++i) blob += "ab";
  std::string accents;
  for (int i = 0; i < 20000; ++i) accents += "\u00e9";
  const std::string text = english_like(3000, 5);
  write_text(dir / "long.txt", text + blob + "\n" + text);
  write_text(dir / "accents.txt", text + accents + "\n");
  tt::lm::TokenizerTraining t;
  t.vocab_size = 400;
  t.threads = 2;
  struct TmpDirSet {  // TMPDIR is the test's folder until the end of this block, however it ends
    const char* saved_ = std::getenv("TMPDIR");
    const std::string saved = saved_ ? saved_ : "";
    explicit TmpDirSet(const fs::path& p) { ::setenv("TMPDIR", p.c_str(), 1); }
    ~TmpDirSet() {
      if (saved_)
        ::setenv("TMPDIR", saved.c_str(), 1);
      else
        ::unsetenv("TMPDIR");
    }
  };
  const auto train = [&](const fs::path& input, const std::string& type) {
    t.inputs = {input.string()};
    t.model_type = type;
    t.out = (dir / (type + ".model")).string();
    return tt::lm::train_sentencepiece(t);
  };
  std::vector<std::string> bpe, accented, unigram;
  {
    const TmpDirSet set(tmp);
    bpe = train(dir / "long.txt", "bpe");
    accented = train(dir / "accents.txt", "bpe");
    unigram = train(dir / "long.txt", "unigram");
  }

  ASSERT_EQ(bpe.size(), 1u);
  const std::string line = std::to_string(std::count(text.begin(), text.end(), '\n') + 1);
  for (const std::string& part : {(dir / "long.txt").string() + " line " + line, std::string("40000 characters"),
                                 std::string("cut into lines of 16384")})
    EXPECT_NE(bpe[0].find(part), std::string::npos) << bpe[0] << "\nlacks: " << part;
  EXPECT_TRUE(accented.empty()) << accented[0];
  EXPECT_TRUE(unigram.empty()) << unigram[0];
  EXPECT_TRUE(fs::is_empty(tmp)) << "the cut copy was left in " << tmp;
  // The model trained on the cut copy encodes the uncut run and gives it back exactly.
  const auto tok = load_tokenizer((dir / "bpe.model").string());
  EXPECT_EQ(tok->decode(tok->encode(blob)), blob);
  fs::remove_all(dir);
}

TEST(TtDataTokenizer, TrainsAModelAndReportsIt) {
  TT_SKIP_WITHOUT_SENTENCEPIECE();
  const fs::path dir = tt::test::temp_dir("tok-cli");
  fs::create_directories(dir / "text");
  write_text(dir / "text" / "a.txt", english_like(1500, 5));
  write_text(dir / "text" / "b.txt", english_like(1500, 6));
  const fs::path model = dir / "out" / "tok.model";
  const auto r = run(tt_data_bin() + " tokenizer --input " + quote(dir / "text") + " --vocab-size 350 --threads 1 --out " +
                     quote(model));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("characters per token"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find((dir / "out" / "tok.vocab").string()), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "out" / "tok.vocab"));
  EXPECT_EQ(load_tokenizer(model.string())->vocab_size(), 350);
  fs::remove_all(dir);
}

// SentencePiece writes its files in place and does not check the writes: on a full disk it left
// a model cut short over the good one, saying "ok" or giving no reason. tt-data trains under a
// temporary name, reads both files back, and only then puts them in place.
TEST(TtDataTokenizer, AFileThatCannotBeWrittenWholeKeepsTheEarlierModel) {
  TT_SKIP_WITHOUT_SENTENCEPIECE();
  const fs::path dir = tt::test::temp_dir("tok-cli-full");
  write_text(dir / "a.txt", english_like(1500, 8));
  const fs::path model = dir / "out" / "tok.model";
  const std::string train = tt_data_bin() + " tokenizer --input " + quote(dir / "a.txt") + " --threads 1 --out " +
                            quote(model) + " --vocab-size ";
  const auto first = run(train + "350");
  ASSERT_EQ(first.rc, 0) << first.output;
  const std::string before = tt::test::read_file(model), vocab_before = tt::test::read_file(dir / "out" / "tok.vocab");
  // files limited to 2 KiB: a write past that fails (EFBIG), as one to a full disk does (ENOSPC)
  const auto r = run("bash -c \"ulimit -f 2; trap '' XFSZ; exec " + train + "320\"");
  EXPECT_EQ(r.rc, 6) << r.output;
  EXPECT_HAS(r.output, "tt-data tokenizer: error: cannot write " + model.string() +
                           ": SentencePiece trained the model but could not write it to " + (dir / "out").string() +
                           " whole (a full disk, or a file-size limit; ");
  EXPECT_HAS(r.output, "the earlier tok.model is kept");
  EXPECT_EQ(tt::test::read_file(model), before);
  EXPECT_EQ(tt::test::read_file(dir / "out" / "tok.vocab"), vocab_before);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir / "out")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"tok.model", "tok.vocab"}));  // no temporary left behind
  EXPECT_EQ(load_tokenizer(model.string())->vocab_size(), 350);
  fs::remove_all(dir);
}

TEST(TtDataTokenizer, BadArgumentsExitTwoWithAMessage) {
  const fs::path dir = tt::test::temp_dir("tok-cli-bad");
  write_text(dir / "a.txt", english_like(100, 7));
  auto r = run(tt_data_bin() + " tokenizer --input " + quote(dir / "a.txt") + " --vocab-size 300 --out " +
               quote(dir / "tok.bin"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--out must end in .model"), std::string::npos) << r.output;
  r = run(tt_data_bin() + " tokenizer --input " + quote(dir / "missing.txt") + " --vocab-size 300 --out " +
          quote(dir / "tok.model"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("missing.txt"), std::string::npos) << r.output;
  r = run(tt_data_bin() + " tokenizer --input " + quote(dir / "a.txt") + " --out " + quote(dir / "tok.model"));
  EXPECT_EQ(r.rc, 2) << r.output;  // no --vocab-size
  fs::remove_all(dir);
}
