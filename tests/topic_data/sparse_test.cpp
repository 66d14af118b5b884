// The sparse sources: topic-mtx (Matrix Market) and topic-text (tokenized text), and the
// Brown corpus as topic-text reads it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "data_test_util.h"
#include "source_mtx.h"
#include "source_npy.h"
#include "tt/npy.h"
#include "source_text.h"

namespace fs = std::filesystem;
using tt::test::config_error;
using tt::test::write_text;

namespace {

// 4 documents x 5 terms; an integer file with a comment, a duplicate entry (adds up) and an
// explicit zero (dropped).
const char* kMtx =
    "%%MatrixMarket matrix coordinate integer general\n"
    "% written by hand\n"
    "4 5 9\n"
    "1 1 2\n"
    "1 4 1\n"
    "2 2 3\n"
    "3 5 1\n"
    "3 1 4\n"
    "4 3 1\n"
    "4 3 2\n"
    "4 1 0\n"
    "2 5 6\n";

torch::Tensor kMtxDense() {
  return torch::tensor({{2, 0, 0, 1, 0}, {0, 3, 0, 0, 6}, {4, 0, 0, 0, 1}, {0, 0, 3, 0, 0}}, torch::kFloat);
}

std::string mtx_error(const fs::path& dir, const std::string& text) {
  write_text(dir / "bad.mtx", text);
  return config_error([&] { tt::topic::read_mtx((dir / "bad.mtx").string()); });
}

// topic-text's defaults, from its schema (TextOptions has no defaults of its own).
tt::topic::TextOptions text_defaults() {
  return tt::Options::defaults(tt::topic::text_schema(), "data").to<tt::topic::TextOptions>();
}

tt::topic::TextCorpus corpus_of(const fs::path& dir, const std::string& text, const tt::topic::TextOptions& o) {
  write_text(dir / "corpus.txt", text);
  return tt::topic::read_text_corpus((dir / "corpus.txt").string(), o);
}

// The corpus as {term: count} per document.
std::vector<std::map<std::string, float>> as_maps(const tt::topic::TextCorpus& c) {
  auto x = c.counts.dense();
  std::vector<std::map<std::string, float>> out(static_cast<size_t>(x.size(0)));
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t j = 0; j < x.size(1); ++j)
      if (x[i][j].item<float>() != 0)
        out[static_cast<size_t>(i)][c.vocab[static_cast<size_t>(j)]] = x[i][j].item<float>();
  return out;
}

}  // namespace

TEST(TopicMtx, ParsesCoordinateFiles) {
  auto dir = tt::test::temp_dir("mtx");
  write_text(dir / "X.mtx", kMtx);
  auto csr = tt::topic::read_mtx((dir / "X.mtx").string());
  EXPECT_EQ(csr.n_docs(), 4);
  EXPECT_EQ(csr.n_terms, 5);
  EXPECT_EQ(csr.nnz(), 7);  // duplicate merged, zero dropped
  EXPECT_TRUE(torch::equal(csr.dense(), kMtxDense()));
  EXPECT_TRUE(torch::equal(csr.row_ptr, torch::tensor({0, 2, 4, 6, 7}, torch::kLong)));
  EXPECT_TRUE(torch::equal(csr.cols.slice(0, 2, 4), torch::tensor({1, 4}, torch::kLong)));  // ascending in a row
  // real field, upper-case banner, CRLF line ends, blank lines
  write_text(dir / "real.mtx",
             "%%MatrixMarket MATRIX Coordinate Real General\r\n\r\n2 2 2\r\n1 1 1.5\r\n2 2 2.5e0\r\n\r\n");
  auto r = tt::topic::read_mtx((dir / "real.mtx").string());
  EXPECT_TRUE(torch::equal(r.dense(), torch::tensor({{1.5, 0.0}, {0.0, 2.5}}, torch::kFloat)));
}

TEST(TopicMtx, SparseBatchesEqualTheDenseRows) {
  auto dir = tt::test::temp_dir("mtx");
  write_text(dir / "X.mtx", kMtx);
  const auto schema = tt::topic::mtx_schema();
  auto data = tt::topic::make_mtx(tt::test::options(schema, "{path: " + (dir / "X.mtx").string() + "}"), 0);
  auto d = std::dynamic_pointer_cast<tt::topic::SparseCountsDataset>(data.train);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->size(), 4);
  EXPECT_EQ(d->n_terms(), 5);
  auto idx = torch::tensor({3, 1, 1, 0}, torch::kLong);
  auto b = d->get(idx);
  EXPECT_EQ(b.size, 4);
  EXPECT_FALSE(b.has("x"));
  EXPECT_TRUE(torch::equal(b.at("index"), idx));
  EXPECT_EQ(b.at("rows").size(0), 1 + 2 + 2 + 2);
  EXPECT_EQ(b.at("vals").scalar_type(), torch::kFloat);
  EXPECT_EQ(b.at("cols").scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(tt::topic::dense_counts(b, 5), kMtxDense().index_select(0, idx)));
  EXPECT_TRUE(torch::equal(b.at("rows"), torch::tensor({0, 1, 1, 2, 2, 3, 3}, torch::kLong)));
  EXPECT_HAS(d->describe(), "4 docs x 5 terms, 7 non-zeros");

  data = tt::topic::make_mtx(tt::test::options(schema, "{path: " + (dir / "X.mtx").string() + ", batch_format: dense}"),
                             0);
  auto dense = data.train->get(idx);
  EXPECT_TRUE(torch::equal(dense.at("x"), kMtxDense().index_select(0, idx)));
  auto e = config_error([&] {
    tt::topic::make_mtx(tt::test::options(schema, "{path: " + (dir / "X.mtx").string() + ", batch_format: csr}"), 0);
  });
  EXPECT_HAS(e, "batch_format must be one of sparse | dense, got 'csr'");
}

TEST(TopicMtx, RefusesBadFilesNamingThem) {
  auto dir = tt::test::temp_dir("mtx");
  const std::string head = "%%MatrixMarket matrix coordinate real general\n";
  EXPECT_HAS(mtx_error(dir, "1 2 3\n"), "bad.mtx: not a Matrix Market file");
  EXPECT_HAS(mtx_error(dir, ""), "bad.mtx: the file is empty");
  EXPECT_HAS(mtx_error(dir, "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n"),
             "bad.mtx: line 1: the format is 'array'");
  EXPECT_HAS(mtx_error(dir, "%%MatrixMarket matrix coordinate pattern general\n1 1 1\n1 1\n"),
             "bad.mtx: line 1: the field is 'pattern'");
  EXPECT_HAS(mtx_error(dir, "%%MatrixMarket matrix coordinate real symmetric\n1 1 1\n1 1 1\n"),
             "the symmetry is 'symmetric'");
  EXPECT_HAS(mtx_error(dir, head + "2 2\n"), "bad.mtx: line 2: expected the size line");
  EXPECT_HAS(mtx_error(dir, head + "2 2 3\n1 1 1\n2 2 1\n"),
             "bad.mtx: the file is truncated: the size line announces 3 entries, it has 2");
  EXPECT_HAS(mtx_error(dir, head + "2 2 1\n1 1 1\n2 2 1\n"), "bad.mtx: line 4: more entries than the 1");
  EXPECT_HAS(mtx_error(dir, head + "2 2 2\n1 1 1\n3 1 1\n"),
             "bad.mtx: line 4: entry (3, 1) is outside the 2 x 2 matrix");
  EXPECT_HAS(mtx_error(dir, head + "2 2 2\n1 1 1\n2 0 1\n"), "entry (2, 0) is outside");
  EXPECT_HAS(mtx_error(dir, head + "2 2 2\n1 1 1\n2 2 -3\n"),
             "bad.mtx: line 4: document 1 (row 2) has a negative count (-3 at term 1)");
  EXPECT_HAS(mtx_error(dir, head + "2 2 2\n1 1 1\n2 2 nan\n"), "has a non-finite count");
  // found by the mtx fuzzer (tests/fuzz/regressions/mtx/count_beyond_float32.mtx): it was read as infinity
  EXPECT_HAS(mtx_error(dir, head + "2 2 2\n1 1 21e39\n2 2 1\n"),
             "bad.mtx: line 3: document 0 (row 1) has a count beyond float32's range (2.1e+40 at term 0)");
  EXPECT_HAS(mtx_error(dir, head + "2 2 2\n1 1 1\n2 two 1\n"), "bad.mtx: line 4: expected 'document term count'");
  EXPECT_HAS(mtx_error(dir, head + "3 2 2\n1 1 1\n3 2 1\n"),
             "bad.mtx: document 1 (row 2 of the file, counting from 1) has no words; remove empty rows");
  EXPECT_HAS(mtx_error(dir, head + "2 2 2\n1 1 1\n2 2 0\n"), "document 1 (row 2 of the file");  // zeros only
  // A size line promising more than the file holds is refused before anything is allocated for it.
  EXPECT_HAS(mtx_error(dir, head + "8 3 34294967296\n1 3 5\n"),
             "bad.mtx: line 2: the size line announces 34294967296 entries, more than the file's 68 bytes can hold");
  EXPECT_HAS(mtx_error(dir, head + "9999999999999 3 2\n1 3 5\n2 1 1\n"),
             "bad.mtx: document 2 (row 3 of the file, counting from 1) has no words");
}

TEST(TopicText, TokenizesLikeCountVectorizer) {
  using V = std::vector<std::string>;
  EXPECT_EQ(tt::topic::tokenize("Hello, World! it's a don't x_y 42 7 caf\xc3\xa9 over-all", true),
            (V{"hello", "world", "it", "don", "x_y", "42", "caf\xc3\xa9", "over", "all"}));
  EXPECT_EQ(tt::topic::tokenize("Hello HELLO", false), (V{"Hello", "HELLO"}));
  EXPECT_TRUE(tt::topic::tokenize("a b c ! ?", true).empty());
}

TEST(TopicText, CountsPruningAndVocabulary) {
  auto dir = tt::test::temp_dir("text");
  const std::string text =
      "The cat sat on the mat.\n"
      "The dog sat; the DOG ran.\n"
      "\n"
      "A cat and a dog.\n"
      "zebra\n";
  tt::topic::TextOptions o = text_defaults();
  auto c = corpus_of(dir, text, o);
  EXPECT_EQ(c.documents_read, 5);
  EXPECT_EQ(c.dropped, 1);  // the blank line
  EXPECT_EQ(c.lines, (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(c.vocab, (std::vector<std::string>{"and", "cat", "dog", "mat", "on", "ran", "sat", "the", "zebra"}));
  EXPECT_TRUE(c.labels.empty());
  auto m = as_maps(c);
  EXPECT_EQ(m[0], (std::map<std::string, float>{{"the", 2}, {"cat", 1}, {"sat", 1}, {"on", 1}, {"mat", 1}}));
  EXPECT_EQ(m[1], (std::map<std::string, float>{{"the", 2}, {"dog", 2}, {"sat", 1}, {"ran", 1}}));
  EXPECT_EQ(m[2], (std::map<std::string, float>{{"cat", 1}, {"and", 1}, {"dog", 1}}));

  o.min_df = 2;  // cat, dog, sat, the; "zebra" (line 5) loses every word
  c = corpus_of(dir, text, o);
  EXPECT_EQ(c.vocab, (std::vector<std::string>{"cat", "dog", "sat", "the"}));
  EXPECT_EQ(c.dropped, 2);
  EXPECT_EQ(c.counts.n_docs(), 3);
  o.max_df = 0.4;  // of 5 documents: at most 2 => all of cat, dog, sat, the are in 2
  c = corpus_of(dir, text, o);
  EXPECT_EQ(c.vocab.size(), 4u);
  o.max_df = 0.3;  // at most 1.5 documents
  EXPECT_HAS(config_error([&] { corpus_of(dir, text, o); }), "corpus.txt: no terms left");

  o = text_defaults();
  o.max_terms = 2;  // the most frequent: the (4), dog (3)
  c = corpus_of(dir, text, o);
  EXPECT_EQ(c.vocab, (std::vector<std::string>{"dog", "the"}));
  o = text_defaults();
  o.stopwords = true;  // the, on, and go
  c = corpus_of(dir, text, o);
  EXPECT_EQ(c.vocab, (std::vector<std::string>{"cat", "dog", "mat", "ran", "sat", "zebra"}));
  o = text_defaults();
  o.lowercase = false;
  c = corpus_of(dir, text, o);
  EXPECT_EQ(c.vocab.front(), "DOG");  // upper case sorts first
}

// A corpus whose words are (mostly) stopwords is refused naming the stopwords and data.stopwords:
// false, not min_df and max_df; a corpus with few stopwords keeps the min_df/max_df message.
TEST(TopicText, ACorpusOfStopwordsIsBlamedOnTheStopwords) {
  auto dir = tt::test::temp_dir("text");
  auto o = text_defaults();
  o.stopwords = true;
  o.min_df = 1;
  o.max_df = 1;
  const std::string said = config_error([&] { corpus_of(dir, "the and of\nto a in\n", o); });
  EXPECT_HAS(said, "corpus.txt: no terms left: the English stopwords (data.stopwords: true) removed 5 of its 5 words, "
                   "leaving 0 distinct terms in 2 documents; set data.stopwords: false to keep them");
  EXPECT_EQ(said.find("min_df"), std::string::npos) << said;
  o.max_df = 0.3;  // every term is in both documents: min_df/max_df's doing
  EXPECT_HAS(config_error([&] { corpus_of(dir, "the cat dog mat\ncat dog mat\n", o); }),
             "lower min_df or raise max_df");
}

TEST(TopicText, ABinaryFileIsRefusedNamingItAndWhy) {
  auto dir = tt::test::temp_dir("text");
  std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8);
  for (int i = 0; i < 3000; ++i) gz += static_cast<char>((i * 37 + 5) % 256);
  EXPECT_HAS(config_error([&] { corpus_of(dir, gz, text_defaults()); }),
             "corpus.txt is not a text file (a NUL byte at offset 3); give UTF-8 text, one document a line");
}

TEST(TopicText, TsvLabelsIdsAndTheDataset) {
  auto dir = tt::test::temp_dir("text");
  write_text(dir / "docs.tsv",
             "d1\tnews\tstocks fell as markets fell\n"
             "d2\tsport\tthe team won the match\n"
             "d3\tnews\t!!!\n"
             "\n"
             "d4\tsport\tmarkets and the team\n");
  const auto schema = tt::topic::text_schema();
  auto data = tt::topic::make_text(
      tt::test::options(schema, "{path: " + (dir / "docs.tsv").string() + ", format: tsv, stopwords: true}"), 0);
  auto d = std::dynamic_pointer_cast<tt::topic::TextDataset>(data.train);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->size(), 3);  // d3 has no words
  EXPECT_EQ(d->doc_labels(), (std::vector<std::string>{"news", "sport", "sport"}));
  EXPECT_EQ(d->ids_, (std::vector<std::string>{"d1", "d2", "d4"}));
  EXPECT_EQ(d->lines_, (std::vector<int64_t>{1, 2, 5}));
  EXPECT_EQ(d->vocabulary(), (std::vector<std::string>{"fell", "markets", "match", "stocks", "team", "won"}));
  auto b = d->get(torch::tensor({2, 0}, torch::kLong));
  EXPECT_TRUE(torch::equal(tt::topic::dense_counts(b, 6),
                           torch::tensor({{0, 1, 0, 0, 1, 0}, {2, 1, 0, 1, 0, 0}}, torch::kFloat)));
  EXPECT_EQ(d->info().at("n_terms"), 6);

  write_text(dir / "notsv.tsv", "d1\tnews stocks fell\n");
  auto e = config_error([&] {
    tt::topic::make_text(tt::test::options(schema, "{path: " + (dir / "notsv.tsv").string() + ", format: tsv}"), 0);
  });
  EXPECT_HAS(e, "notsv.tsv: line 1: expected id<TAB>label<TAB>text (format: tsv), found one tab");
  e = config_error([&] {
    tt::topic::make_text(tt::test::options(schema, "{path: " + (dir / "docs.tsv").string() + ", format: csv}"), 0);
  });
  EXPECT_HAS(e, "data.format must be one of lines | tsv, got 'csv'");
  e = config_error([&] {
    tt::topic::make_text(tt::test::options(schema, "{path: " + (dir / "docs.tsv").string() + ", max_df: 1.5}"), 0);
  });
  EXPECT_HAS(e, "data.max_df must be in (0, 1], got 1.5");
  e = config_error([&] { tt::topic::make_text(tt::test::options(schema, "{path: no-such-corpus.txt}"), 0); });
  EXPECT_HAS(e, "data.path names no such file 'no-such-corpus.txt' (relative to the current directory");
  write_text(dir / "empty.txt", "");
  e = config_error(
      [&] { tt::topic::make_text(tt::test::options(schema, "{path: " + (dir / "empty.txt").string() + "}"), 0); });
  EXPECT_HAS(e, "empty.txt: no documents in the file");
}

TEST(TopicText, BrownCorpus) {
  const fs::path brown = fs::path(TT_SHARED_DIR) / "datasets" / "brown" / "brown_docs.tsv";
  if (!fs::exists(brown)) GTEST_SKIP() << "the Brown corpus is not at " << brown.string() << " (../shared/datasets)";
  tt::topic::TextOptions o = text_defaults();
  o.format = "tsv";
  o.min_df = 5;
  o.max_df = 0.5;
  o.stopwords = true;
  auto c = tt::topic::read_text_corpus(brown.string(), o);
  EXPECT_EQ(c.documents_read, 500);
  EXPECT_EQ(c.counts.n_docs(), 500);
  EXPECT_EQ(c.dropped, 0);
  EXPECT_EQ(std::set<std::string>(c.labels.begin(), c.labels.end()).size(), 15u);
  EXPECT_EQ(c.ids.front(), "ca01");
  EXPECT_EQ(c.labels.front(), "news");
  // ~14k words occur 5+ times; fewer in 5+ documents and at most half of them, minus stopwords
  EXPECT_GT(c.vocab.size(), 5000u);
  EXPECT_LT(c.vocab.size(), 14000u);
  EXPECT_TRUE(std::is_sorted(c.vocab.begin(), c.vocab.end()));
  EXPECT_TRUE(std::find(c.vocab.begin(), c.vocab.end(), "the") == c.vocab.end());
  EXPECT_TRUE(std::find(c.vocab.begin(), c.vocab.end(), "jury") != c.vocab.end());
  auto x = c.counts.dense();
  auto df = (x > 0).sum(0);
  EXPECT_GE(df.min().item<int64_t>(), 5);
  EXPECT_LE(df.max().item<int64_t>(), 250);
  EXPECT_GT(x.sum(1).min().item<float>(), 0.0f);
  EXPECT_GT(x.sum().item<double>(), 2e5);
}

// The in-memory CSR sources (counting sort) and the .npy source (dense scan) build the same
// coordinate batches, entry for entry, in the column-block order the loss kernels rely on —
// including a last block narrower than eight columns, and rows that repeat nothing.
TEST(TopicCounts, CsrAndDenseScanBuildTheSameBatches) {
  torch::manual_seed(4);
  auto x = torch::randint(0, 4, {23, 37}).to(torch::kFloat) * (torch::rand({23, 37}) < 0.3).to(torch::kFloat);
  x.select(1, 36).fill_(2);  // the narrow last block is never empty
  auto dir = tt::test::temp_dir("counts");
  tt::write_npy(dir / "X.npy", x);
  tt::topic::CountsDataset mem(x);
  tt::topic::NpyDataset disk((dir / "X.npy").string());
  auto idx = torch::tensor({5, 0, 22, 9, 13}, torch::kLong);
  auto a = mem.get(idx), b = disk.get(idx);
  for (const char* key : {"rows", "cols", "vals"}) EXPECT_TRUE(torch::equal(a.at(key), b.at(key))) << key;
  EXPECT_TRUE(torch::equal(tt::topic::dense_counts(a, 37), x.index_select(0, idx)));
  auto cols = a.at("cols");
  auto block = torch::div(cols, 8, "floor");
  EXPECT_TRUE((block.slice(0, 1) >= block.slice(0, 0, -1)).all().item<bool>()) << "ordered by column block";
  EXPECT_TRUE(torch::equal(mem.counts(), x));
}
