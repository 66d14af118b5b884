// Tokenizers: bytes, and SentencePiece over Debian's libsentencepiece (0.1.97).
//
// SentencePiece models are trained for exact, cut-independent round trips:
//  - normalization_rule_name=identity, remove_extra_whitespaces=false: the text is not
//    rewritten (nmt_nfkc would change some characters and collapse runs of spaces);
//  - add_dummy_prefix=false: no space is invented before the first word, so
//    decode(encode(a) + encode(b)) == a + b, and a text tokenizes the same wherever the text
//    stream cuts it into chunks (it cuts at line breaks);
//  - byte_fallback: characters the model never saw (newlines included: training reads lines)
//    become their UTF-8 bytes, so nothing is <unk>.
// What does not round trip: U+2581 '▁' (SentencePiece's space marker, decoded as ' ') and
// invalid UTF-8 (decoded as U+FFFD).
//
// Nothing here links against libsentencepiece. It exports its own copy of protobuf (3.14), and
// LibTorch loads libprotobuf 3.21: linked normally, one copy's symbols replace the other's
// (a crash at start, or protobuf's version check aborting on first use). So the library is
// opened on first use with RTLD_LOCAL | RTLD_DEEPBIND, where it binds to its own protobuf and
// stays out of everyone else's way. Its classes come from its headers; virtual functions are
// called through its vtables; the few other functions are looked up by name (SentencePieceLib).
#include "tokenizer.h"
#include "text_stream.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include "tt/error.h"
#include "tt/fetch_hint.h"
#include "tt/log.h"
#include "tt/options.h"
#include "tt/runtime.h"
#include "tt/temp_dir.h"
#include "tt/text_file.h"

namespace fs = std::filesystem;
namespace sp = sentencepiece;

namespace tt::lm {

namespace {

const char* const kMakeOne =
    "make one with: tt-data tokenizer --input FILES --vocab-size N --out tok.model, or use tokenizer: bytes";

using TrainArgs = std::unordered_map<std::string, std::string>;

// The functions used that are neither virtual nor inline, as member functions are called in
// the Itanium C++ ABI (`this` first).
struct SentencePieceLib {
  void (*construct_processor)(sp::SentencePieceProcessor*);
  void (*destroy_status)(sp::util::Status*);
  const char* (*status_message)(const sp::util::Status*);
  sp::util::Status (*train)(const TrainArgs&, sp::SentenceIterator*, std::string*);
  int (*log_level)();
  void (*set_log_level)(int);
};

#if defined(__SANITIZE_ADDRESS__)
#define TT_LM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TT_LM_ASAN 1
#endif
#endif

const SentencePieceLib& sentencepiece() {
  static const SentencePieceLib lib = [] {
    const std::string why = sentencepiece_unavailable();
    TT_CHECK(why.empty(), why);
    // libsentencepiece.so.0 first, found through tt's run path where tools/setup.sh --deps put
    // it: the trainer library needs it, and the loader searches its dependencies without the
    // caller's run path, but takes one already loaded.
    const char* const base = "libsentencepiece.so.0";
    const char* const file = "libsentencepiece_train.so.0";
    void* handle = ::dlopen(base, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle) handle = ::dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    TT_CHECK(handle, "cannot load SentencePiece (", ::dlerror(),
             "): apt-get install libsentencepiece0 (Debian), or use tokenizer: bytes");
    const auto find = [&](const char* name) {
      void* p = ::dlsym(handle, name);
      TT_CHECK(p, "SentencePiece (", file, ") has no ", name, "; tt is built for libsentencepiece 0.1.97");
      return p;
    };
    SentencePieceLib l{};
    l.construct_processor = reinterpret_cast<decltype(l.construct_processor)>(
        find("_ZN13sentencepiece22SentencePieceProcessorC1Ev"));
    l.destroy_status = reinterpret_cast<decltype(l.destroy_status)>(find("_ZN13sentencepiece4util6StatusD1Ev"));
    l.status_message =
        reinterpret_cast<decltype(l.status_message)>(find("_ZNK13sentencepiece4util6Status13error_messageEv"));
    l.train = reinterpret_cast<decltype(l.train)>(
        find("_ZN13sentencepiece20SentencePieceTrainer5TrainERKSt13unordered_mapINSt7__cxx1112basic_stringIcSt11char_"
             "traitsIcESaIcEEES7_St4hashIS7_ESt8equal_toIS7_ESaISt4pairIKS7_S7_EEEPNS_16SentenceIteratorEPS7_"));
    l.log_level = reinterpret_cast<decltype(l.log_level)>(find("_ZN13sentencepiece7logging14GetMinLogLevelEv"));
    l.set_log_level = reinterpret_cast<decltype(l.set_log_level)>(find("_ZN13sentencepiece7logging14SetMinLogLevelEi"));
    return l;
  }();
  return lib;
}

// A util::Status that SentencePiece returned, built in place and destroyed by the library.
class Status {
 public:
  template <class Call>
  explicit Status(Call&& call) {
    new (&storage_) sp::util::Status(call());  // the returned prvalue is built right here
  }
  ~Status() { sentencepiece().destroy_status(get()); }
  Status(const Status&) = delete;
  Status& operator=(const Status&) = delete;

  bool ok() const { return get()->ok(); }
  // Its message without the "file.cc(line) [condition] " SentencePiece puts first.
  std::string message() const {
    const char* raw = sentencepiece().status_message(get());
    std::string m = raw ? raw : "";
    if (const auto cc = m.find(".cc("); cc != std::string::npos) {
      const auto end = m.find("] ", cc);
      m = end == std::string::npos ? "" : m.substr(end + 2);
    }
    while (!m.empty() && m.back() == ' ') m.pop_back();
    return m;
  }

 private:
  sp::util::Status* get() const {
    return std::launder(reinterpret_cast<sp::util::Status*>(const_cast<Storage*>(&storage_)));
  }
  using Storage = std::aligned_storage_t<sizeof(sp::util::Status), alignof(sp::util::Status)>;
  Storage storage_;
};

// The model type from a .model file, a serialized ModelProto (field 2: TrainerSpec; its field
// 3: the ModelType enum), read from the protobuf wire format: the .pb.h is not installed.
std::string model_type_of(const std::string& proto) {
  size_t at = 0;
  const auto varint = [&](size_t end) {
    uint64_t v = 0;
    for (int shift = 0; at < end && shift < 64; shift += 7) {
      const auto b = static_cast<uint8_t>(proto[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  // Moves `at` to the value of `field` within [at, end); false if absent or malformed.
  const auto find = [&](size_t end, uint64_t field, uint64_t wire_type) {
    while (at < end) {
      const uint64_t key = varint(end);
      if (key >> 3 == field && (key & 7) == wire_type) return true;
      switch (key & 7) {
        case 0: varint(end); break;
        case 1: at += 8; break;
        case 2: at += varint(end); break;
        case 5: at += 4; break;
        default: return false;
      }
    }
    return false;
  };
  if (!find(proto.size(), 2, 2)) return "unigram";  // absent: the proto's default
  const size_t spec_end = std::min(proto.size(), at + varint(proto.size()));
  if (!find(spec_end, 3, 0)) return "unigram";
  switch (varint(spec_end)) {
    case 2: return "bpe";
    case 3: return "word";
    case 4: return "char";
    default: return "unigram";
  }
}

std::string read_file(const std::string& path) {
  std::string bytes;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[1 << 16];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
    std::fclose(f);
  }
  return bytes;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    std::error_code ec;
    TT_CHECK_AS(ConfigError, fs::is_regular_file(path, ec), "tokenizer model ", describe_path(path), " not found; ", kMakeOne);
    const std::string proto = read_file(path);
    TT_CHECK_AS(ConfigError, !proto.empty(), "tokenizer model '", path, "' is empty; ", kMakeOne);
    if (const std::string why = sentencepiece_unavailable(); !why.empty())
      TT_FAIL_AS(ConfigError, "cannot load the tokenizer model '", path, "': ", why);
    auto& library = sentencepiece();  // throws where SentencePiece cannot be opened, before anything is allocated
    auto* processor = static_cast<sp::SentencePieceProcessor*>(::operator new(sizeof(sp::SentencePieceProcessor)));
    try {
      library.construct_processor(processor);
    } catch (...) {
      ::operator delete(processor);
      throw;
    }
    sp_.reset(processor);
    const Status status([&] { return sp_->Load(path); });
    if (!status.ok()) {
      const std::string why = status.message();
      TT_FAIL_AS(ConfigError, "cannot load the tokenizer model '", path, "': not a SentencePiece model (",
              why.empty() ? "it does not parse" : why, "); ", kMakeOne);
    }
    vocab_ = sp_->GetPieceSize();
    type_ = model_type_of(proto);
    identity_ = "sentencepiece (" + type_ + ", " + std::to_string(vocab_) + ") " + fnv1a_hex(proto);
  }

  int64_t vocab_size() const override { return vocab_; }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const Status status([&] { return sp_->Encode(text, &ids); });
    TT_CHECK(status.ok(), "SentencePiece (", path_, ") could not encode text: ", status.message());
    return {ids.begin(), ids.end()};
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    for (const int32_t id : ids)
      TT_CHECK(id >= 0 && id < vocab_, "token id ", id, " is outside the vocabulary of ", describe(), " (0..",
               vocab_ - 1, ")");
    std::string text;
    const std::vector<int> sp_ids(ids.begin(), ids.end());
    const Status status([&] { return sp_->Decode(sp_ids, &text); });
    TT_CHECK(status.ok(), "SentencePiece (", path_, ") could not decode: ", status.message());
    return text;
  }

  std::string describe() const override {
    return "sentencepiece " + path_ + " (" + type_ + ", " + std::to_string(vocab_) + ")";
  }
  std::string spec() const override { return path_; }
  std::string identity() const override { return identity_; }

 private:
  std::string path_, identity_;
  // Encode and Decode are const and thread-safe; deleting calls the library's virtual destructor.
  std::unique_ptr<sp::SentencePieceProcessor> sp_;
  int64_t vocab_ = 0;
  std::string type_;
};

// Restores SentencePiece's log level when training ends, however it ends.
struct QuietLog {
  int saved = sentencepiece().log_level();
  QuietLog() { sentencepiece().set_log_level(1); }  // warnings and errors; not every merge step
  ~QuietLog() { sentencepiece().set_log_level(saved); }
};

// SentencePiece's BPE trainer keeps a symbol's place in its word as an int shifted left by 16
// bits (bpe_model_trainer.h, EncodePos): at 32,768 characters or more the int overflows, the
// word's bookkeeping is corrupted and the trainer crashes (SIGSEGV). Words end at spaces (the
// identity normalization keeps tabs and the rest inside words), so a run that long without a
// space can only come from text that is no prose (a minified file, a base64 blob); such runs
// are cut into lines of kBpeCut characters, in a copy of the file that training reads instead.
constexpr int64_t kBpeLongestRun = 32767;
constexpr int64_t kBpeCut = 16384;

// Reads `path` in blocks, calling on_block(bytes, n) for each while it returns true.
template <class OnBlock>
void read_blocks(const std::string& path, OnBlock&& on_block) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  TT_CHECK_AS(ConfigError, in, "cannot read '", path, "': ", std::strerror(errno));
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(in, &std::fclose);
  std::vector<char> buf(size_t{1} << 20);
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), in)) > 0;)
    if (!on_block(buf.data(), n)) return;
  TT_CHECK_AS(ConfigError, !std::ferror(in), "cannot read '", path, "': ", std::strerror(errno));
}

// Tells where characters start in UTF-8 text, byte by byte: a continuation byte that no lead
// byte announced (text that is not UTF-8, Latin-1 say) counts as a character of its own, as
// SentencePiece reads it, so that a run is never counted shorter than it is.
struct CharacterStarts {
  int pending = 0;  // continuation bytes the last lead byte announced and not yet seen
  bool operator()(char c) {
    const auto b = static_cast<uint8_t>(c);
    if ((b & 0xC0) == 0x80 && pending > 0) return --pending, false;
    pending = b >= 0xF8 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
    return true;
  }
};

struct LongRun {
  int64_t line = 0;    // 1-based; 0: none
  int64_t length = 0;  // characters
};

// The first run of more than kBpeLongestRun characters without a space or a line break.
LongRun first_long_run(const std::string& path) {
  LongRun found;
  int64_t line = 1, run = 0;
  CharacterStarts starts;
  read_blocks(path, [&](const char* bytes, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char c = bytes[i];
      if (c == ' ' || c == '\n') {
        if (run > kBpeLongestRun) {
          found = {line, run};
          return false;
        }
        line += c == '\n';
        run = 0;
      } else {
        run += starts(c);
      }
    }
    return true;
  });
  if (found.line == 0 && run > kBpeLongestRun) found = {line, run};
  return found;
}

// Copies `from` to `to`, breaking each run of more than kBpeCut characters without a space or
// a line break into lines of kBpeCut characters (at character boundaries).
void copy_cutting_long_runs(const std::string& from, const std::string& to) {
  const auto cannot = [&] {
    TT_FAIL_AS(WriteError, "cannot write '", to, "', a copy of '", from, "' for the tokenizer's training: ",
               std::strerror(errno), " (set TMPDIR to a directory with room for it)");
  };
  std::FILE* out = std::fopen(to.c_str(), "wb");
  if (!out) cannot();
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(out, &std::fclose);
  std::vector<char> cut;
  int64_t run = 0;
  CharacterStarts starts;
  read_blocks(from, [&](const char* bytes, size_t n) {
    cut.clear();
    for (size_t i = 0; i < n; ++i) {
      const char c = bytes[i];
      if (c == ' ' || c == '\n') {
        run = 0;
      } else if (starts(c)) {
        if (run == kBpeCut) cut.push_back('\n'), run = 0;
        ++run;
      }
      cut.push_back(c);
    }
    if (std::fwrite(cut.data(), 1, cut.size(), out) != cut.size()) cannot();
    return true;
  });
  if (std::fflush(out) != 0) cannot();
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  std::transform(text.begin(), text.end(), ids.begin(), [](char c) { return static_cast<uint8_t>(c); });
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    TT_CHECK(ids[i] >= 0 && ids[i] < 256, "token id ", ids[i], " is not a byte (the bytes tokenizer has ids 0..255)");
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

std::string sentencepiece_unavailable() {
#ifdef TT_LM_ASAN
  return "SentencePiece cannot be opened in a build with AddressSanitizer (TT_SANITIZE): tt opens it with "
         "RTLD_DEEPBIND, which ASan refuses (google/sanitizers#611); use tokenizer: bytes, or a build "
         "without TT_SANITIZE";
#else
  return "";
#endif
}

std::shared_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_shared<ByteTokenizer>();
  TT_CHECK(!spec.empty(), "no tokenizer named: use tokenizer: bytes, or a SentencePiece .model path (", kMakeOne,
           ")");
  return std::make_shared<SentencePieceTokenizer>(spec);
}

std::vector<std::string> text_files(const std::vector<std::string>& inputs, const std::string& what) {
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    std::error_code ec;
    const auto st = fs::status(input, ec);
    TT_CHECK_AS(ConfigError, !ec && fs::exists(st), what, ": no such file or directory ", describe_path(input),
                fetch_hint(input));
    if (!fs::is_directory(st)) {
      TT_CHECK_AS(ConfigError, fs::is_regular_file(st), what, ": not a regular file or directory: ", input);
      files.push_back(input);
      continue;
    }
    // Links to files are read; links to directories are not followed (a link to a sibling would
    // read its text twice, one to an ancestor never end) and, with what is neither a file nor a
    // directory (a broken link), are said.
    std::vector<std::string> found, skipped;
    for (auto it = fs::recursive_directory_iterator(input, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      std::error_code kind;
      if (it->is_regular_file(kind)) found.push_back(it->path().string());
      else if (!it->is_directory(kind) || it->is_symlink(kind)) skipped.push_back(it->path().string());
    }
    TT_CHECK_AS(ConfigError, !ec, what, ": cannot list the directory ", input, ": ", ec.message());
    if (!skipped.empty()) {
      std::sort(skipped.begin(), skipped.end());
      std::error_code e;
      const char* first = !fs::exists(skipped[0], e) ? ", a link to nothing"
                          : fs::is_directory(skipped[0], e) ? ", a link to a directory, not followed: name it itself"
                                                            : "";
      log().warn("{}: {} entr{} under {} {} not a file and not read (the first: {}{})", what, skipped.size(),
                 skipped.size() == 1 ? "y" : "ies", input, skipped.size() == 1 ? "is" : "are", skipped[0], first);
    }
    TT_CHECK_AS(ConfigError, !found.empty(), what, ": no files in the directory ", input);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

void check_training(const TokenizerTraining& t) {
  const std::string ext = ".model";
  TT_CHECK_AS(ConfigError, t.out.size() > ext.size() && t.out.compare(t.out.size() - ext.size(), ext.size(), ext) == 0,
              "--out must end in .model (got '", t.out, "'); the .vocab is written beside it");
  TT_CHECK_AS(ConfigError, !t.inputs.empty(), "name the training text with --input FILES (files or directories)");
  TT_CHECK_AS(ConfigError,
              t.model_type == "bpe" || t.model_type == "unigram" || t.model_type == "char" || t.model_type == "word",
              "--model-type must be bpe, unigram, char or word, got '", t.model_type, "'");
  TT_CHECK_AS(ConfigError, t.vocab_size > 0, "--vocab-size must be positive, got ", t.vocab_size);
  TT_CHECK_AS(ConfigError, t.character_coverage > 0 && t.character_coverage <= 1,
              "--character-coverage must be in (0, 1], got ", t.character_coverage);
  TT_CHECK_AS(ConfigError, t.max_sentences >= 0, "--max-sentences must be 0 (all lines) or positive, got ",
              t.max_sentences);
  TT_CHECK_AS(ConfigError, t.threads >= 0, "--threads must be 0 (OMP_NUM_THREADS when set, else all cores) or positive, got ", t.threads);
}

std::vector<std::string> train_sentencepiece(const TokenizerTraining& t, std::vector<std::string> files) {
  check_training(t);

  if (files.empty()) files = text_files(t.inputs, "--input");
  uintmax_t bytes = 0;
  for (const auto& f : files) {
    TT_CHECK_AS(ConfigError, f.find(',') == std::string::npos, "SentencePiece cannot read '", f,
                "': it splits its input list at commas; rename the file");
    bytes += fs::file_size(f);
    // the whole file, as the text dataset reads it with its default chunk_bytes
    const std::string not_text = TextStream::not_text(f, int64_t{256} << 10);
    TT_CHECK_AS(ConfigError, not_text.empty(), f, " is not a text file (", not_text, "); give UTF-8 text files",
                files.size() > 1 ? " (every file under the directories given is read: move the others out)" : "");
  }
  TT_CHECK_AS(ConfigError, bytes > 0, "the training text is empty (", files.size(), " file",
              files.size() == 1 ? "" : "s", ")");

  const fs::path dir = fs::absolute(t.out).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  TT_CHECK_AS(ConfigError, fs::is_directory(dir) && ::access(dir.c_str(), W_OK) == 0, "cannot write '", t.out,
              "': the directory '", dir.string(), "' is not writable", ec ? " (" + ec.message() + ")" : "");

  // BPE reads a file holding a run too long for it through a copy with the run cut (see kBpeCut).
  std::vector<std::string> notes;
  std::optional<TempDir> copies;
  std::string input;  // SentencePiece's list: comma-separated
  for (const auto& f : files) {
    std::string read = f;
    if (t.model_type == "bpe") {
      if (const LongRun run = first_long_run(f); run.line > 0) {
        if (!copies) copies.emplace("tt-tokenizer", "tokenizer");
        read = (copies->path() / (std::to_string(notes.size()) + ".txt")).string();
        TT_CHECK_AS(ConfigError, read.find(',') == std::string::npos, "SentencePiece cannot read '", read,
                    "' (a copy of '", f, "' with its long runs cut): it splits its input list at commas; set TMPDIR "
                    "to a directory without one");
        copy_cutting_long_runs(f, read);
        notes.push_back(detail::cat(f, " line ", run.line, " holds ", run.length,
                            " characters without a space; SentencePiece's BPE trainer crashes on runs over ",
                            kBpeLongestRun, ", so training reads the file with every run over ", kBpeCut,
                            " characters cut into lines of ", kBpeCut));
      }
    }
    input += (input.empty() ? "" : ",") + read;
  }

  // SentencePiece writes PREFIX.model and PREFIX.vocab itself, in place. Trained under a
  // temporary prefix beside them and renamed over them once written, a failure (a full disk)
  // leaves the files of an earlier training as they were.
  const fs::path out = fs::absolute(t.out), vocab_out = fs::path(out).replace_extension(".vocab");
  const std::string prefix = (dir / (".tt-tokenizer-" + std::to_string(::getpid()) + "-" + out.stem().string())).string();
  const fs::path tmp_model = prefix + ".model", tmp_vocab = prefix + ".vocab";
  struct RemoveTemporaries {
    std::vector<fs::path> files;
    ~RemoveTemporaries() {
      std::error_code ignored;
      for (const auto& f : files) fs::remove(f, ignored);
    }
  } cleanup{{tmp_model, tmp_vocab}};

  const int threads = usable_threads(t.threads);
  const TrainArgs args = {
      {"input", input},
      {"model_prefix", prefix},
      {"vocab_size", std::to_string(t.vocab_size)},
      {"model_type", t.model_type},
      {"byte_fallback", t.byte_fallback ? "true" : "false"},
      {"character_coverage", std::to_string(t.character_coverage)},
      {"input_sentence_size", std::to_string(t.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      // exact round trips (see the top of this file)
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      // numbers digit by digit: a small vocabulary is not spent on them
      {"split_digits", "true"},
      // lines are sentences; the default (4192 bytes) would skip paragraph-per-line text
      {"max_sentence_length", std::to_string(1 << 20)},
  };
  const auto& lib = sentencepiece();
  std::string why;
  bool ok = false;
  {
    const QuietLog quiet;
    const Status status([&] { return lib.train(args, nullptr, nullptr); });
    ok = status.ok();
    if (!ok) why = status.message();
  }
  // SentencePiece does not check its writes: a full disk leaves a file cut short and may still
  // say "ok". Both files are read back first: the model loads, the vocabulary has a line a token.
  const auto written_whole = [&] {
    try {
      if (load_tokenizer(tmp_model.string())->vocab_size() != t.vocab_size) return false;
    } catch (const Error&) {
      return false;
    }
    std::ifstream vocab(tmp_vocab, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(vocab), std::istreambuf_iterator<char>()};
    return !text.empty() && text.back() == '\n' && std::count(text.begin(), text.end(), '\n') == t.vocab_size;
  };
  if (ok && written_whole()) {
    for (const auto& [from, to] : {std::pair{tmp_model, out}, std::pair{tmp_vocab, vocab_out}}) {
      fs::rename(from, to, ec);
      TT_CHECK_AS(WriteError, !ec, "cannot write ", to.string(), ": ", ec.message());
    }
    return notes;
  }
  if (ok || fs::exists(tmp_model, ec)) {  // trained, and its files could not be written whole
    struct statvfs fs_stat {};
    const std::string room = ::statvfs(dir.c_str(), &fs_stat) == 0
                                 ? format_bytes(static_cast<int64_t>(fs_stat.f_bavail * fs_stat.f_frsize)) + " free"
                                 : "its free space unknown";
    TT_FAIL_AS(WriteError, "cannot write ", t.out, ": SentencePiece trained the model but could not write it to ",
               dir.string(), " whole (a full disk, or a file-size limit; ", room, " there)", why.empty() ? "" : ": " + why,
               fs::exists(out, ec) ? "; the earlier " + out.filename().string() + " is kept" : "");
  }
  if (why.find("too high") != std::string::npos)
    TT_FAIL_AS(ConfigError, "SentencePiece: ", why, " The text is too small for this vocabulary: try a smaller ",
               "--vocab-size");
  if (why.find("smaller than required_chars") != std::string::npos)  // its advice names spm_train's flags
    TT_FAIL_AS(ConfigError, "SentencePiece: ", why.substr(0, why.find(" Increase")), " Try a larger --vocab-size ",
               "(byte fallback alone takes 259 ids) or a lower --character-coverage");
  // SentencePiece takes a line for a sentence and skips those longer than max_sentence_length
  const auto has_short_line = [&] {
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      for (std::string line; std::getline(in, line);)
        if (line.size() <= (size_t{1} << 20) && line.find_first_not_of(" \t\r") != std::string::npos) return true;
    }
    return false;
  };
  TT_CHECK_AS(ConfigError, !why.empty() || has_short_line(), "SentencePiece read no sentence: it takes each line for "
              "one and skips lines over 1 MiB, and every line of the input is longer (text without line breaks?): "
              "break it into lines, e.g. fold -s -w 2000 FILE > NEW.txt");
  TT_FAIL("SentencePiece training failed: ", why.empty() ? "no reason given" : why);
}

int64_t utf8_chars(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; });
}

}  // namespace tt::lm
