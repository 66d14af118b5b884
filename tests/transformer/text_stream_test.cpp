// The streaming text dataset: windows and strides against a direct computation on the bytes,
// files and directories, the shuffle buffer, max_examples, position()/restore(), bad input,
// and the "text" dataset built from options.
#include "text_stream.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test_support.h"
#include "tokenizer.h"
#include "tt/error.h"
#include "tt/options.h"

namespace fs = std::filesystem;
using tt::lm::TextStream;
using tt::lm::TextStreamOptions;
using Window = std::vector<int64_t>;

namespace {

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << p;
}

// Deterministic text of `lines` lines of varying length, some with multi-byte UTF-8.
std::string sample_text(int lines, uint64_t seed) {
  std::mt19937_64 g(seed);
  static const std::vector<std::string> words = {"the", "quick", "brown", "fox", "jumps", "über", "lazy",
                                                 "dog", "naïve", "café", "a",     "x",    "—",    "日本"};
  std::string s;
  for (int i = 0; i < lines; ++i) {
    const int n = static_cast<int>(g() % 12);  // 0: an empty line
    for (int k = 0; k < n; ++k) s += (k ? " " : "") + words[g() % words.size()];
    s += '\n';
  }
  return s;
}

std::shared_ptr<tt::lm::Tokenizer> bytes() { return std::make_shared<tt::lm::ByteTokenizer>(); }

TextStreamOptions opts(std::vector<std::string> paths, int64_t seq_len, int64_t stride = 0, int64_t shuffle = 0,
                       int64_t max_examples = 0, int64_t chunk = 1 << 20, uint64_t seed = 7) {
  TextStreamOptions o{};
  o.paths = std::move(paths);
  o.seq_len = seq_len;
  o.stride = stride;
  o.shuffle_buffer = shuffle;
  o.max_examples = max_examples;
  o.chunk_bytes = chunk;
  o.binary = false;
  o.seed = seed;
  return o;
}

// The windows of a byte stream, computed directly.
std::vector<Window> direct_windows(const std::string& text, int64_t seq_len, int64_t stride) {
  if (stride == 0) stride = seq_len;
  std::vector<Window> out;
  const auto n = static_cast<int64_t>(text.size());
  for (int64_t s = 0; s + seq_len + 1 <= n; s += stride) {
    Window w;
    for (int64_t i = 0; i <= seq_len; ++i) w.push_back(static_cast<unsigned char>(text[static_cast<size_t>(s + i)]));
    out.push_back(w);
  }
  return out;
}

// One batch's windows (input + last target), checking shapes, dtype and the shift.
std::vector<Window> windows_of(const tt::Batch& b, int64_t seq_len) {
  std::vector<Window> out;
  const auto& in = b.at("input");
  const auto& tg = b.at("target");
  EXPECT_EQ(in.scalar_type(), torch::kLong);
  EXPECT_EQ(tg.scalar_type(), torch::kLong);
  EXPECT_EQ(in.sizes(), (std::vector<int64_t>{b.size, seq_len}));
  EXPECT_EQ(tg.sizes(), (std::vector<int64_t>{b.size, seq_len}));
  EXPECT_TRUE(torch::equal(in.narrow(1, 1, seq_len - 1), tg.narrow(1, 0, seq_len - 1)));
  auto ia = in.accessor<int64_t, 2>();
  auto ta = tg.accessor<int64_t, 2>();
  for (int64_t r = 0; r < b.size; ++r) {
    Window w;
    for (int64_t i = 0; i < seq_len; ++i) w.push_back(ia[r][i]);
    w.push_back(ta[r][seq_len - 1]);
    out.push_back(w);
  }
  return out;
}

// Reads batches of `batch` until the epoch ends; every batch but the last is full.
std::vector<Window> rest_of_epoch(TextStream& s, int64_t batch = 5) {
  std::vector<Window> out;
  bool short_seen = false;
  for (;;) {
    tt::Batch b = s.next(batch);
    if (b.size == 0) break;
    EXPECT_FALSE(short_seen) << "a short batch before the end of the epoch";
    EXPECT_LE(b.size, batch);
    if (b.size < batch) short_seen = true;
    auto w = windows_of(b, s.options().seq_len);
    out.insert(out.end(), w.begin(), w.end());
  }
  EXPECT_EQ(s.next(batch).size, 0) << "the epoch ended: next() stays empty until start_epoch";
  return out;
}

std::vector<Window> epoch(TextStream& s, int64_t e, int64_t batch = 5) {
  s.start_epoch(e);
  return rest_of_epoch(s, batch);
}

std::vector<Window> sorted(std::vector<Window> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST(TextStream, WindowsAndStridesMatchTheBytes) {
  const auto dir = tt::test::temp_dir("text-windows");
  const std::string text = sample_text(60, 1) + "no newline at the end";
  write_file(dir / "a.txt", text);
  const std::string stream = text + "\n";  // the separator after the file
  struct Case {
    int64_t seq_len, stride, chunk;
  };
  for (const Case c : {Case{8, 0, 1 << 20}, Case{8, 3, 1 << 20}, Case{8, 3, 37}, Case{8, 13, 50}, Case{5, 6, 1},
                       Case{5, 6, 16}, Case{1, 1, 64}, Case{16, 16, 7}}) {
    SCOPED_TRACE("seq_len " + std::to_string(c.seq_len) + " stride " + std::to_string(c.stride) + " chunk " +
                 std::to_string(c.chunk));
    TextStream s(opts({(dir / "a.txt").string()}, c.seq_len, c.stride, 0, 0, c.chunk), bytes(), "data.train");
    const auto expected = direct_windows(stream, c.seq_len, c.stride);
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(s.size(), static_cast<int64_t>(expected.size()));
    EXPECT_EQ(s.total_tokens(), static_cast<int64_t>(stream.size()));
    EXPECT_EQ(s.total_chars(), tt::lm::utf8_chars(stream));
    EXPECT_LT(s.total_chars(), s.total_tokens()) << "multi-byte characters are one char, several byte tokens";
    // next() before start_epoch starts epoch 0.
    const auto got = rest_of_epoch(s, 4);
    EXPECT_EQ(got, expected);
    // A second pass of the same epoch is the same; another batch size, the same windows.
    EXPECT_EQ(epoch(s, 0, 3), expected);
    EXPECT_EQ(epoch(s, 1, 1000), expected) << "no shuffle buffer: every epoch in order";
  }
}

TEST(TextStream, DirectoryFilesInSortedOrderWithSeparators) {
  const auto dir = tt::test::temp_dir("text-dir");
  // Written out of order; some end with a newline, some not; an empty file adds nothing.
  write_file(dir / "corpus" / "sub" / "c.txt", "third file, in sub/\nlast line");
  write_file(dir / "corpus" / "b.txt", "second file\n");
  write_file(dir / "corpus" / "a.txt", "first file: héllo");
  write_file(dir / "corpus" / "empty.txt", "");
  write_file(dir / "extra.txt", "given after the directory");
  const std::string stream =
      "first file: héllo\n"
      "second file\n"
      "third file, in sub/\nlast line\n"
      "given after the directory\n";
  TextStream s(opts({(dir / "corpus").string(), (dir / "extra.txt").string()}, 6, 4, 0, 0, 8), bytes(), "data.train");
  ASSERT_EQ(s.files().size(), 5u);
  EXPECT_EQ(fs::path(s.files()[0]).filename(), "a.txt");
  EXPECT_EQ(fs::path(s.files()[1]).filename(), "b.txt");
  EXPECT_EQ(fs::path(s.files()[2]).filename(), "empty.txt");
  EXPECT_EQ(fs::relative(s.files()[3], dir / "corpus"), fs::path("sub") / "c.txt");
  EXPECT_EQ(fs::path(s.files()[4]).filename(), "extra.txt");
  EXPECT_EQ(s.total_tokens(), static_cast<int64_t>(stream.size()));
  EXPECT_EQ(s.total_chars(), static_cast<int64_t>(stream.size()) - 1) << "é is two bytes, one character";
  EXPECT_EQ(epoch(s, 0), direct_windows(stream, 6, 4));

  // One window over the whole stream: it is exactly the concatenation with separators.
  const auto n = static_cast<int64_t>(stream.size());
  TextStream whole(opts({(dir / "corpus").string(), (dir / "extra.txt").string()}, n - 1), bytes(), "data.train");
  ASSERT_EQ(whole.size(), 1);
  const auto w = epoch(whole, 0);
  ASSERT_EQ(w.size(), 1u);
  std::string decoded;
  for (int64_t t : w[0]) decoded.push_back(static_cast<char>(t));
  EXPECT_EQ(decoded, stream);
}

TEST(TextStream, ChunkSizeDoesNotChangeTheStream) {
  const auto dir = tt::test::temp_dir("text-chunks");
  std::string line(300, 'y');  // a line longer than the chunks: cut at chunk_bytes
  line += "ü\n";
  write_file(dir / "d" / "1.txt", sample_text(40, 2) + line + sample_text(10, 3));
  write_file(dir / "d" / "2.txt", "ü" + sample_text(30, 4) + "日本");
  TextStream ref(opts({(dir / "d").string()}, 12, 5), bytes(), "data.train");
  const auto expected = epoch(ref, 0);
  for (int64_t chunk : {1, 2, 3, 5, 17, 64, 255, 4096}) {
    SCOPED_TRACE("chunk_bytes " + std::to_string(chunk));
    TextStream s(opts({(dir / "d").string()}, 12, 5, 0, 0, chunk), bytes(), "data.train");
    EXPECT_EQ(s.total_tokens(), ref.total_tokens());
    EXPECT_EQ(s.total_chars(), ref.total_chars());
    EXPECT_EQ(s.size(), ref.size());
    const auto got = epoch(s, 0, 7);
    EXPECT_EQ(static_cast<int64_t>(got.size()), s.size()) << "size() is the number of windows yielded";
    EXPECT_EQ(got, expected);
  }
}

TEST(TextStream, SizeIsTheNumberOfWindowsYielded) {
  const auto dir = tt::test::temp_dir("text-size");
  write_file(dir / "t.txt", sample_text(50, 5));
  for (int64_t seq_len : {1, 3, 8, 31}) {
    for (int64_t stride : {0, 1, 2, 7, 40}) {
      for (int64_t max : {0, 3, 100000}) {
        SCOPED_TRACE(std::to_string(seq_len) + " " + std::to_string(stride) + " " + std::to_string(max));
        TextStream s(opts({(dir / "t.txt").string()}, seq_len, stride, 4, max, 33), bytes(), "data.train");
        EXPECT_EQ(static_cast<int64_t>(epoch(s, 0, 6).size()), s.size());
        if (max > 0) {
          EXPECT_LE(s.size(), max);
        }
      }
    }
  }
}

TEST(TextStream, ShuffleBufferYieldsEveryWindowOncePerEpoch) {
  const auto dir = tt::test::temp_dir("text-shuffle");
  write_file(dir / "x" / "a.txt", sample_text(80, 6));
  write_file(dir / "x" / "b.txt", sample_text(80, 7));
  const std::vector<std::string> paths = {(dir / "x").string()};
  TextStream plain(opts(paths, 10, 7, 0, 0, 64), bytes(), "data.train");
  const auto in_order = epoch(plain, 0);
  ASSERT_GT(in_order.size(), 100u);

  // A buffer of one window does not reorder anything.
  TextStream one(opts(paths, 10, 7, 1, 0, 64), bytes(), "data.train");
  EXPECT_EQ(epoch(one, 0), in_order);
  for (int64_t buffer : {2, 16, 100000}) {
    SCOPED_TRACE("shuffle_buffer " + std::to_string(buffer));
    TextStream s(opts(paths, 10, 7, buffer, 0, 64, /*seed=*/11), bytes(), "data.train");
    EXPECT_EQ(s.size(), plain.size());
    const auto e0 = epoch(s, 0);
    const auto e1 = epoch(s, 1);
    EXPECT_EQ(sorted(e0), sorted(in_order)) << "every window exactly once";
    EXPECT_EQ(sorted(e1), sorted(in_order));
    EXPECT_NE(e0, in_order) << "shuffled";
    EXPECT_NE(e0, e1) << "each epoch its own order";
    // The same seed gives the same orders; another seed, another.
    TextStream same(opts(paths, 10, 7, buffer, 0, 64, 11), bytes(), "data.train");
    EXPECT_EQ(epoch(same, 1), e1);
    EXPECT_EQ(epoch(same, 0), e0);
    EXPECT_EQ(epoch(s, 0), e0) << "start_epoch rewinds";
    TextStream other(opts(paths, 10, 7, buffer, 0, 64, 12), bytes(), "data.train");
    EXPECT_NE(epoch(other, 0), e0);
  }
  // A small buffer shuffles locally: a window comes out at most ~buffer windows early.
  TextStream local(opts(paths, 10, 7, 4, 0, 64, 3), bytes(), "data.train");
  const auto e = epoch(local, 0);
  for (size_t i = 0; i < e.size(); ++i) {
    const auto at = static_cast<size_t>(std::find(in_order.begin(), in_order.end(), e[i]) - in_order.begin());
    EXPECT_LE(at, i + 4) << "window " << at << " of the stream cannot come out at " << i;
  }
}

TEST(TextStream, MaxExamplesEndsTheEpoch) {
  const auto dir = tt::test::temp_dir("text-max");
  write_file(dir / "t.txt", sample_text(60, 8));
  const std::vector<std::string> paths = {(dir / "t.txt").string()};
  TextStream plain(opts(paths, 6), bytes(), "data.train");
  const auto all = epoch(plain, 0);
  ASSERT_GT(all.size(), 20u);

  TextStream s(opts(paths, 6, 0, 0, 7), bytes(), "data.train");
  EXPECT_EQ(s.size(), 7);
  const auto first = epoch(s, 0, 3);
  EXPECT_EQ(first, std::vector<Window>(all.begin(), all.begin() + 7));
  EXPECT_EQ(epoch(s, 1, 3), first);

  TextStream shuffled(opts(paths, 6, 0, 5, 7), bytes(), "data.train");
  const auto some = epoch(shuffled, 0, 3);
  ASSERT_EQ(some.size(), 7u);
  const auto some_sorted = sorted(some), all_sorted = sorted(all);
  EXPECT_TRUE(std::includes(all_sorted.begin(), all_sorted.end(), some_sorted.begin(), some_sorted.end()))
      << "windows of the stream, none twice";
  // From the first buffer + max_examples windows of the stream only.
  for (const auto& w : some) EXPECT_LT(std::find(all.begin(), all.end(), w) - all.begin(), 5 + 7);
}

TEST(TextStream, RestoreContinuesExactly) {
  const auto dir = tt::test::temp_dir("text-restore");
  for (int i = 0; i < 4; ++i) write_file(dir / "c" / ("f" + std::to_string(i) + ".txt"), sample_text(12, 20 + i));
  write_file(dir / "c" / "z.txt", "no newline");
  const std::vector<std::string> paths = {(dir / "c").string()};
  for (const auto& [stride, buffer, max] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {5, 8, 0}, {0, 0, 0}, {20, 3, 0}, {5, 8, 30}, {3, 1000, 0}, {4, 1, 0}}) {
    SCOPED_TRACE("stride " + std::to_string(stride) + " buffer " + std::to_string(buffer) + " max " +
                 std::to_string(max));
    const auto o = opts(paths, 8, stride, buffer, max, /*chunk=*/50, /*seed=*/5);
    TextStream ref(o, bytes(), "data.train");
    const int64_t batch = 4;
    const int64_t per_epoch = (ref.size() + batch - 1) / batch;
    ASSERT_GT(per_epoch, 4);
    // Reference: epochs 0 and 1 as batches.
    std::vector<std::vector<Window>> batches;
    for (int64_t e = 0; e < 2; ++e) {
      ref.start_epoch(e);
      for (;;) {
        auto b = ref.next(batch);
        if (b.size == 0) break;
        batches.push_back(windows_of(b, 8));
      }
    }
    ASSERT_EQ(static_cast<int64_t>(batches.size()), 2 * per_epoch);

    // Stop after k batches (k = 0 .. the end of epoch 1), save, restore into a fresh stream.
    for (int64_t k = 0; k <= 2 * per_epoch; ++k) {
      SCOPED_TRACE("after " + std::to_string(k) + " batches");
      TextStream a(o, bytes(), "data.train");
      a.start_epoch(0);
      for (int64_t i = 0; i < k; ++i) {
        if (i == per_epoch) {
          ASSERT_EQ(a.next(batch).size, 0);
          a.start_epoch(1);
        }
        ASSERT_EQ(windows_of(a.next(batch), 8), batches[static_cast<size_t>(i)]);
      }
      const std::string pos = a.position();
      TextStream b(o, bytes(), "data.train");
      b.restore(pos);
      EXPECT_EQ(b.position(), pos) << "the restored state is the saved state";
      for (int64_t i = k; i < 2 * per_epoch; ++i) {
        if (i == per_epoch) {
          ASSERT_EQ(b.next(batch).size, 0) << "epoch 0 ends where it did";
          ASSERT_EQ(a.next(batch).size, 0);
          b.start_epoch(1);
          a.start_epoch(1);
        }
        const auto want = batches[static_cast<size_t>(i)];
        ASSERT_EQ(windows_of(b.next(batch), 8), want) << "batch " << i;
        ASSERT_EQ(windows_of(a.next(batch), 8), want) << "batch " << i << " (the original goes on)";
      }
      EXPECT_EQ(b.next(batch).size, 0);
    }
  }
}

// The position as version 2 wrote it: version 3's without the text's token and character counts
// (the two fields after the tag and 3 others).
std::string as_version2(const std::string& v3) {
  EXPECT_EQ(v3.compare(0, 16, "tt-text-stream/3"), 0);
  return "tt-text-stream/2" + v3.substr(16, 3 * 8) + v3.substr(16 + 5 * 8);
}

// The position as version 1 wrote it: every token in 4 bytes (version 2 uses 1 with the bytes
// tokenizer). Its layout: tag, 7 fixed fields, pending tokens, 2 fields, the shuffle buffer's
// windows, the generator's state.
std::string as_version1(const std::string& v2) {
  size_t p = 16;
  std::string out = "tt-text-stream/1";
  const auto copy = [&](size_t n) {
    out.append(v2, p, n);
    p += n;
  };
  const auto count = [&] {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(v2[p + i])) << (8 * i);
    copy(8);
    return v;
  };
  const auto widen = [&](uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      out.push_back(v2[p++]);
      out.append(3, '\0');
    }
  };
  copy(7 * 8);
  widen(count());
  copy(2 * 8);
  for (uint64_t w = count(); w > 0; --w) widen(count());
  out.append(v2, p, std::string::npos);
  return out;
}

TEST(TextStream, PositionsTakeAByteATokenWithTheBytesTokenizerAndVersions1And2AreStillRead) {
  const auto dir = tt::test::temp_dir("text-restore-v1");
  write_file(dir / "t.txt", sample_text(60, 12));
  const auto o = opts({(dir / "t.txt").string()}, 8, 0, 6, 0, 40);
  TextStream a(o, bytes(), "data.train");
  a.start_epoch(0);
  a.next(3);
  const std::string pos = a.position();
  ASSERT_EQ(pos.compare(0, 16, "tt-text-stream/3"), 0);
  const std::string v2 = as_version2(pos), v1 = as_version1(v2);
  // 6 windows of 9 tokens in the shuffle buffer alone: 3 bytes saved on each token.
  EXPECT_GE(v1.size() - v2.size(), 3u * 6 * 9);
  TextStream c(o, bytes(), "data.train");
  c.restore(v2);
  EXPECT_EQ(c.position(), pos) << "version 2 restores the same state";
  TextStream b(o, bytes(), "data.train");
  b.restore(v1);
  EXPECT_EQ(b.position(), pos) << "version 1 restores the same state";
  const auto rest = rest_of_epoch(a);
  EXPECT_EQ(rest_of_epoch(b), rest);
  EXPECT_EQ(rest_of_epoch(c), rest);
}

TEST(TextStream, RestoreBeforeAnyEpochAndAtTheEnd) {
  const auto dir = tt::test::temp_dir("text-restore-edges");
  write_file(dir / "t.txt", sample_text(40, 9));
  const auto o = opts({(dir / "t.txt").string()}, 8, 0, 6, 0, 40);
  TextStream fresh(o, bytes(), "data.train");
  TextStream ref(o, bytes(), "data.train");
  const auto e0 = epoch(ref, 0);
  // Saved before start_epoch: next() on the restored stream starts epoch 0.
  TextStream b(o, bytes(), "data.train");
  b.restore(fresh.position());
  EXPECT_EQ(rest_of_epoch(b), e0);
  // Saved at the end of an epoch: the restored stream is at the end too.
  const std::string end = ref.position();
  TextStream c(o, bytes(), "data.train");
  c.restore(end);
  EXPECT_EQ(c.next(4).size, 0);
  EXPECT_EQ(epoch(c, 1), epoch(ref, 1));
}

TEST(TextStream, RestoreRejectsBadOrMismatchedPositions) {
  const auto dir = tt::test::temp_dir("text-restore-bad");
  write_file(dir / "d" / "a.txt", sample_text(40, 10));
  write_file(dir / "d" / "b.txt", sample_text(40, 11));
  const std::vector<std::string> paths = {(dir / "d").string()};
  TextStream a(opts(paths, 8, 0, 4, 0, 64), bytes(), "data.train");
  a.start_epoch(0);
  a.next(5);
  const std::string pos = a.position();
  const auto after = rest_of_epoch(a);

  TextStream s(opts(paths, 8, 0, 4, 0, 64), bytes(), "data.train");
  for (const std::string& bad : {std::string(), std::string("garbage"), pos.substr(0, pos.size() / 2),
                                 pos.substr(0, pos.size() - 1), pos + "x", std::string(pos.size(), '\0')}) {
    const auto msg = tt::test::message_of<tt::Error>([&] { s.restore(bad); }, "a tt::Error");
    EXPECT_NE(msg.find("data.train"), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not match this dataset"), std::string::npos) << msg;
  }
  // A position from the start of an epoch restores to the whole epoch.
  TextStream ref(opts(paths, 8, 0, 4, 0, 64), bytes(), "data.train");
  ref.start_epoch(3);
  EXPECT_NO_THROW(s.restore(ref.position()));
  EXPECT_EQ(rest_of_epoch(s), epoch(ref, 3));

  // Another seq_len: refused, naming both.
  TextStream other(opts(paths, 9, 0, 4, 0, 64), bytes(), "data.train");
  auto msg = tt::test::message_of<tt::Error>([&] { other.restore(pos); }, "a tt::Error");
  EXPECT_NE(msg.find("does not match this dataset"), std::string::npos) << msg;
  EXPECT_NE(msg.find("seq_len 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("seq_len 9"), std::string::npos) << msg;
  // Another number of files: refused, naming both counts.
  TextStream one(opts({(dir / "d" / "a.txt").string()}, 8, 0, 4, 0, 64), bytes(), "data.train");
  msg = tt::test::message_of<tt::Error>([&] { one.restore(pos); }, "a tt::Error");
  EXPECT_NE(msg.find("2 files"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has 1"), std::string::npos) << msg;
  // The same files, one of them replaced by other text: refused, naming the counts (version 2's
  // positions record no counts and cannot tell).
  write_file(dir / "e" / "a.txt", sample_text(40, 10));
  const std::vector<std::string> e = {(dir / "e" / "a.txt").string()};
  TextStream before(opts(e, 8, 0, 4, 0, 64), bytes(), "data.train");
  before.start_epoch(0);
  before.next(2);
  const std::string saved = before.position();
  write_file(dir / "e" / "a.txt", sample_text(40, 12));
  TextStream replaced(opts(e, 8, 0, 4, 0, 64), bytes(), "data.train");
  msg = tt::test::message_of<tt::ConfigError>([&] { replaced.restore(saved); }, "a tt::ConfigError");
  EXPECT_NE(msg.find("does not match this dataset"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the text it was saved from had " + std::to_string(before.total_tokens()) + " tokens"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("has " + std::to_string(replaced.total_tokens())), std::string::npos) << msg;
  EXPECT_NE(msg.find("changed or replaced"), std::string::npos) << msg;
  EXPECT_NE(before.total_tokens(), replaced.total_tokens());
  EXPECT_NO_THROW(replaced.restore(as_version2(saved)));

  // A failed restore leaves the stream as it was; a good one still works afterwards.
  s.restore(pos);
  EXPECT_THROW(s.restore("garbage"), tt::Error);
  EXPECT_EQ(rest_of_epoch(s), after);
}

TEST(TextStream, BadInputsAreConfigErrorsNamingThePath) {
  const auto dir = tt::test::temp_dir("text-bad");
  const auto missing = (dir / "missing.txt").string();
  auto msg = tt::test::config_error([&] { TextStream(opts({missing}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.train"), std::string::npos) << msg;
  // a relative path: where it was looked for
  msg = tt::test::config_error([&] { TextStream(opts({"no-such-dir/t.txt"}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find("data.train: no such file or directory 'no-such-dir/t.txt' (relative to the current directory " +
                     fs::current_path().string() + ")"),
            std::string::npos)
      << msg;

  write_file(dir / "empty.txt", "");
  const auto empty = (dir / "empty.txt").string();
  msg = tt::test::config_error([&] { TextStream(opts({empty}, 8), bytes(), "data.validation"); });
  EXPECT_NE(msg.find(empty), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.validation"), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;

  fs::create_directories(dir / "nothing" / "sub");
  const auto nothing = (dir / "nothing").string();
  msg = tt::test::config_error([&] { TextStream(opts({nothing}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find(nothing), std::string::npos) << msg;
  EXPECT_NE(msg.find("no files"), std::string::npos) << msg;

  write_file(dir / "zeros" / "a.txt", "");
  write_file(dir / "zeros" / "b.txt", "");
  const auto zeros = (dir / "zeros").string();
  msg = tt::test::config_error([&] { TextStream(opts({zeros}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find(zeros), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;

  write_file(dir / "short.txt", "hello");  // 6 tokens with the separator
  const auto short_file = (dir / "short.txt").string();
  msg = tt::test::config_error([&] { TextStream(opts({short_file}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find(short_file), std::string::npos) << msg;
  EXPECT_NE(msg.find("6 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("seq_len 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at least 9"), std::string::npos) << msg;
  // Exactly one window fits.
  TextStream five(opts({short_file}, 5), bytes(), "data.train");
  EXPECT_EQ(five.size(), 1);
  EXPECT_EQ(epoch(five, 0), direct_windows("hello\n", 5, 5));
}

// A binary file given as text is refused before training, with the bytes tokenizer and a
// SentencePiece one alike (the check reads the bytes, not the tokens).
TEST(TextStream, ABinaryOrNonUtf8FileIsRefusedNamingItAndWhy) {
  const auto dir = tt::test::temp_dir("text-binary");
  std::string png = "\x89PNG\r\n\x1a\n";
  png += std::string("\0\0\0\rIHDR", 8);
  for (int i = 0; i < 4000; ++i) png += static_cast<char>((i * 73 + 11) % 256);
  write_file(dir / "image.png", png);
  const auto image = (dir / "image.png").string();
  auto msg = tt::test::config_error([&] { TextStream(opts({image}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find("data.train: " + image + " is not a text file (a NUL byte at offset 8); give UTF-8 text files"),
            std::string::npos) << msg;
  // Latin-1 text without a NUL: most bytes valid, but far more than a stray letter invalid
  std::string latin1;
  for (int i = 0; i < 200; ++i) latin1 += "Gr\xfc\xdf" "e aus K\xf6ln, sch\xf6ne Gr\xfc\xdf" "e.\n";
  write_file(dir / "latin1.txt", latin1);
  msg = tt::test::config_error([&] { TextStream(opts({(dir / "latin1.txt").string()}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find("latin1.txt is not a text file ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("bytes are not valid UTF-8"), std::string::npos) << msg;
  // in a directory, the message says every file is read
  write_file(dir / "corpus" / "a.txt", "some honest text\n");
  write_file(dir / "corpus" / "b.bin", png);
  msg = tt::test::config_error([&] { TextStream(opts({(dir / "corpus").string()}, 8), bytes(), "data.train"); });
  EXPECT_NE(msg.find("b.bin is not a text file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("move the others out"), std::string::npos) << msg;
  // UTF-8 text with a stray invalid byte still reads
  std::string mostly = "caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 ";
  for (int i = 0; i < 60; ++i) mostly += "plain words make up most of this file. ";
  mostly += "\xff\n";
  write_file(dir / "mostly.txt", mostly);
  EXPECT_GT(TextStream(opts({(dir / "mostly.txt").string()}, 8), bytes(), "data.train").size(), 0);
  // Deliberately binary: the check is off and every byte is a token.
  TextStreamOptions raw = opts({image}, 8);
  raw.binary = true;
  TextStream binary(raw, bytes(), "data.train");
  // Every byte is a token, and the stream ends the file's last line with the newline it lacks:
  // png.size() + 1 tokens, in windows of 9 every 8.
  EXPECT_EQ(binary.size(), (static_cast<int64_t>(png.size()) + 1 - 9) / 8 + 1);
}

TEST(TextStream, InfoAndDescribe) {
  const auto dir = tt::test::temp_dir("text-info");
  write_file(dir / "a.txt", std::string(1000, 'a') + "\n");
  write_file(dir / "b.txt", "日本\n");
  TextStream s(opts({(dir / "a.txt").string(), (dir / "b.txt").string()}, 16), bytes(), "data.train");
  const auto info = s.info();
  EXPECT_EQ(info.at("vocab_size"), 256);
  EXPECT_EQ(info.at("seq_len"), 16);
  EXPECT_EQ(info.at("tokens"), 1001 + 7);
  EXPECT_EQ(s.total_chars(), 1001 + 3);
  EXPECT_EQ(s.size(), (1008 - 17) / 16 + 1);
  const auto d = s.describe();
  EXPECT_NE(d.find("2 files"), std::string::npos) << d;
  EXPECT_NE(d.find("bytes (256)"), std::string::npos) << d;
  EXPECT_NE(d.find(std::to_string(s.size()) + " windows of 16"), std::string::npos) << d;
}

TEST(TextStream, MakeTextFromOptions) {
  const auto dir = tt::test::temp_dir("text-make");
  write_file(dir / "train" / "a.txt", sample_text(80, 12));
  write_file(dir / "valid.txt", sample_text(40, 13));
  const auto parse = [](const std::string& yaml) {
    return tt::Options::parse(YAML::Load(yaml), tt::lm::text_schema(), "data", "test.yaml", {"name"});
  };
  // train is required.
  auto msg = tt::test::config_error([&] { tt::lm::make_text(parse("seq_len: 8"), 1); });
  EXPECT_NE(msg.find("data.train is not set: give the text files or directories to train on"), std::string::npos)
      << msg;
  // Range checks: the schema refuses the value, naming the option, the range and the value.
  msg = tt::test::config_error([&] { parse("train: [" + (dir / "train").string() + "]\nseq_len: 0"); });
  EXPECT_NE(msg.find("data.seq_len must be >= 1, got 0"), std::string::npos) << msg;
  msg = tt::test::config_error([&] { parse("train: [" + (dir / "train").string() + "]\nstride: -1"); });
  EXPECT_NE(msg.find("data.stride must be >= 0, got -1"), std::string::npos) << msg;
  msg = tt::test::config_error([&] { parse("train: [" + (dir / "train").string() + "]\nshuffle_buffer: -2"); });
  EXPECT_NE(msg.find("data.shuffle_buffer must be >= 0, got -2"), std::string::npos) << msg;
  msg = tt::test::config_error([&] { parse("train: [" + (dir / "train").string() + "]\nchunk_bytes: 0"); });
  EXPECT_NE(msg.find("data.chunk_bytes must be >= 1, got 0"), std::string::npos) << msg;
  // Defaults come from the schema alone (shuffle_buffer 2048 is what pipelines have always got).
  const auto d0 = tt::Options::defaults(tt::lm::text_schema(), "data").to<TextStreamOptions>();
  EXPECT_EQ(d0.seq_len, 256);
  EXPECT_EQ(d0.stride, 0);
  EXPECT_EQ(d0.shuffle_buffer, 2048);
  EXPECT_EQ(d0.max_examples, 0);
  EXPECT_EQ(d0.chunk_bytes, 256 << 10);

  const auto o = parse("train: [" + (dir / "train").string() + "]\nvalidation: [" + (dir / "valid.txt").string() +
                       "]\nseq_len: 8\nstride: 3\nshuffle_buffer: 5\nvalidation_max_examples: 4\nchunk_bytes: 100");
  auto d = tt::lm::make_text(o, 42);
  auto train = std::dynamic_pointer_cast<TextStream>(d.train);
  auto valid = std::dynamic_pointer_cast<TextStream>(d.validation);
  ASSERT_TRUE(train && valid);
  EXPECT_EQ(train->options().seq_len, 8);
  EXPECT_EQ(train->options().stride, 3);
  EXPECT_EQ(train->options().shuffle_buffer, 5);
  EXPECT_EQ(train->options().chunk_bytes, 100);
  EXPECT_EQ(train->options().seed, 42u);
  EXPECT_EQ(valid->options().stride, 8) << "validation: every token predicted once";
  EXPECT_EQ(valid->options().shuffle_buffer, 0);
  EXPECT_EQ(valid->size(), 4);
  EXPECT_EQ(train->tokenizer_ptr(), valid->tokenizer_ptr()) << "one tokenizer for both";
  EXPECT_EQ(train->tokenizer().spec(), "bytes");
  // Validation windows are the file's first windows, in order.
  std::ifstream in(dir / "valid.txt", std::ios::binary);
  const std::string vtext((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto expected = direct_windows(vtext, 8, 8);
  expected.resize(4);
  EXPECT_EQ(epoch(*valid, 0), expected);
  // Without validation: none; a missing validation path names it.
  EXPECT_EQ(tt::lm::make_text(parse("train: [" + (dir / "train").string() + "]\nseq_len: 8"), 1).validation,
            nullptr);
  msg = tt::test::config_error([&] {
    tt::lm::make_text(parse("train: [" + (dir / "train").string() + "]\nvalidation: [" + (dir / "nope").string() +
                            "]\nseq_len: 8"),
                      1);
  });
  EXPECT_NE(msg.find("data.validation"), std::string::npos) << msg;
  EXPECT_NE(msg.find((dir / "nope").string()), std::string::npos) << msg;
}

// The counting pass's figures are kept between runs (a planner's probes and a comparison's
// variants counted the same text each): in TT_CACHE_DIR/text-counts, keyed by the files' paths,
// sizes and modification times, the tokenizer and chunk_bytes. A second stream over the same text
// takes them (shown here by figures edited in the kept file); a changed text, another chunk size,
// a kept file whose key is not this text's, or TT_CACHE_DIR=off count again.
TEST(TextStream, TheCountIsKeptBetweenRunsUntilTheTextChanges) {
  const auto dir = tt::test::temp_dir("text-count-cache");
  const auto kept = dir / "cache" / "text-counts";
  struct Env {  // TT_CACHE_DIR for this test, restored after it
    std::string before;
    bool had;
    explicit Env(const std::string& value) : had(std::getenv("TT_CACHE_DIR") != nullptr) {
      if (had) before = std::getenv("TT_CACHE_DIR");
      ::setenv("TT_CACHE_DIR", value.c_str(), 1);
    }
    ~Env() { had ? ::setenv("TT_CACHE_DIR", before.c_str(), 1) : ::unsetenv("TT_CACHE_DIR"); }
  } env((dir / "cache").string());
  const std::string a = (dir / "a.txt").string();
  std::ofstream(a) << sample_text(200, 1);
  const auto files = [&] {
    std::vector<fs::path> out;
    if (fs::exists(kept))
      for (const auto& e : fs::directory_iterator(kept)) out.push_back(e.path());
    return out;
  };
  TextStream first(opts({a}, 8), bytes(), "data.train");
  const int64_t tokens = first.total_tokens(), chars = first.total_chars();
  ASSERT_EQ(tokens, static_cast<int64_t>(fs::file_size(a)));  // bytes: a token each
  ASSERT_EQ(files().size(), 1u);
  const fs::path file = files()[0];
  std::string text = tt::test::read_file(file);
  EXPECT_EQ(text.rfind(std::to_string(tokens) + " " + std::to_string(chars) + " ", 0), 0u) << text;
  EXPECT_NE(text.find(fs::canonical(a).string()), std::string::npos) << text;

  // read by the next stream: the figures edited by hand are what it reports
  const std::string key = text.substr(text.find('\n') + 1);
  std::ofstream(file) << tokens + 80 << ' ' << chars + 80 << " 2.5\n" << key;
  TextStream second(opts({a}, 8), bytes(), "data.train");
  EXPECT_EQ(second.total_tokens(), tokens + 80);
  EXPECT_EQ(second.total_chars(), chars + 80);
  EXPECT_EQ(second.size(), (tokens + 80 - 9) / 8 + 1);

  // a kept file whose key is another text's is not taken (counted again, and kept anew)
  std::ofstream(file) << tokens + 80 << ' ' << chars + 80 << " 2.5\n" << key << "other\n";
  EXPECT_EQ(TextStream(opts({a}, 8), bytes(), "data.train").total_tokens(), tokens);
  EXPECT_EQ(tt::test::read_file(file).substr(0, std::to_string(tokens).size() + 1), std::to_string(tokens) + " ");

  // another chunk size: a count of its own
  EXPECT_EQ(TextStream(opts({a}, 8, 0, 0, 0, 64), bytes(), "data.train").total_tokens(), tokens);
  EXPECT_EQ(files().size(), 2u);

  // the text changed (and its size): counted again
  std::ofstream(a, std::ios::app) << "more text\n";
  EXPECT_EQ(TextStream(opts({a}, 8), bytes(), "data.train").total_tokens(), tokens + 10);
  EXPECT_EQ(files().size(), 3u);

  // through a symlink re-pointed at another file of the same size: that file's own count
  const std::string b = (dir / "b.txt").string(), link = (dir / "link.txt").string();
  std::string other = tt::test::read_file(a);
  std::replace(other.begin(), other.end(), 'e', 'o');  // the same size, another text
  std::ofstream(b) << other;
  fs::create_symlink(a, link);
  EXPECT_EQ(TextStream(opts({link}, 8), bytes(), "data.train").total_tokens(), tokens + 10);
  EXPECT_EQ(files().size(), 3u);  // the link's target is a.txt, counted above
  fs::remove(link);
  fs::create_symlink(b, link);
  EXPECT_EQ(TextStream(opts({link}, 8), bytes(), "data.train").total_tokens(), tokens + 10);
  EXPECT_EQ(files().size(), 4u);

  // TT_CACHE_DIR=off: nothing read or kept
  ::setenv("TT_CACHE_DIR", "off", 1);
  std::ofstream(a, std::ios::app) << "x\n";
  EXPECT_EQ(TextStream(opts({a}, 8), bytes(), "data.train").total_tokens(), tokens + 12);
  EXPECT_EQ(files().size(), 4u);
}
