// tt-data synth-topics, the synthetic generator it shares with topic-synthetic, and tt-run
// end to end on the file sources.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <numeric>

#include "data_test_util.h"
#include "source_synthetic.h"
#include "topic_data.h"
#include "tt/npy.h"
#include "tt/runtime.h"

namespace fs = std::filesystem;
using tt::test::quote;
using tt::test::run;
using tt::test::tt_data_bin;
using tt::test::write_text;

namespace {


tt::test::RunResult synth(const fs::path& out, const std::string& extra, int seed = 7) {
  return run(tt_data_bin() + " synth-topics --n 300 --m 50 --k 4 --avg-doc-length 30 --quiet --seed " +
             std::to_string(seed) + " --out " + quote(out) + " " + extra);
}

// A pipeline for tt-run: `data` is the data section's YAML map.
fs::path write_pipeline(const fs::path& dir, const std::string& data, int64_t k, const std::string& trainer = "") {
  const fs::path p = dir / "pipeline.yaml";
  write_text(p, "name: data-e2e\nseed: 1\ndata: " + data + "\nmodel: {name: topic, k: " + std::to_string(k) +
                    "}\noptimizer: {name: adamw, lr: 0.05, weight_decay: 1.0e-5}\n"
                    "schedule: {name: cosine_warm_restarts, t0_epochs: 2, eta_min: 0.01}\n"
                    "trainer:\n  batch_size: 16\n  threads: 1\n  progress: off\n  epochs: 3\n" +
                    trainer + "output:\n  dir: " + (dir / "runs").string() + "\n  plots: false\n");
  return p;
}

}  // namespace

TEST(Synthetic, DocumentsDependOnlyOnSeedAndIndex) {
  tt::topic::SyntheticCorpus c(40, 30, 3, 20, 11);
  std::vector<float> L(40 * 3), X(40 * 30), l(3), x(30);
  c.documents(0, 40, L.data(), X.data());
  for (int64_t d : {0, 17, 39}) {
    const int64_t len = c.document(d, l.data(), x.data());
    EXPECT_TRUE(std::equal(x.begin(), x.end(), X.begin() + d * 30));
    EXPECT_TRUE(std::equal(l.begin(), l.end(), L.begin() + d * 3));
    EXPECT_EQ(len, static_cast<int64_t>(std::accumulate(x.begin(), x.end(), 0.0f)));
    EXPECT_GE(len, 1);
  }
  // the same document from a corpus with other n
  tt::topic::SyntheticCorpus c2(1000, 30, 3, 20, 11);
  c2.document(17, l.data(), x.data());
  EXPECT_TRUE(std::equal(x.begin(), x.end(), X.begin() + 17 * 30));
  EXPECT_TRUE(torch::equal(c.true_F(), c2.true_F()));
  auto F = c.true_F();
  EXPECT_TRUE(torch::allclose(F.sum(1), torch::ones({3}), 1e-5, 1e-5));
}

TEST(Synthetic, LengthsAndMixturesFollowTheModel) {
  // mean length ~ avg; each document's words follow L_i F (checked in aggregate: the corpus
  // term frequencies are close to mean_i(L_i) F weighted by length)
  tt::topic::SyntheticDataset d(2000, 40, 4, 100, 3);
  auto x = d.counts();
  const double mean_len = x.sum(1).mean().item<double>();
  EXPECT_NEAR(mean_len, 100, 1.5);
  EXPECT_GT(x.sum(1).min().item<float>(), 0);
  auto lengths = x.sum(1, true);
  auto expected = (d.true_L_ * lengths).sum(0).matmul(d.true_F_) / lengths.sum();
  auto observed = x.sum(0) / x.sum();
  EXPECT_LT((expected - observed).abs().max().item<double>(), 0.005);
  EXPECT_TRUE(torch::allclose(d.true_L_.sum(1), torch::ones({2000}), 1e-5, 1e-5));
  // small means (Knuth's sampler) too, and never an empty document
  tt::topic::SyntheticDataset s(3000, 10, 2, 0.5, 3);
  auto len = s.counts().sum(1);
  EXPECT_GE(len.min().item<float>(), 1);
  EXPECT_NEAR(len.mean().item<double>(), 0.5 + std::exp(-0.5), 0.05);  // E[max(1, Poisson(0.5))]
}

TEST(TtData, SynthTopicsWritesConsistentFiles) {
  auto dir = tt::test::temp_dir("ttdata");
  auto r = synth(dir / "out", "--threads 1 --chunk-rows 64");  // 5 chunks, the last partial
  ASSERT_EQ(r.rc, 0) << r.output;
  auto X = tt::read_npy(dir / "out" / "X.npy");
  auto L = tt::read_npy(dir / "out" / "true_L.npy");
  auto F = tt::read_npy(dir / "out" / "true_F.npy");
  EXPECT_EQ(X.sizes(), (std::vector<int64_t>{300, 50}));
  EXPECT_EQ(L.sizes(), (std::vector<int64_t>{300, 4}));
  EXPECT_EQ(F.sizes(), (std::vector<int64_t>{4, 50}));
  EXPECT_EQ(X.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(L.sum(1), torch::ones({300}), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(F.sum(1), torch::ones({4}), 1e-5, 1e-5));
  auto lengths = X.sum(1);
  EXPECT_GE(lengths.min().item<float>(), 1);
  EXPECT_NEAR(lengths.mean().item<double>(), 30, 2);
  EXPECT_TRUE(torch::equal(X, X.round()));
  for (const auto& e : fs::directory_iterator(dir / "out")) EXPECT_EQ(e.path().extension(), ".npy") << e.path();

  // equal to the topic-synthetic dataset with the same seed
  tt::topic::SyntheticDataset same(300, 50, 4, 30, 7);
  EXPECT_TRUE(torch::equal(same.counts(), X));
  EXPECT_TRUE(torch::equal(same.true_L_, L));
  EXPECT_TRUE(torch::equal(same.true_F_, F));
}

TEST(TtData, SameFilesForOneAndTwoThreads) {
  auto dir = tt::test::temp_dir("ttdata");
  auto r1 = synth(dir / "t1", "--threads 1");
  ASSERT_EQ(r1.rc, 0) << r1.output;
  auto r2 = synth(dir / "t2", "--threads 2 --chunk-rows 7");
  ASSERT_EQ(r2.rc, 0) << r2.output;
  for (const char* f : {"X.npy", "true_L.npy", "true_F.npy"})
    EXPECT_TRUE(tt::test::read_file(dir / "t1" / f) == tt::test::read_file(dir / "t2" / f)) << f;
  auto r3 = synth(dir / "t3", "--threads 2", 8);  // another seed, another corpus
  ASSERT_EQ(r3.rc, 0) << r3.output;
  EXPECT_FALSE(tt::test::read_file(dir / "t1" / "X.npy") == tt::test::read_file(dir / "t3" / "X.npy"));
}

// --threads 0 takes OMP_NUM_THREADS (capped at the usable cores); a malformed one is refused
// before the output directory is made.
TEST(TtData, SynthTopicsThreadsFollowOmpNumThreadsAndAMalformedOneWritesNothing) {
  auto dir = tt::test::temp_dir("ttdata");
  const auto with_env = [&](const std::string& env, const std::string& name) {
    return run("env " + env + " " + tt_data_bin() + " synth-topics --n 300 --m 50 --k 4 --avg-doc-length 30 --seed 7 --out " +
               quote(dir / name));
  };
  auto r = with_env("OMP_NUM_THREADS=1", "one");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find(", 1 thread\n"), std::string::npos) << r.output;
  const int cores = tt::usable_cores();
  r = with_env("OMP_NUM_THREADS=" + std::to_string(cores + 5), "many");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find(", " + std::to_string(cores) + " thread"), std::string::npos) << r.output;
  r = with_env("OMP_NUM_THREADS=1,x", "bad");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("OMP_NUM_THREADS='1,x' is not a positive number of threads"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "bad"));
}

TEST(TtData, ProgressAndUsage) {
  auto dir = tt::test::temp_dir("ttdata");
  auto r = run(tt_data_bin() + " synth-topics --n 100 --m 20 --k 3 --out " + quote(dir));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "synth-topics: wrote");
  EXPECT_HAS(r.output, "MB/s");
  EXPECT_HAS(r.output, "name: topic-npy");
  r = run(tt_data_bin() + " --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_HAS(r.output, "synth-topics");
  r = run(tt_data_bin());
  EXPECT_EQ(r.rc, 2);
  r = run(tt_data_bin() + " synth-topics --n 10");
  EXPECT_EQ(r.rc, 2);
  EXPECT_HAS(r.output, "tt-data synth-topics: error: --out is required (tt-data synth-topics --help lists the options)");
}

TEST(TtData, RefusesBadArguments) {
  auto dir = tt::test::temp_dir("ttdata");
  const auto bad = [&](const std::string& args, const std::string& message) {
    auto r = run(tt_data_bin() + " synth-topics --quiet " + args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.output;
    EXPECT_HAS(r.output, message);
  };
  const std::string out = " --out " + quote(dir / "o");
  bad("--n 10 --m 20 --k 1" + out, "--k (topics) must be at least 2, got 1");
  bad("--n 10 --m 20 --k 21" + out, "--k (21 topics) must not exceed --m (20 terms)");
  bad("--n 0 --m 20 --k 2" + out, "--n (documents) must be at least 1, got 0");
  bad("--n 10 --m 20 --k 2 --avg-doc-length 0" + out, "--avg-doc-length must be positive");
  bad("--n 10 --m 20 --k 2 --avg-doc-length -3" + out, "--avg-doc-length must be positive");
  write_text(dir / "file", "x");
  bad("--n 10 --m 20 --k 2 --out " + quote(dir / "file" / "sub"), "cannot create the output directory");
  bad("--n 10 --m 20 --k 2 --out " + quote(dir / "file"), "exists and is not a directory");
  bad("--n 100000000 --m 100000000 --k 2" + out, "free; lower --n or --m");
  bad("--n 10000000000 --m 1000000000 --k 2" + out, "--n x --m (10000000000 x 1000000000) is too large");
  EXPECT_FALSE(fs::exists(dir / "o" / "X.npy"));
}

TEST(EndToEnd, TtRunTrainsOnTopicNpy) {
  auto dir = tt::test::temp_dir("e2e");
  auto r = synth(dir / "data", "");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto pipe = write_pipeline(dir,
                             "{name: topic-npy, path: " + (dir / "data" / "X.npy").string() +
                                 ", true_F: " + (dir / "data" / "true_F.npy").string() + "}",
                             4);
  r = run(tt::test::tt_run_bin() + " -q " + quote(pipe) + " --run-dir " + quote(dir / "run"));
  ASSERT_EQ(r.rc, 0) << r.output;
  auto s = tt::test::summary_of(dir / "run");
  EXPECT_EQ(s["steps"], 3 * 19);
  EXPECT_LT(s["final_epoch_loss"].get<double>(), s["first_epoch_loss"].get<double>());
  EXPECT_EQ(tt::read_npy(dir / "run" / "L.npy").sizes(), (std::vector<int64_t>{300, 4}));
  EXPECT_HAS(tt::test::read_file(dir / "run" / "pipeline.yaml"), "topic-npy");
}

TEST(EndToEnd, TtRunStopsAtABadRowNamingFileAndDocument) {
  auto dir = tt::test::temp_dir("e2e");
  auto x = torch::ones({40, 10});
  x[23] = 0;
  tt::write_npy(dir / "X.npy", x);
  auto pipe = write_pipeline(dir, "{name: topic-npy, path: " + (dir / "X.npy").string() + "}", 2);
  auto r = run(tt::test::tt_run_bin() + " -q " + quote(pipe) + " --run-dir " + quote(dir / "run"));
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.output, "X.npy: document 23 (row 23) has no words; remove empty rows");
}

TEST(EndToEnd, TtRunTrainsOnTopicText) {
  auto dir = tt::test::temp_dir("e2e");
  std::string corpus;
  const char* topics[2][6] = {{"stock", "market", "price", "trade", "bank", "money"},
                              {"team", "match", "goal", "player", "coach", "season"}};
  for (int d = 0; d < 60; ++d) {
    for (int w = 0; w < 12; ++w) corpus += std::string(topics[d % 2][(d * 7 + w * 5) % 6]) + " ";
    corpus += "the and\n";
  }
  write_text(dir / "corpus.txt", corpus);
  auto pipe = write_pipeline(
      dir, "{name: topic-text, path: " + (dir / "corpus.txt").string() + ", stopwords: true, batch_format: dense}", 2);
  auto r = run(tt::test::tt_run_bin() + " -q " + quote(pipe) + " --run-dir " + quote(dir / "run"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(tt::read_npy(dir / "run" / "F.npy").sizes(), (std::vector<int64_t>{2, 12}));
  EXPECT_LT(tt::test::summary_of(dir / "run")["final_epoch_loss"].get<double>(),
            tt::test::summary_of(dir / "run")["first_epoch_loss"].get<double>());

  // sparse batches (the default): the topic model reads rows/cols/vals and learns the same way
  pipe = write_pipeline(dir, "{name: topic-text, path: " + (dir / "corpus.txt").string() + ", stopwords: true}", 2);
  r = run(tt::test::tt_run_bin() + " -q " + quote(pipe) + " --run-dir " + quote(dir / "run-sparse"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(tt::read_npy(dir / "run-sparse" / "F.npy").sizes(), (std::vector<int64_t>{2, 12}));
  EXPECT_LT(tt::test::summary_of(dir / "run-sparse")["final_epoch_loss"].get<double>(),
            tt::test::summary_of(dir / "run-sparse")["first_epoch_loss"].get<double>());
}
