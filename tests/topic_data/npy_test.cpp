// tt::npy (header, map, streaming writer) and the dense file sources topic-npy and topic-pt.
#include "tt/npy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <spdlog/sinks/ostream_sink.h>

#include <fstream>
#include <sstream>

#include "data_test_util.h"
#include "source_npy.h"
#include "source_pt.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/runtime.h"

namespace fs = std::filesystem;
using tt::test::config_error;
using tt::test::write_text;

namespace {

// A .npy file with exactly this header dict and these data bytes (format 1.0 or 2.0).
void raw_npy(const fs::path& p, const std::string& dict, const std::string& data, int version = 1) {
  std::string header = dict;
  const size_t prefix = version == 1 ? 10 : 12;
  header += std::string((64 - (prefix + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string bytes("\x93NUMPY", 6);
  bytes += static_cast<char>(version);
  bytes += '\0';
  const size_t len = header.size();
  bytes += static_cast<char>(len & 0xff);
  bytes += static_cast<char>((len >> 8) & 0xff);
  if (version != 1) bytes += std::string(2, '\0');
  write_text(p, bytes + header + data);
}

std::string float_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

torch::Tensor counts_6x4() {
  return torch::tensor({{1, 0, 2, 0}, {0, 3, 0, 1}, {5, 0, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 7}, {2, 2, 0, 0}},
                       torch::kLong);
}

std::shared_ptr<tt::topic::TopicSource> make(tt::Datasets d) {
  return std::dynamic_pointer_cast<tt::topic::TopicSource>(d.train);
}

}  // namespace

TEST(Npy, RoundTripEveryDtype) {
  auto dir = tt::test::temp_dir("npy");
  for (auto t : {torch::kFloat, torch::kDouble, torch::kLong, torch::kInt, torch::kShort, torch::kByte, torch::kChar,
                 torch::kBool, torch::kHalf}) {
    auto x = (torch::arange(15, torch::kDouble).reshape({3, 5}) * 3 - 4).to(t);
    const fs::path p = dir / "x.npy";
    tt::write_npy(p, x);
    const auto h = tt::read_npy_header(p);
    EXPECT_EQ(h.dtype, t);
    EXPECT_EQ(h.shape, (std::vector<int64_t>{3, 5}));
    EXPECT_FALSE(h.fortran_order);
    EXPECT_EQ(h.data_offset % 64, 0);
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(p)), h.data_offset + h.data_bytes());
    EXPECT_TRUE(torch::equal(tt::read_npy(p), x)) << t;
  }
  tt::write_npy(dir / "v.npy", torch::arange(4, torch::kFloat));  // 1-D: shape (4,)
  EXPECT_EQ(tt::read_npy_header(dir / "v.npy").shape, std::vector<int64_t>{4});
  EXPECT_TRUE(torch::equal(tt::read_npy(dir / "v.npy"), torch::arange(4, torch::kFloat)));
}

TEST(Npy, HeaderVariantsNumpyWrites) {
  auto h = tt::parse_npy_header(tt::npy_header_bytes(torch::kDouble, {2, 3}), "a.npy");
  EXPECT_EQ(h.descr, "<f8");
  // version 2.0, double quotes, other key order, no trailing comma, Python 2 longs, True
  auto dir = tt::test::temp_dir("npy");
  raw_npy(dir / "v2.npy", "{\"shape\": (2L, 1L), \"fortran_order\": True, \"descr\": \"<f4\"}", float_bytes({1, 2}), 2);
  h = tt::read_npy_header(dir / "v2.npy");
  EXPECT_EQ(h.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(h.fortran_order);
  EXPECT_EQ(h.data_offset % 64, 0);
  raw_npy(dir / "scalar.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (), }", std::string(1, '\7'));
  EXPECT_EQ(tt::read_npy(dir / "scalar.npy").item<uint8_t>(), 7);
}

TEST(Npy, HeaderErrorsNameTheFileAndTheProblem) {
  auto dir = tt::test::temp_dir("npy");
  const auto err = [&](const std::string& name) { return config_error([&] { tt::read_npy_header(dir / name); }); };
  write_text(dir / "magic.npy", "PK\3\4 not numpy at all, long enough");
  EXPECT_HAS(err("magic.npy"), "magic.npy: not a .npy file");
  // what it is instead, and the sparse matrix's way: an .npz (a zip archive), a CSV (text)
  EXPECT_HAS(err("magic.npy"), "; it is a zip archive: an .npz of numpy.savez or scipy.sparse.save_npz, or a "
                               "torch.save file); write the array with numpy.save (a sparse matrix: scipy.io.mmwrite");
  write_text(dir / "table.npy", "a,b,c\n1,2,3\n");
  EXPECT_HAS(err("table.npy"), "; it is text, a CSV perhaps); write the array with numpy.save");
  raw_npy(dir / "big.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd");
  EXPECT_HAS(err("big.npy"), "big-endian");
  raw_npy(dir / "struct.npy", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "abcd");
  EXPECT_HAS(err("struct.npy"), "structured dtype");
  raw_npy(dir / "complex.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", "abcdabcd");
  EXPECT_HAS(err("complex.npy"), "dtype '<c8' is not supported");
  EXPECT_HAS(err("complex.npy"), "convert it first, e.g. a.astype(numpy.float32)");
  raw_npy(dir / "noshape.npy", "{'descr': '<f4', 'fortran_order': False, }", "");
  EXPECT_HAS(err("noshape.npy"), "missing 'shape'");
  raw_npy(dir / "garbage.npy", "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", "abcd");
  EXPECT_HAS(err("garbage.npy"), "malformed header");
  raw_npy(dir / "short.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 10), }", float_bytes({1, 2, 3}));
  EXPECT_HAS(err("short.npy"), "short.npy: file is truncated");
  EXPECT_HAS(err("short.npy"), "promises 400 data bytes");
  std::string cut = tt::npy_header_bytes(torch::kFloat, {3});
  write_text(dir / "cut.npy", cut.substr(0, 30));
  EXPECT_HAS(err("cut.npy"), "cut off inside its header");
  EXPECT_HAS(err("none.npy"), "none.npy: cannot open .npy file (no such file)");
}

TEST(Npy, WriterStreamsRowsAndChecksTheTotal) {
  auto dir = tt::test::temp_dir("npy");
  auto x = torch::arange(15, torch::kFloat).reshape({5, 3});
  {
    tt::NpyWriter w(dir / "x.npy", torch::kFloat, {5, 3});
    EXPECT_TRUE(fs::exists(dir / "x.npy.partial"));
    EXPECT_FALSE(fs::exists(dir / "x.npy"));
    w.append(x.slice(0, 0, 2));
    w.append(x.slice(0, 2, 5).contiguous().data_ptr<float>(), 3);
    EXPECT_EQ(w.rows_written(), 5);
    w.close();
  }
  EXPECT_FALSE(fs::exists(dir / "x.npy.partial"));
  EXPECT_TRUE(torch::equal(tt::read_npy(dir / "x.npy"), x));

  {  // too few rows: close refuses, and the partial file goes
    tt::NpyWriter w(dir / "few.npy", torch::kFloat, {5, 3});
    w.append(x.slice(0, 0, 2));
    EXPECT_THROW(w.close(), tt::Error);
  }
  EXPECT_FALSE(fs::exists(dir / "few.npy.partial"));
  EXPECT_FALSE(fs::exists(dir / "few.npy"));
  {
    tt::NpyWriter w(dir / "many.npy", torch::kFloat, {2, 3});
    EXPECT_THROW(w.append(x), tt::Error);                                    // 5 rows into 2
    EXPECT_THROW(w.append(x.to(torch::kDouble).slice(0, 0, 1)), tt::Error);  // wrong dtype
    EXPECT_THROW(w.append(torch::zeros({1, 4})), tt::Error);                 // wrong row shape
  }
  EXPECT_FALSE(fs::exists(dir / "many.npy.partial"));
  EXPECT_THROW(tt::NpyWriter(dir / "no" / "such" / "dir.npy", torch::kFloat, {1}), tt::ConfigError);
}

TEST(Npy, MapSeesTheFileData) {
  auto dir = tt::test::temp_dir("npy");
  auto x = torch::rand({7, 9}, torch::kDouble);
  tt::write_npy(dir / "x.npy", x);
  tt::NpyMap map(dir / "x.npy");
  EXPECT_EQ(map.header().shape, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(std::memcmp(map.data(), x.data_ptr(), x.nbytes()), 0);
}

TEST(TopicNpy, BatchesAreTheRequestedRowsForEveryDtype) {
  auto dir = tt::test::temp_dir("npy");
  auto counts = counts_6x4();
  auto idx = torch::tensor({4, 0, 2, 4}, torch::kLong);
  for (auto t : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong, torch::kShort, torch::kByte}) {
    tt::write_npy(dir / "X.npy", counts.to(t));
    tt::topic::NpyDataset d((dir / "X.npy").string());
    EXPECT_EQ(d.size(), 6);
    EXPECT_EQ(d.n_terms(), 4);
    EXPECT_EQ(d.info().at("n_docs"), 6);
    auto b = d.get(idx);
    EXPECT_EQ(b.size, 4);
    EXPECT_TRUE(torch::equal(b.at("index"), idx));
    EXPECT_FALSE(b.has("x"));  // batch_format: sparse (the default) carries the non-zeros
    EXPECT_TRUE(torch::equal(tt::topic::dense_counts(b, 4), counts.index_select(0, idx).to(torch::kFloat))) << t;
    d.dense_batches_ = true;
    auto dense = d.get(idx);
    EXPECT_EQ(dense.at("x").scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(dense.at("x"), counts.index_select(0, idx).to(torch::kFloat))) << t;
    EXPECT_HAS(d.describe(), "6 docs x 4 terms");
  }
}

TEST(TopicNpy, OnlyTheBatchIsAllocated) {
  // 2000 x 1000 float32 = 8 MB in the file; the dataset allocates no tensor for it, a batch
  // of 3 rows 12 KB.
  auto dir = tt::test::temp_dir("npy");
  {
    tt::NpyWriter w(dir / "X.npy", torch::kFloat, {2000, 1000});
    auto rows = torch::ones({100, 1000});
    for (int i = 0; i < 20; ++i) w.append(rows);
    w.close();
  }
  auto& meter = tt::Meter::global();
  const int64_t before = meter.current();
  tt::topic::NpyDataset d((dir / "X.npy").string());
  d.dense_batches_ = true;
  EXPECT_EQ(meter.current(), before);
  auto b = d.get(torch::tensor({1999, 0, 1000}, torch::kLong));
  EXPECT_LE(meter.current() - before, 3 * 1000 * 4 + 4096);  // the rows, the index, the problems' bookkeeping
  EXPECT_EQ(b.at("x").sum().item<double>(), 3000.0);
}

// The .npy reader's refusal of a dtype lists those it reads (<f4, <f8, <i8, <i4, <i2, |u1, |i1,
// |b1, <f2): topic-npy reads every one of them as counts, mapped and into memory.
TEST(TopicNpy, ReadsEveryDtypeTheNpyReaderListsAsSupported) {
  auto dir = tt::test::temp_dir("npy");
  raw_npy(dir / "uint32.npy", "{'descr': '<u4', 'fortran_order': False, 'shape': (1, 1), }", "abcd");
  const std::string listed = config_error([&] { tt::topic::NpyDataset d((dir / "uint32.npy").string()); });
  EXPECT_HAS(listed, "(supported: <f4, <f8, <i8, <i4, <i2, |u1, |i1, |b1, <f2)");
  const auto counts = counts_6x4();
  const auto idx = torch::arange(6, torch::kLong);
  for (auto t : {torch::kHalf, torch::kChar, torch::kBool}) {
    const auto x = t == torch::kBool ? counts.clamp_max(1) : counts;
    tt::write_npy(dir / "X.npy", x.to(t));
    const std::string path = (dir / "X.npy").string();
    tt::topic::NpyDataset mapped(path);
    EXPECT_TRUE(torch::equal(tt::topic::dense_counts(mapped.get(idx), 4), x.to(torch::kFloat))) << t;
    auto csr = tt::topic::read_npy_counts(path, int64_t{1} << 30);
    ASSERT_TRUE(csr) << t;
    EXPECT_TRUE(torch::equal(csr->dense(), x.to(torch::kFloat))) << t;
  }
}

TEST(TopicNpy, RefusesBadFilesNamingThem) {
  auto dir = tt::test::temp_dir("npy");
  const auto err = [&](const std::string& name) {
    return config_error([&] { tt::topic::NpyDataset d((dir / name).string()); });
  };
  auto x = counts_6x4().to(torch::kFloat);
  tt::write_npy(dir / "good.npy", x);
  std::string good = tt::test::read_file(dir / "good.npy");
  write_text(dir / "truncated.npy", good.substr(0, good.size() - 5));
  EXPECT_HAS(err("truncated.npy"), "truncated.npy: file is truncated");
  raw_npy(dir / "fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (6, 4), }",
          std::string(static_cast<const char*>(x.t().contiguous().data_ptr()), 96));
  EXPECT_HAS(err("fortran.npy"), "fortran.npy: the array is in Fortran (column-major) order");
  raw_npy(dir / "uint32.npy", "{'descr': '<u4', 'fortran_order': False, 'shape': (1, 1), }", "abcd");
  EXPECT_HAS(err("uint32.npy"), "uint32.npy: dtype '<u4' is not supported");
  write_text(dir / "magic.npy", "this is not a numpy file, it is text");
  EXPECT_HAS(err("magic.npy"), "magic.npy: not a .npy file");
  tt::write_npy(dir / "3d.npy", torch::ones({2, 3, 4}));
  EXPECT_HAS(err("3d.npy"), "3d.npy: expected a 2-D documents x terms matrix, the array has 3 dimension(s)");
  tt::write_npy(dir / "1d.npy", torch::ones({4}));
  EXPECT_HAS(err("1d.npy"), "1d.npy: expected a 2-D");
  tt::write_npy(dir / "empty.npy", torch::ones({0, 4}));
  EXPECT_HAS(err("empty.npy"), "empty.npy: the matrix is empty");
}

// Read in chunks of one row (row by row), of three rows on four threads (waves of four chunks)
// and of the whole file: the same non-zeros, the same first bad document named and the same
// budget verdict, also where the budget runs out before a bad row.
TEST(TopicNpy, ReadIntoMemoryInParallelChunksGivesTheRowByRowResult) {
  auto dir = tt::test::temp_dir("npy");
  torch::manual_seed(3);
  auto x = torch::randint(0, 4, {301, 37}, torch::kLong) * (torch::rand({301, 37}) < 0.3).to(torch::kLong);
  x.select(1, 5).add_(1);  // every row has a word
  const int64_t nnz = (x != 0).sum().item<int64_t>();
  struct Threads {  // four, and back to the test binary's whatever happens
    int before = at::get_num_threads();
    Threads() { at::set_num_threads(4); }
    ~Threads() { at::set_num_threads(before); }
  } four;
  // chunk_bytes counts 12 bytes a value (the non-zeros were every count one)
  const std::vector<int64_t> chunkings = {37 * 12, 3 * 37 * 12, int64_t{1} << 30};
  for (auto t : {torch::kFloat, torch::kShort}) {
    tt::write_npy(dir / "X.npy", x.to(t));
    const std::string path = (dir / "X.npy").string();
    const int64_t fits = nnz * 12 + 302 * 8;
    for (int64_t chunk : chunkings) {
      auto csr = tt::topic::read_npy_counts(path, int64_t{1} << 30, chunk);
      ASSERT_TRUE(csr) << t << " " << chunk;
      EXPECT_EQ(csr->nnz(), nnz) << t << " " << chunk;
      EXPECT_TRUE(torch::equal(csr->dense(), x.to(torch::kFloat))) << t << " " << chunk;
      EXPECT_TRUE(tt::topic::read_npy_counts(path, fits, chunk)) << t << " " << chunk;
      EXPECT_FALSE(tt::topic::read_npy_counts(path, fits - 1, chunk)) << t << " " << chunk;
    }
  }
  auto bad = x.to(torch::kFloat);
  bad[250][0] = -1;   // a later wave
  bad[101][2] = NAN;  // the same three-row chunk as 100 (99-101), after the first bad row
  bad[100][1] = -2;
  bad[105].zero_();   // the same wave, a later chunk (105-107)
  tt::write_npy(dir / "bad.npy", bad);
  const std::string bad_path = (dir / "bad.npy").string();
  const auto upto = (x != 0).sum(1).cumsum(0);  // non-zeros of rows 0..r
  for (int64_t r : {0, 50, 99, 100, 200}) {
    // row by row, the budget runs out at row r: before the bad row 100, no verdict but "too big"
    const int64_t budget = 302 * 8 + upto[r].item<int64_t>() * 12 - 1;
    for (int64_t chunk : chunkings) {
      if (r < 100) {
        EXPECT_FALSE(tt::topic::read_npy_counts(bad_path, budget, chunk)) << r << " " << chunk;
      } else {
        EXPECT_HAS(config_error([&] { tt::topic::read_npy_counts(bad_path, budget, chunk); }),
                   "bad.npy: document 100 (row 100) has a negative count (-2 at term 1)");
      }
    }
  }
  tt::request_interrupt();  // a Ctrl-C stops the read between waves
  std::string interrupted;
  try {
    tt::topic::read_npy_counts(bad_path, int64_t{1} << 30);
  } catch (const tt::Interrupted& e) {
    interrupted = e.what();
  }
  tt::clear_interrupt();
  EXPECT_HAS(interrupted, "interrupted while reading " + bad_path + " into memory (0 of 301 documents read)");
}

TEST(TopicNpy, RefusesBadCountsWhenTheRowIsRead) {
  auto dir = tt::test::temp_dir("npy");
  auto x = counts_6x4().to(torch::kDouble);
  x[3][2] = -1;
  x[2][1] = NAN;
  x[1] = 0;
  x[5][0] = INFINITY;
  tt::write_npy(dir / "bad.npy", x);
  tt::topic::NpyDataset d((dir / "bad.npy").string());  // rows are checked as they are read
  EXPECT_NO_THROW(d.get(torch::tensor({0, 4}, torch::kLong)));
  auto e = config_error([&] { d.get(torch::tensor({0, 3}, torch::kLong)); });
  EXPECT_HAS(e, "bad.npy: document 3 (row 3) has a negative count (-1 at term 2)");
  e = config_error([&] { d.get(torch::tensor({2}, torch::kLong)); });
  EXPECT_HAS(e, "bad.npy: document 2 (row 2) has a count that is not a finite number (nan at term 1)");
  e = config_error([&] { d.get(torch::tensor({5}, torch::kLong)); });
  EXPECT_HAS(e, "bad.npy: document 5 (row 5) has a count that is not a finite number (inf at term 0)");
  e = config_error([&] { d.get(torch::tensor({4, 1, 3}, torch::kLong)); });  // the first bad row in the batch
  EXPECT_HAS(e, "bad.npy: document 1 (row 1) has no words; remove empty rows");
}

// data.load: memory reads the file once into its rows' non-zeros: every dtype gives the batches
// the mapped file gives, every row is checked at load (the first bad one named), and non-zeros
// beyond the budget give up (auto then maps the file).
namespace {
std::string path_of(const std::filesystem::path& dir, const char* name) { return (dir / name).string(); }
}  // namespace

TEST(TopicNpy, ReadIntoMemoryGivesTheMappedBatchesAndChecksEveryRowAtLoad) {
  auto dir = tt::test::temp_dir("npy");
  auto counts = counts_6x4();
  auto idx = torch::tensor({4, 0, 2, 4, 5}, torch::kLong);
  const auto schema = tt::topic::npy_schema();
  for (auto t : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong, torch::kShort, torch::kByte}) {
    tt::write_npy(dir / "X.npy", counts.to(t));
    const std::string path = (dir / "X.npy").string();
    auto csr = tt::topic::read_npy_counts(path, int64_t{1} << 30);
    ASSERT_TRUE(csr) << t;
    EXPECT_EQ(csr->nnz(), 12) << t;
    EXPECT_TRUE(torch::equal(csr->dense(), counts.to(torch::kFloat))) << t;
    tt::topic::NpyDataset mapped(path);
    for (const char* load : {"memory", "auto"}) {
      auto d = make(tt::topic::make_npy(tt::test::options(schema, "{path: " + path + ", load: " + load + "}"), 0));
      ASSERT_TRUE(d);
      EXPECT_HAS(d->describe(), "read into memory");
      EXPECT_HAS(d->describe(), "6 docs x 4 terms, 12 non-zeros");
      auto a = d->get(idx), b = mapped.get(idx);
      for (const char* key : {"index", "rows", "cols", "vals"})
        EXPECT_TRUE(torch::equal(a.at(key), b.at(key))) << t << " " << load << " " << key;
    }
    auto m = make(tt::topic::make_npy(tt::test::options(schema, "{path: " + path + ", load: map}"), 0));
    EXPECT_HAS(m->describe(), "memory-mapped");
  }
  // 12 non-zeros of 12 bytes and 7 row offsets of 8: 200 bytes fit, 199 do not
  EXPECT_TRUE(tt::topic::read_npy_counts((dir / "X.npy").string(), 200));
  EXPECT_FALSE(tt::topic::read_npy_counts((dir / "X.npy").string(), 199));

  auto x = counts.to(torch::kDouble);
  x[3][2] = -1;
  x[1] = 0;
  tt::write_npy(dir / "bad.npy", x);
  EXPECT_HAS(config_error([&] { tt::topic::read_npy_counts((dir / "bad.npy").string(), int64_t{1} << 30); }),
             "bad.npy: document 1 (row 1) has no words; remove empty rows");
  x[1][0] = 1;
  tt::write_npy(dir / "bad.npy", x);
  EXPECT_HAS(config_error([&] {
               tt::topic::make_npy(tt::test::options(schema, "{path: " + (dir / "bad.npy").string() + "}"), 0);
             }),
             "bad.npy: document 3 (row 3) has a negative count (-1 at term 2)");
  EXPECT_HAS(config_error([&] {
               tt::topic::make_npy(tt::test::options(schema, "{path: " + (dir / "X.npy").string() + ", load: disk}"),
                                   0);
             }),
             "load");
  // Counts that are not whole numbers are read, and warned about, naming the first
  std::ostringstream said;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(said);
  tt::log().sinks().push_back(sink);
  make(tt::topic::make_npy(tt::test::options(schema, "{path: " + path_of(dir, "X.npy") + "}"), 0));
  EXPECT_EQ(said.str().find("not whole numbers"), std::string::npos) << said.str();
  auto f = counts.to(torch::kFloat);
  f[2][0] = 5.5;
  tt::write_npy(dir / "frac.npy", f);
  make(tt::topic::make_npy(tt::test::options(schema, "{path: " + path_of(dir, "frac.npy") + "}"), 0));
  tt::log().sinks().pop_back();
  EXPECT_HAS(said.str(), "1 of its 12 non-zero counts are not whole numbers (document 2, term 0: 5.5); the topic "
                         "model is a Poisson model of word counts");
}

TEST(TopicNpy, OptionsTrueFAndVocabulary) {
  auto dir = tt::test::temp_dir("npy");
  tt::write_npy(dir / "X.npy", counts_6x4().to(torch::kInt));
  auto F = torch::softmax(torch::rand({3, 4}), 1);
  tt::write_npy(dir / "F.npy", F);
  write_text(dir / "vocab.txt", "apple\nbanana\ncherry\ndate\n");
  const auto schema = tt::topic::npy_schema();
  auto d = make(tt::topic::make_npy(
      tt::test::options(schema, "{path: " + (dir / "X.npy").string() + ", true_F: " + (dir / "F.npy").string() +
                                    ", vocab: " + (dir / "vocab.txt").string() + "}"),
      0));
  ASSERT_TRUE(d);
  EXPECT_TRUE(torch::equal(d->true_F(), F));
  EXPECT_EQ(d->vocabulary(), (std::vector<std::string>{"apple", "banana", "cherry", "date"}));

  write_text(dir / "short.txt", "apple\nbanana\n");
  auto e = config_error([&] {
    tt::topic::make_npy(tt::test::options(schema, "{path: " + (dir / "X.npy").string() +
                                                      ", vocab: " + (dir / "short.txt").string() + "}"),
                        0);
  });
  EXPECT_HAS(e, "short.txt: the vocabulary has 2 lines but the corpus has 4 terms");
  tt::write_npy(dir / "F5.npy", torch::ones({3, 5}));
  e = config_error([&] {
    tt::topic::make_npy(tt::test::options(schema, "{path: " + (dir / "X.npy").string() +
                                                      ", true_F: " + (dir / "F5.npy").string() + "}"),
                        0);
  });
  EXPECT_HAS(e, "F5.npy: true_F must be a k x m matrix with m = 4");
  e = config_error([&] { tt::topic::make_npy(tt::test::options(schema, "{}"), 0); });
  EXPECT_HAS(e, "path is not set");
  e = config_error([&] { tt::topic::make_npy(tt::test::options(schema, "{path: /no/such/X.npy}"), 0); });
  EXPECT_HAS(e, "no such file '/no/such/X.npy'");
}

TEST(TopicPt, ReadsWhatPickleSaveWrites) {
  auto dir = tt::test::temp_dir("pt");
  auto counts = counts_6x4();
  for (auto t : {torch::kLong, torch::kFloat, torch::kDouble}) {
    auto bytes = torch::pickle_save(counts.to(t));
    std::ofstream(dir / "X.pt", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    tt::topic::PtDataset d((dir / "X.pt").string());
    EXPECT_EQ(d.size(), 6);
    EXPECT_EQ(d.n_terms(), 4);
    EXPECT_TRUE(torch::equal(d.counts(), counts.to(torch::kFloat)));
    auto b = d.get(torch::tensor({5, 1}, torch::kLong));
    EXPECT_TRUE(torch::equal(tt::topic::dense_counts(b, 4), counts.index_select(0, torch::tensor({5, 1})).to(torch::kFloat)));
  }
}

TEST(TopicPt, RefusesBadFilesNamingThem) {
  auto dir = tt::test::temp_dir("pt");
  const auto save = [&](const std::string& name, const c10::IValue& v) {
    auto bytes = torch::pickle_save(v);
    std::ofstream(dir / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  const auto err = [&](const std::string& name) {
    return config_error([&] { tt::topic::PtDataset d((dir / name).string()); });
  };
  write_text(dir / "text.pt", "hello, not a tensor file");
  EXPECT_HAS(err("text.pt"), "text.pt: not a .pt file (not a zip archive");
  write_text(dir / "legacy.pt", std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8", 12));
  EXPECT_HAS(err("legacy.pt"), "legacy.pt: this is the legacy (non-zip) torch.save format");
  write_text(dir / "zip.pt", std::string("PK\x03\x04", 4) + std::string(100, 'x'));
  EXPECT_HAS(err("zip.pt"), "zip.pt: the archive is damaged (not a zip archive (no end of central directory record))");
  save("list.pt", c10::IValue(std::vector<int64_t>{1, 2, 3}));
  EXPECT_HAS(err("list.pt"), "list.pt: holds a GenericList, not a tensor");
  save("vector.pt", torch::ones({5}));
  EXPECT_HAS(err("vector.pt"), "vector.pt: expected a 2-D documents x terms tensor, it has 1 dimension(s)");
  save("bool.pt", torch::ones({2, 2}, torch::kBool));
  EXPECT_HAS(err("bool.pt"), "bool.pt: the tensor is Bool");
  auto x = counts_6x4().to(torch::kFloat);
  x[4] = 0;
  save("empty_row.pt", x);
  EXPECT_HAS(err("empty_row.pt"), "empty_row.pt: document 4 (row 4) has no words; remove empty rows");
  x = counts_6x4().to(torch::kFloat);
  x[2][3] = -2;
  save("negative.pt", x);
  EXPECT_HAS(err("negative.pt"), "negative.pt: document 2 (row 2) has a negative count (-2 at term 3)");
}

TEST(TopicPt, ReadsWhatPythonTorchSaves) {
  const std::string py = tt::test::python_with("torch");
  if (py.empty()) GTEST_SKIP() << "Python's torch is not installed (apt-get install python3-torch to run this test)";
  auto dir = tt::test::temp_dir("pt");
  const std::string script =
      "import torch\n"
      "x = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1\n"
      "torch.save(x, '" +
      (dir / "float.pt").string() +
      "')\n"
      "torch.save(x.to(torch.int64), '" +
      (dir / "long.pt").string() +
      "')\n"
      "torch.save(x.t().contiguous().t(), '" +
      (dir / "strided.pt").string() +
      "')\n"
      "torch.save(x.to_sparse(), '" +
      (dir / "sparse.pt").string() +
      "')\n"
      "torch.save({'x': x}, '" +
      (dir / "dict.pt").string() +
      "')\n"
      "torch.save(x, '" +
      (dir / "legacy.pt").string() + "', _use_new_zipfile_serialization=False)\n";
  write_text(dir / "make.py", script);
  auto r = tt::test::run(py + " " + (dir / "make.py").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  auto expected = torch::arange(12, torch::kFloat).reshape({3, 4}) + 1;
  for (const char* name : {"float.pt", "long.pt", "strided.pt"}) {
    tt::topic::PtDataset d((dir / name).string());
    EXPECT_TRUE(torch::equal(d.counts(), expected)) << name;
  }
  // LibTorch 1.13 cannot unpickle Python's sparse tensors: refused, with what to do instead
  const std::string sparse = config_error([&] { tt::topic::PtDataset d((dir / "sparse.pt").string()); });
  EXPECT_HAS(sparse, "sparse.pt: ");
  EXPECT_HAS(sparse, "X.to_dense()");
  // A dict is not a tensor; LibTorch's unpickler cannot read a Python dict of one entry either
  // (no SETITEM): refused with the file named either way
  const std::string e = config_error([&] { tt::topic::PtDataset d((dir / "dict.pt").string()); });
  EXPECT_TRUE(e.find("dict.pt: holds a GenericDict, not a tensor") != std::string::npos ||
              e.find("dict.pt: cannot unpickle it") != std::string::npos)
      << e;
  EXPECT_HAS(config_error([&] { tt::topic::PtDataset d((dir / "legacy.pt").string()); }),
             "legacy.pt: this is the legacy (non-zip) torch.save format");
}

TEST(TopicNpy, ReadsWhatNumpySaves) {
  const std::string py = tt::test::python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "numpy is not installed (apt-get install python3-numpy to run this test)";
  auto dir = tt::test::temp_dir("npy");
  const std::string d = dir.string();
  write_text(dir / "make.py",
             "import numpy as np\n"
             "x = np.arange(12).reshape(3, 4) + 1\n"
             "for t in ['float32', 'float64', 'int32', 'int64']:\n"
             "    np.save('" +
                 d +
                 "/' + t + '.npy', x.astype(t))\n"
                 "np.save('" +
                 d +
                 "/fortran.npy', np.asfortranarray(x.astype('float32')))\n"
                 "np.save('" +
                 d +
                 "/uint16.npy', x.astype('uint16'))\n"
                 "np.save('" +
                 d +
                 "/big.npy', x.astype('>f4'))\n"
                 "np.save('" +
                 d + "/cube.npy', np.ones((2, 2, 2), dtype='float32'))\n");
  auto r = tt::test::run(py + " " + (dir / "make.py").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  auto expected = torch::arange(12, torch::kFloat).reshape({3, 4}) + 1;
  for (const char* t : {"float32", "float64", "int32", "int64"}) {
    tt::topic::NpyDataset ds((dir / (std::string(t) + ".npy")).string());
    EXPECT_TRUE(torch::equal(tt::topic::dense_counts(ds.get(torch::arange(3, torch::kLong)), 4), expected)) << t;
  }
  const auto err = [&](const std::string& name) {
    return config_error([&] { tt::topic::NpyDataset ds((dir / name).string()); });
  };
  EXPECT_HAS(err("fortran.npy"), "fortran.npy: the array is in Fortran (column-major) order");
  EXPECT_HAS(err("uint16.npy"), "uint16.npy: dtype '<u2' is not supported");
  EXPECT_HAS(err("big.npy"), "big.npy: dtype '>f4' is big-endian");
  EXPECT_HAS(err("cube.npy"), "cube.npy: expected a 2-D documents x terms matrix, the array has 3 dimension(s)");
}
