#include "text_stream.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <sys/stat.h>

#include "tt/error.h"
#include "tt/log.h"
#include "tt/report.h"
#include "tt/runtime.h"
#include "tt/text_file.h"

namespace tt::lm {

namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// "5.37M", "12.3k", "917".
std::string count_text(int64_t n) {
  char buf[32];
  const double v = static_cast<double>(n);
  if (n < 10000)
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  else if (n < 1000000)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else if (n < 1000000000)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  return buf;
}

std::string join_paths(const std::vector<std::string>& paths) {
  std::string out;
  for (size_t i = 0; i < paths.size(); ++i) out += (i ? ", " : "") + paths[i];
  return out;
}

// Length of the UTF-8 sequence a lead byte starts (1 for a stray byte).
int utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Little-endian fixed-width fields for position().
class ByteWriter {
 public:
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void bytes(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  // A token in `width` bytes (1, 2 or 4: the narrowest that holds the vocabulary).
  void token(int32_t t, int width) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < width; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void reserve(size_t n) { out_.reserve(n); }
  void raw(const char* s, size_t n) { out_.append(s, n); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& s) : s_(s) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == s_.size(); }
  uint64_t u64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  int32_t token(int width) {
    if (!need(static_cast<uint64_t>(width))) return 0;
    uint32_t v = 0;
    for (int i = 0; i < width; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(s_[pos_ + i])) << (8 * i);
    pos_ += static_cast<size_t>(width);
    return static_cast<int32_t>(v);
  }
  // A count of `unit`-byte items that must fit in what is left.
  uint64_t count(size_t unit) {
    const uint64_t n = u64();
    if (ok_ && unit > 0 && n > (s_.size() - pos_) / unit) ok_ = false;
    return ok_ ? n : 0;
  }
  std::string bytes() {
    const uint64_t n = count(1);
    if (!need(n)) return {};
    std::string out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  bool starts_with(const char* tag, size_t n) const { return pos_ == 0 && s_.compare(0, n, tag, n) == 0; }
  bool expect(const char* tag, size_t n) {
    if (!need(n) || s_.compare(pos_, n, tag, n) != 0) return ok_ = false;
    pos_ += n;
    return true;
  }

 private:
  bool need(uint64_t n) {
    if (!ok_ || n > s_.size() - pos_) ok_ = false;
    return ok_;
  }
  const std::string& s_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// The counting pass's figures, kept between runs: a planner's probes, a comparison's variants
// and every run of a pipeline count the same text again (seconds a pass on a few MiB with a
// SentencePiece model). One small file per text in $TT_CACHE_DIR/text-counts (TT_CACHE_DIR=off:
// none kept), else $XDG_CACHE_HOME/tt/text-counts, else ~/.cache/tt/text-counts (relative
// directories ignored, as the XDG spec says); named by the hash of what the count depends on,
// which the file also holds and must match: every file's real path (symlinks resolved), device,
// inode, size, and modification and change times (a change time no tool can set back), the
// tokenizer's identity (a SentencePiece model's by its file's hash), chunk_bytes, binary and
// kCountVersion: raised whenever the pass's figures or checks change (tokenizing, counting
// characters, what is refused as not text).
constexpr int kCountVersion = 1;
fs::path count_cache_dir() {
  auto absolute_dir = [](const char* v) { return v && *v == '/' ? fs::path(v) : fs::path(); };
  if (const char* d = std::getenv("TT_CACHE_DIR"); d && *d)
    return std::string(d) == "off" || absolute_dir(d).empty() ? fs::path() : fs::path(d) / "text-counts";
  if (const fs::path x = absolute_dir(std::getenv("XDG_CACHE_HOME")); !x.empty()) return x / "tt" / "text-counts";
  if (const fs::path h = absolute_dir(std::getenv("HOME")); !h.empty()) return h / ".cache" / "tt" / "text-counts";
  return {};
}
// The key's text; empty where a file cannot be looked at (nothing kept or read then).
std::string count_key(const std::vector<std::string>& files, const Tokenizer& tok, int64_t chunk_bytes, bool binary) {
  std::ostringstream k;
  k << "tt text count " << kCountVersion << "\ntokenizer " << tok.identity() << "\nchunk_bytes " << chunk_bytes
    << (binary ? " binary" : "") << '\n';
  for (const auto& f : files) {
    std::error_code ec;
    const fs::path real = fs::canonical(f, ec);
    struct stat st {};
    if (ec || ::stat(real.c_str(), &st) != 0) return {};
    k << real.string() << '\t' << st.st_dev << '\t' << st.st_ino << '\t' << st.st_size << '\t' << st.st_mtim.tv_sec
      << '.' << st.st_mtim.tv_nsec << '\t' << st.st_ctim.tv_sec << '.' << st.st_ctim.tv_nsec << '\n';
  }
  return k.str();
}
struct CachedCount {
  int64_t tokens = -1, chars = 0;
  double seconds = 0;  // what the counting pass took when it ran
};
CachedCount read_count(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  CachedCount c;
  std::string line, rest;
  if (!(in >> c.tokens >> c.chars >> c.seconds) || !std::getline(in, line)) return {};
  rest.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return rest == key && c.tokens >= 0 && c.chars >= 0 ? c : CachedCount{};
}

// Version 3 records the counted text's tokens and characters (a file replaced by another, its
// count and name alike, is told on resume); version 2 writes tokens in the narrowest width that
// holds the vocabulary (a byte for the bytes tokenizer); version 1 (4 bytes a token) is still
// read. Every prefetched batch carries its position, and the shuffle buffer is most of one.
constexpr char kTag[] = "tt-text-stream/3";
constexpr char kTagV2[] = "tt-text-stream/2";
constexpr char kTagV1[] = "tt-text-stream/1";
constexpr size_t kTagLen = sizeof(kTag) - 1;
static_assert(sizeof(kTagV1) == sizeof(kTag) && sizeof(kTagV2) == sizeof(kTag), "the versions' tags are read alike");
int token_width(int64_t vocab) { return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4; }

}  // namespace

TextStream::TextStream(TextStreamOptions o, std::shared_ptr<Tokenizer> tokenizer, std::string what)
    : o_(std::move(o)), tokenizer_(std::move(tokenizer)), what_(std::move(what)) {
  TT_CHECK(tokenizer_ != nullptr, what_, ": no tokenizer");
  if (o_.stride == 0) o_.stride = o_.seq_len;
  TT_CHECK_AS(ConfigError, !o_.paths.empty(), what_, ": give the text files or directories to read");

  files_ = text_files(o_.paths, what_);  // as tt-data tokenizer reads them
  int64_t total_bytes = 0;
  for (const auto& f : files_) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    TT_CHECK_AS(ConfigError, !ec, what_, ": cannot read ", f, ": ", ec.message());
    total_bytes += static_cast<int64_t>(size);
  }
  if (total_bytes == 0) {
    if (o_.paths.size() == 1 && files_.size() == 1)
      TT_FAIL_AS(ConfigError, what_, ": ", o_.paths[0], " is empty (0 bytes): no text to read");
    TT_FAIL_AS(ConfigError, what_, ": every file of ", join_paths(o_.paths), " is empty (", files_.size(),
               " files, 0 bytes): no text to read");
  }

  // The counting pass: the same chunks and tokenizer as the epochs, one chunk at a time; or its
  // figures from an earlier run's (count_cache_dir).
  const fs::path cache_dir = count_cache_dir();
  const std::string key = cache_dir.empty() ? std::string() : count_key(files_, *tokenizer_, o_.chunk_bytes, o_.binary);
  const fs::path cache_file = key.empty() ? fs::path() : cache_dir / (fnv1a_hex(key) + ".txt");
  const CachedCount cached = cache_file.empty() ? CachedCount{} : read_count(cache_file, key);
  if (cached.tokens >= 0) {
    tokens_ = cached.tokens;
    chars_ = cached.chars;
    for (const auto& f : files_)  // unreadable since it was counted: said now, as the pass would
      TT_CHECK_AS(ConfigError, std::ifstream(f, std::ios::binary).is_open(), what_, ": cannot open ", f);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Reader reader;
  Chunk c;
  for (size_t f = 0; f < files_.size() && cached.tokens < 0; ++f) {
    int64_t offset = 0;
    do {
      read_chunk(reader, files_, f, offset, o_.chunk_bytes, what_, c);
      const std::string not_text = o_.binary ? std::string() : not_text_reason(c.text, offset);
      TT_CHECK_AS(ConfigError, not_text.empty(), what_, ": ", files_[f], " is not a text file (", not_text,
                  "); give UTF-8 text files",
                  files_.size() > 1 ? " (every file under the directories given is read: move the others out)" : "",
                  ", or set binary: true to train on raw bytes deliberately");
      tokens_ += static_cast<int64_t>(tokenizer_->encode(c.text).size());
      chars_ += utf8_chars(c.text);
      offset = c.next_offset;
    } while (!c.last);
  }
  const int64_t need = o_.seq_len + 1;
  TT_CHECK_AS(ConfigError, tokens_ >= need, what_, ": ", join_paths(o_.paths), " has ", tokens_, " tokens (",
              tokenizer_->describe(), "); seq_len ", o_.seq_len, " needs at least ", need,
              " for one window: lower seq_len or give more text");
  windows_ = (tokens_ - need) / o_.stride + 1;
  if (o_.max_examples > 0) windows_ = std::min(windows_, o_.max_examples);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // kept only where no file changed while it was counted (the figures are those of the key's text)
  if (cached.tokens < 0 && !cache_file.empty() && count_key(files_, *tokenizer_, o_.chunk_bytes, o_.binary) == key) {
    try {  // a cache that cannot be written costs the next run a count, nothing more
      std::error_code ec;
      fs::create_directories(cache_dir, ec);
      write_file_atomic(cache_file, fmt::format("{} {} {:.3f}\n{}", tokens_, chars_, seconds, key));
    } catch (const std::exception& e) {
      log().debug("{}: the count was not kept in {}: {}", what_, cache_dir.string(), first_line(e.what()));
    }
  }
  if (cached.tokens >= 0 && cached.seconds > 1.0)
    log().info("{}: {} files, {} chars, {} tokens, {} windows of {} (counted before in {:.1f} s; kept in {})", what_,
               files_.size(), chars_, tokens_, windows_, o_.seq_len, cached.seconds, cache_file.string());
  else if (seconds > 1.0)
    log().info("{}: {} files, {} chars, {} tokens, {} windows of {} (counted in {:.1f} s)", what_, files_.size(),
               chars_, tokens_, windows_, o_.seq_len, seconds);
}

std::string TextStream::not_text(const std::string& path, int64_t chunk_bytes) {
  Reader reader;
  Chunk c;
  int64_t offset = 0;
  do {
    read_chunk(reader, {path}, 0, offset, chunk_bytes, path, c);
    if (std::string why = not_text_reason(c.text, offset); !why.empty()) return why;
    offset = c.next_offset;
  } while (!c.last);
  return "";
}

void TextStream::read_chunk(Reader& r, const std::vector<std::string>& files, size_t file, int64_t offset,
                            int64_t chunk_bytes, const std::string& what, Chunk& c) {
  const std::string& path = files[file];
  if (r.file != file) {
    r.in.close();
    r.in.clear();
    r.file = std::numeric_limits<size_t>::max();
    r.in.open(path, std::ios::binary);
    TT_CHECK(r.in.is_open(), what, ": cannot open ", path);
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    TT_CHECK(!ec, what, ": cannot read ", path, ": ", ec.message());
    r.size = static_cast<int64_t>(size);
    r.file = file;
  }
  const int64_t remaining = std::max<int64_t>(0, r.size - offset);
  c.last = remaining <= chunk_bytes;
  const int64_t want = c.last ? remaining : chunk_bytes;
  c.text.resize(static_cast<size_t>(want));
  int64_t got = 0;
  if (want > 0) {
    r.in.clear();
    r.in.seekg(offset);
    r.in.read(c.text.data(), want);
    got = static_cast<int64_t>(r.in.gcount());
  }
  if (got < want) {  // the file shrank since it was opened: what is there is its end
    c.text.resize(static_cast<size_t>(got));
    c.last = true;
  }
  if (!c.last) {
    // End at the last line break; a longer line is cut at chunk_bytes, before an incomplete
    // UTF-8 sequence.
    size_t cut = c.text.rfind('\n');
    if (cut != std::string::npos) {
      ++cut;
    } else {
      cut = c.text.size();
      size_t k = cut - 1;
      while (k > 0 && cut - k < 4 && (static_cast<unsigned char>(c.text[k]) & 0xC0) == 0x80) --k;
      if (k > 0 && k + static_cast<size_t>(utf8_length(static_cast<unsigned char>(c.text[k]))) > cut) cut = k;
    }
    c.text.resize(cut);
    c.next_offset = offset + static_cast<int64_t>(cut);
  } else {
    c.next_offset = offset + got;
    if (!c.text.empty() && c.text.back() != '\n') c.text.push_back('\n');
  }
}

bool TextStream::fill() {
  if (file_ >= files_.size()) return false;
  Chunk c;
  read_chunk(reader_, files_, file_, offset_, o_.chunk_bytes, what_, c);
  const auto ids = tokenizer_->encode(c.text);
  pending_.insert(pending_.end(), ids.begin(), ids.end());
  if (c.last) {
    ++file_;
    offset_ = 0;
  } else {
    offset_ = c.next_offset;
  }
  return true;
}

bool TextStream::next_window(std::vector<int32_t>& out) {
  const int64_t need = o_.seq_len + 1;
  while (static_cast<int64_t>(pending_.size()) - pending_begin_ < need) {
    if (file_ >= files_.size()) return false;
    // Drop what was consumed (at most a window is left to move) before reading more.
    const int64_t drop = std::min<int64_t>(pending_begin_, static_cast<int64_t>(pending_.size()));
    pending_.erase(pending_.begin(), pending_.begin() + drop);
    pending_begin_ -= drop;
    fill();
  }
  out.assign(pending_.begin() + pending_begin_, pending_.begin() + pending_begin_ + need);
  pending_begin_ += o_.stride;
  return true;
}

bool TextStream::next_example(std::vector<int32_t>& out) {
  if (o_.max_examples > 0 && emitted_ >= o_.max_examples) return false;
  const auto capacity = static_cast<size_t>(o_.shuffle_buffer);
  if (!exhausted_) {
    if (capacity == 0 && buffer_.empty()) {
      if (next_window(out)) {
        ++emitted_;
        return true;
      }
      exhausted_ = true;
    } else {
      while (buffer_.size() < capacity) {
        std::vector<int32_t> w;
        if (!next_window(w)) {
          exhausted_ = true;
          break;
        }
        buffer_.push_back(std::move(w));
      }
      if (!exhausted_) {
        std::vector<int32_t> w;
        if (next_window(w)) {
          std::uniform_int_distribution<size_t> pick(0, buffer_.size() - 1);
          const size_t j = pick(rng_);
          out = std::move(buffer_[j]);
          buffer_[j] = std::move(w);
          ++emitted_;
          return true;
        }
        exhausted_ = true;
      }
    }
  }
  // The stream is over: what is left in the buffer, in a random order.
  if (buffer_.empty()) return false;
  std::uniform_int_distribution<size_t> pick(0, buffer_.size() - 1);
  const size_t j = pick(rng_);
  out = std::move(buffer_[j]);
  if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
  buffer_.pop_back();
  ++emitted_;
  return true;
}

void TextStream::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  file_ = 0;
  offset_ = 0;
  pending_.clear();
  pending_.shrink_to_fit();
  pending_begin_ = 0;
  emitted_ = 0;
  exhausted_ = false;
  buffer_.clear();
  rng_.seed(splitmix64(o_.seed * 1000003ULL + static_cast<uint64_t>(epoch) + 1));
}

Batch TextStream::next(int64_t n) {
  TT_CHECK(n >= 1, what_, ": next() needs a positive number of examples, got ", n);
  if (epoch_ < 0) start_epoch(0);
  const int64_t width = o_.seq_len + 1;
  std::vector<int64_t> data;
  std::vector<int32_t> w;
  int64_t rows = 0;
  while (rows < n && next_example(w)) {
    data.insert(data.end(), w.begin(), w.end());
    ++rows;
  }
  Batch b;
  if (rows == 0) return b;
  auto all = torch::empty({rows, width}, torch::kLong);
  std::memcpy(all.data_ptr<int64_t>(), data.data(), data.size() * sizeof(int64_t));
  b.set("input", all.narrow(1, 0, o_.seq_len).contiguous());
  b.set("target", all.narrow(1, 1, o_.seq_len).contiguous());
  return b;
}

std::string TextStream::position() const {
  const int width = token_width(tokenizer_->vocab_size());
  const int64_t kept_from = std::min<int64_t>(pending_begin_, static_cast<int64_t>(pending_.size()));
  size_t tokens = pending_.size() - static_cast<size_t>(kept_from);
  for (const auto& win : buffer_) tokens += win.size();
  ByteWriter w;
  w.reserve(tokens * static_cast<size_t>(width) + buffer_.size() * 8 + (16 << 10));  // one allocation
  w.raw(kTag, kTagLen);
  w.u64(files_.size());
  w.i64(o_.seq_len);
  w.i64(tokenizer_->vocab_size());
  w.i64(tokens_);
  w.i64(chars_);
  w.i64(epoch_);
  w.u64(file_);
  w.i64(offset_);
  w.i64(pending_begin_ - kept_from);  // tokens still to skip (a stride longer than a window)
  w.u64(pending_.size() - static_cast<size_t>(kept_from));
  for (size_t i = static_cast<size_t>(kept_from); i < pending_.size(); ++i) w.token(pending_[i], width);
  w.i64(emitted_);
  w.u64(exhausted_ ? 1 : 0);
  w.u64(buffer_.size());
  for (const auto& win : buffer_) {
    w.u64(win.size());
    for (int32_t t : win) w.token(t, width);
  }
  std::ostringstream rng;
  rng << rng_;
  w.bytes(rng.str());
  return w.take();
}

void TextStream::position_mismatch(const std::string& what_differs) const {
  TT_FAIL_AS(ConfigError, what_, ": the checkpoint's data position does not match this dataset: ", what_differs,
             " (resume with the data the run trained on, as its pipeline.yaml names it, or start a new run)");
}

void TextStream::restore(const std::string& position) {
  ByteReader r(position);
  const bool v1 = r.starts_with(kTagV1, kTagLen), v2 = r.starts_with(kTagV2, kTagLen);
  if (!r.expect(v1 ? kTagV1 : v2 ? kTagV2 : kTag, kTagLen))
    position_mismatch("it is not a text stream position (" + std::to_string(position.size()) +
                      " bytes without the tag '" + kTag + "')");
  const auto truncated = [&] {
    position_mismatch("the position is truncated or corrupt (" + std::to_string(position.size()) + " bytes)");
  };
  const uint64_t n_files = r.u64();
  const int64_t seq_len = r.i64();
  const int64_t vocab = r.i64();
  const int64_t tokens = v1 || v2 ? tokens_ : r.i64(), chars = v1 || v2 ? chars_ : r.i64();
  if (!r.ok()) truncated();
  if (n_files != files_.size())
    position_mismatch("it was saved from " + std::to_string(n_files) + " files, this dataset has " +
                      std::to_string(files_.size()));
  if (seq_len != o_.seq_len)
    position_mismatch("it was saved with seq_len " + std::to_string(seq_len) + ", this dataset has seq_len " +
                      std::to_string(o_.seq_len));
  if (vocab != tokenizer_->vocab_size())
    position_mismatch("it was saved with a tokenizer of " + std::to_string(vocab) + " tokens, this one (" +
                      tokenizer_->describe() + ") has " + std::to_string(tokenizer_->vocab_size()));
  if (tokens != tokens_ || chars != chars_)
    position_mismatch("the text it was saved from had " + std::to_string(tokens) + " tokens in " +
                      std::to_string(chars) + " characters, " + join_paths(o_.paths) + " has " +
                      std::to_string(tokens_) + " in " + std::to_string(chars_) + " (a file was changed or replaced)");
  const auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab; };
  const int width = v1 ? 4 : token_width(vocab);

  const int64_t epoch = r.i64();
  const uint64_t file = r.u64();
  const int64_t offset = r.i64();
  const int64_t skip = r.i64();
  std::vector<int32_t> pending(r.count(static_cast<size_t>(width)));
  for (auto& t : pending) t = r.token(width);
  const int64_t emitted = r.i64();
  const uint64_t exhausted = r.u64();
  std::vector<std::vector<int32_t>> buffer(r.count(8));
  for (auto& win : buffer) {
    win.resize(r.count(static_cast<size_t>(width)));
    for (auto& t : win) t = r.token(width);
    if (!r.ok()) break;
    if (static_cast<int64_t>(win.size()) != seq_len + 1) truncated();
  }
  const std::string rng_text = r.bytes();
  if (!r.done()) truncated();
  if (epoch < -1 || file > files_.size() || offset < 0 || skip < 0 || emitted < 0 || exhausted > 1) truncated();
  for (int32_t t : pending)
    if (!in_vocab(t)) truncated();
  for (const auto& win : buffer)
    for (int32_t t : win)
      if (!in_vocab(t)) truncated();
  std::mt19937_64 rng;
  std::istringstream rs(rng_text);
  rs >> rng;
  if (rs.fail()) truncated();

  epoch_ = epoch;
  file_ = static_cast<size_t>(file);
  offset_ = offset;
  pending_ = std::move(pending);
  pending_begin_ = skip;
  emitted_ = emitted;
  exhausted_ = exhausted != 0;
  buffer_ = std::move(buffer);
  rng_ = rng;
  reader_.in.close();
  reader_.file = std::numeric_limits<size_t>::max();
}

std::map<std::string, int64_t> TextStream::info() const {
  return {{"vocab_size", tokenizer_->vocab_size()}, {"seq_len", o_.seq_len}, {"tokens", tokens_}};
}

std::string TextStream::describe() const {
  std::string s = "text: " + std::to_string(files_.size()) + (files_.size() == 1 ? " file, " : " files, ") +
                  count_text(chars_) + " chars, " + count_text(tokens_) + " tokens (" + tokenizer_->describe() +
                  "), " + std::to_string(windows_) + " windows of " + std::to_string(o_.seq_len);
  if (o_.stride != o_.seq_len) s += " every " + std::to_string(o_.stride) + " tokens";
  if (o_.shuffle_buffer > 0) s += ", shuffle buffer " + std::to_string(o_.shuffle_buffer);
  return s;
}

Schema text_schema() {
  Schema s;
  s.add("train", Type::List, "~", "text files or directories (their files, recursively, sorted by path) to train on")
      .add("validation", Type::List, "~", "text files or directories for validation (optional)")
      .add("tokenizer", Type::String, "bytes", "bytes, or a SentencePiece .model made with tt-data tokenizer")
      .field("seq_len", &TextStreamOptions::seq_len, 256, "tokens a window predicts (a window is seq_len + 1 tokens)")
      .range(ge(1))
      .field("stride", &TextStreamOptions::stride, 0, "tokens between window starts (0: seq_len, no overlap)")
      .range(ge(0))
      .field("shuffle_buffer", &TextStreamOptions::shuffle_buffer, 2048,
             "windows held to shuffle the stream (0: in order)")
      .range(ge(0))
      .field("max_examples", &TextStreamOptions::max_examples, 0, "training windows per epoch (0: all)").range(ge(0))
      .add("validation_max_examples", Type::Int, "0", "validation windows (0: all)").range(ge(0))
      .bytes_field("chunk_bytes", &TextStreamOptions::chunk_bytes, "256KiB",
                   "text read and tokenized at once (ends at a line break)")
      .range(ge(1))
      .field("binary", &TextStreamOptions::binary, false,
             "train on the files' raw bytes even where they are not text (NUL bytes, invalid UTF-8); "
             "tokenizer: bytes only");
  return s;
}

Datasets make_text(const Options& o, uint64_t seed) {
  o.check(o.is_set("train"), "train", "is not set: give the text files or directories to train on");
  auto t = o.to<TextStreamOptions>();
  t.paths = o.get_list("train");
  t.seed = seed;
  o.check(!t.paths.empty(), "train", "must name at least one text file or directory");

  o.check(!t.binary || o.get_string("tokenizer") == "bytes", "binary",
          "needs tokenizer: bytes (a SentencePiece model tokenizes text)");
  auto tokenizer = load_tokenizer(o.get_string("tokenizer"));
  Datasets out;
  out.train = std::make_shared<TextStream>(t, tokenizer, o.context() + ".train");
  if (o.is_set("validation")) {
    TextStreamOptions v = t;
    v.paths = o.get_list("validation");
    o.check(!v.paths.empty(), "validation", "must name at least one text file or directory, or be left out (or ~)");
    v.stride = v.seq_len;  // every token predicted once
    v.shuffle_buffer = 0;
    v.max_examples = o.get_int("validation_max_examples");
    out.validation = std::make_shared<TextStream>(v, tokenizer, o.context() + ".validation");
  }
  return out;
}

}  // namespace tt::lm
