// The robustness suite (ctest label "robustness"): bad inputs of every kind, each run through
// tt-run (or tt-data) as a user would, each asserting the exit code and the key words of the
// message: which file or option, and what is wrong. Classes: pipelines and overrides, the
// command line, data files (.npy, CSV, Matrix Market, text, tokenizers), checkpoints and run
// directories, weights files (safetensors, state dicts), plugins, full disks and files that
// change under a run.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <torch/serialize.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "test_support.h"
#include "tt/npy.h"

namespace fs = std::filesystem;
using tt::test::read_file;
using tt::test::temp_dir;
using tt::test::tt_run_bin;

namespace {

void write(const fs::path& f, const std::string& text) { std::ofstream(f, std::ios::binary) << text; }

std::string topic_pipeline(const fs::path& d, const std::string& data, const std::string& extra = "") {
  return "name: r\nseed: 0\ndata: " + data + "\nmodel: {name: topic, k: 3}\n" +
         "trainer: {batch_size: 4, max_steps: 2, threads: 1, progress: off}\noutput: {dir: " + d.string() +
         ", plots: false}\n" + extra;
}
std::string synthetic(const fs::path& d, const std::string& extra = "") {
  return topic_pipeline(d, "{name: topic-synthetic, n_docs: 32, n_terms: 20, k: 3, avg_doc_length: 20}", extra);
}
std::string lm_pipeline(const fs::path& d, const std::string& data, const std::string& extra = "") {
  return "name: r\nseed: 0\ndata: " + data + "\nmodel: {name: transformer, vocab: 256, d_model: 16, n_layers: 1, " +
         "n_heads: 2, sample_tokens: 0}\ntrainer: {batch_size: 2, max_steps: 1, threads: 1, progress: off}\n" +
         "output: {dir: " + d.string() + ", plots: false}\n" + extra;
}
std::string tabular_pipeline(const fs::path& d, const fs::path& csv, const std::string& extra = "") {
  return "name: r\nseed: 0\ndata: {name: tabular-csv, path: " + csv.string() +
         "}\nmodel: {name: tabular-icl, size: small}\ntrainer: {batch_size: 2, max_steps: 1, threads: 1, "
         "progress: off}\noutput: {dir: " +
         d.string() + ", plots: false}\n" + extra;
}
void npy_bytes(const fs::path& f, const std::string& header_dict, const std::string& payload) {
  std::string h = header_dict;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  write(f, out + h + payload);
}
// A safetensors file: the 8-byte header length (`claimed`, or the header's own), the header's
// JSON padded to 8 bytes, and `data` bytes of data section.
void safetensors_bytes(const fs::path& f, std::string header, size_t data, uint64_t claimed = 0) {
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t n = claimed ? claimed : header.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>(n >> (8 * i));
  write(f, out + header + std::string(data, '\x01'));
}
// The topic model of synthetic() (L_raw 32 x 3, F_raw 3 x 20) as safetensors entries.
const char* kTopicL = R"("L_raw": {"dtype": "F32", "shape": [32, 3], "data_offsets": [0, 384]})";
const char* kTopicF = R"("F_raw": {"dtype": "F32", "shape": [3, 20], "data_offsets": [384, 624]})";
std::string floats(int n, float v = 1.0f) { return std::string(reinterpret_cast<const char*>(std::vector<float>(n, v).data()), n * 4); }

struct Case {
  std::string name;
  // Writes the inputs into `d` and returns tt-run's arguments (or a whole command when it starts
  // with "!"); the pipeline is d/p.yaml when written.
  std::function<std::string(const fs::path& d)> setup;
  int rc;
  std::vector<std::string> words;  // each must appear in the output; "{d}" is the case's directory
  bool sentencepiece = false;       // opens a SentencePiece model: skipped where the build cannot
};

// A build with AddressSanitizer cannot open SentencePiece (models/transformer/src/tokenizer.h,
// sentencepiece_unavailable, detects it the same way).
#if defined(__SANITIZE_ADDRESS__)
#define TT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TT_TEST_ASAN 1
#endif
#endif

// gtest names a case by this (ctest's listing too), not by its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string P(const fs::path& d, const std::string& yaml, const std::string& args = "") {
  write(d / "p.yaml", yaml);
  return (d / "p.yaml").string() + " --run-dir " + (d / "run").string() + (args.empty() ? "" : " " + args);
}

std::vector<Case> cases() {
  std::vector<Case> c;
  // --- The pipeline file ----------------------------------------------------------------------
  c.push_back({"PipelineMissing", [](auto d) { return (d / "nope.yaml").string(); }, 2, {"nope.yaml", "pipeline file not found"}});
  c.push_back({"PipelineEmpty", [](auto d) { return P(d, ""); }, 2, {"p.yaml", "the pipeline is empty"}});
  c.push_back({"PipelineNotAMap", [](auto d) { return P(d, "- a\n- b\n"); }, 2, {"p.yaml", "map"}});
  c.push_back({"PipelineBadYaml", [](auto d) { return P(d, "name: [unclosed\n"); }, 2, {"p.yaml", "YAML"}});
  c.push_back({"PipelineTabIndent", [](auto d) { return P(d, "name: r\ntrainer:\n\tmax_steps: 2\n"); }, 2, {"p.yaml", "line 3 is indented with a tab"}});
  c.push_back({"PipelineDuplicateTopKey", [](auto d) { return P(d, synthetic(d) + "seed: 4\n"); }, 2, {"p.yaml", "seed"}});
  c.push_back({"PipelineDuplicateNestedKey",
               [](auto d) { return P(d, topic_pipeline(d, "{name: topic-synthetic, k: 3, k: 4}")); }, 2, {"p.yaml", "'k'"}});
  c.push_back({"PipelineUnknownTopKey", [](auto d) { return P(d, synthetic(d) + "traner: {}\n"); }, 2, {"traner", "trainer"}});
  c.push_back({"PipelineUnknownTrainerKey",
               [](auto d) { return P(d, synthetic(d), "trainer.max_step=3"); }, 2, {"max_step", "max_steps"}});
  c.push_back({"PipelineUnknownModel",
               [](auto d) {
                 auto y = synthetic(d);
                 y.replace(y.find("name: topic,"), 12, "name: topik,");
                 return P(d, y);
               },
               2, {"topik", "topic"}});
  c.push_back({"PipelineUnknownDataset",
               [](auto d) { return P(d, topic_pipeline(d, "{name: topic-numpy, path: x.npy}")); }, 2, {"topic-numpy", "topic-npy"}});
  c.push_back({"PipelineUnknownPlugin", [](auto d) { return P(d, synthetic(d) + "plugins: [chekpoint]\n"); }, 2,
               {"unknown plugin 'chekpoint'", "did you mean 'checkpoint'"}});
  c.push_back({"PipelinePluginTwice",
               [](auto d) { return P(d, lm_pipeline(d, "{name: text, train: " + (d / "t.txt").string() + "}") +
                                      "plugins: [checkpoint, {name: checkpoint, policy: all}]\n"); },
               2, {"checkpoint", "again"}});
  c.push_back({"PipelinePluginsNotAList", [](auto d) { return P(d, synthetic(d) + "plugins: {checkpoint: 1}\n"); }, 2, {"plugins must be a list"}});
  c.push_back({"PipelineWrongTypeInt", [](auto d) { return P(d, synthetic(d), "trainer.batch_size=many"); }, 2, {"batch_size", "integer"}});
  c.push_back({"PipelineWrongTypeBool", [](auto d) { return P(d, synthetic(d), "trainer.shuffle=maybe"); }, 2, {"trainer.shuffle must be a boolean", "'maybe'"}});
  c.push_back({"PipelineNegativeThreads", [](auto d) { return P(d, synthetic(d), "trainer.threads=-3"); }, 2, {"threads", "[0, 1024]"}});
  c.push_back({"PipelineHugeThreads", [](auto d) { return P(d, synthetic(d), "trainer.threads=100000"); }, 2, {"threads", "100000"}});
  c.push_back({"PipelineNegativeGradClip", [](auto d) { return P(d, synthetic(d), "trainer.grad_clip=-1"); }, 2, {"trainer.grad_clip must be > 0, got -1"}});
  c.push_back({"PipelineNegativeCheckpointEvery",
               [](auto d) { return P(d, synthetic(d), "trainer.checkpoint_every=-1"); }, 2,
               {"trainer.checkpoint_every must be >= 0, got -1"}});
  c.push_back({"PipelineNegativeKeepCheckpoints",
               [](auto d) { return P(d, synthetic(d), "trainer.keep_checkpoints=-2"); }, 2,
               {"trainer.keep_checkpoints must be >= 0, got -2"}});
  c.push_back({"PipelineZeroBatch", [](auto d) { return P(d, synthetic(d), "trainer.batch_size=0"); }, 2, {"trainer.batch_size must be >= 1, got 0"}});
  c.push_back({"PipelineNegativeLr", [](auto d) { return P(d, synthetic(d), "optimizer.lr=-1"); }, 2, {"lr", ">= 0"}});
  c.push_back({"PipelineBadChoice", [](auto d) { return P(d, synthetic(d), "trainer.on_nan=explode"); }, 2, {"on_nan", "explode"}});
  c.push_back({"PipelineBadBytes", [](auto d) { return P(d, synthetic(d), "trainer.memory_cap=12QB"); }, 2, {"memory_cap", "12QB"}});
  c.push_back({"PipelineTopicKTooLarge",
               [](auto d) { auto y = synthetic(d); y.replace(y.find("k: 3}\ntrainer"), 5, "k: 21}"); return P(d, y); }, 2,
               {"model (topic).k", "must not exceed the number of terms (20)"}});
  // --- Overrides and the command line ------------------------------------------------------------
  c.push_back({"OverrideEmptyValue", [](auto d) { return P(d, synthetic(d), "trainer.batch_size="); }, 2, {"command line", "batch_size"}});
  c.push_back({"OverrideNoKey", [](auto d) { return P(d, synthetic(d), "=3"); }, 2, {"'=3'", "an override is key=value"}});
  c.push_back({"OverrideBadYamlValue",
               [](auto d) { return P(d, synthetic(d), "'plugins=[{name: amp'"); }, 2, {"command line", "plugins"}});
  c.push_back({"OverrideDuplicateKeyInValue",
               [](auto d) { return P(d, synthetic(d), "'data={name: topic-synthetic, k: 3, k: 4}'"); }, 2, {"command line", "'k'"}});
  c.push_back({"CliUnknownFlag", [](auto d) { return P(d, synthetic(d), "--frobnicate"); }, 2, {"frobnicate"}});
  c.push_back({"CliResumeAndOverwrite",
               [](auto d) { return "--resume " + (d / "run").string() + " --overwrite"; }, 2, {"--overwrite", "--resume"}});
  c.push_back({"CliResumeMissingDir", [](auto d) { return "--resume " + (d / "nothing").string(); }, 2, {"nothing: no such directory"}});
  c.push_back({"CliBudgetNotASize", [](auto d) { return P(d, synthetic(d), "--budget lots"); }, 2, {"--budget", "lots"}});
  c.push_back({"CliBudgetWithMemoryCap",
               [](auto d) { return P(d, synthetic(d), "--budget 1GiB trainer.memory_cap=1GiB"); }, 2,
               {"memory_cap is set beside --budget", "remove memory_cap"}});
  // --- .npy files -------------------------------------------------------------------------------
  auto npy_case = [](std::string dict, std::string payload) {
    return [dict, payload](const fs::path& d) {
      npy_bytes(d / "X.npy", dict, payload);
      return P(d, topic_pipeline(d, "{name: topic-npy, path: " + (d / "X.npy").string() + "}"));
    };
  };
  c.push_back({"NpyMissing", [](auto d) { return P(d, topic_pipeline(d, "{name: topic-npy, path: " + (d / "X.npy").string() + "}")); },
               2, {"X.npy", "names no such file"}});
  c.push_back({"NpyNotNpy",
               [](auto d) {
                 write(d / "X.npy", "col1,col2\n1,2\n");
                 return P(d, topic_pipeline(d, "{name: topic-npy, path: " + (d / "X.npy").string() + "}"));
               },
               2, {"X.npy", "not a .npy file"}});
  c.push_back({"NpyTruncatedHeader",
               [](auto d) {
                 write(d / "X.npy", std::string("\x93NUMPY\x01\x00\x76\x00{'descr'", 17));
                 return P(d, topic_pipeline(d, "{name: topic-npy, path: " + (d / "X.npy").string() + "}"));
               },
               2, {"X.npy", "cut off inside its header"}});
  c.push_back({"NpyDataShorterThanShape",
               npy_case("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 5), }", floats(10)), 2,
               {"X.npy", "file is truncated"}});
  c.push_back({"NpyOneDimensional", npy_case("{'descr': '<f4', 'fortran_order': False, 'shape': (40,), }", floats(40)), 2,
               {"X.npy", "expected a 2-D documents x terms matrix"}});
  c.push_back({"NpyFortranOrder", npy_case("{'descr': '<f4', 'fortran_order': True, 'shape': (8, 5), }", floats(40)), 2,
               {"X.npy", "Fortran", "C order"}});
  c.push_back({"NpyStringDtype", npy_case("{'descr': '<U3', 'fortran_order': False, 'shape': (8, 5), }", std::string(480, 'a')),
               2, {"X.npy", "<U3"}});
  c.push_back({"NpyNegativeCounts",
               npy_case("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 5), }", floats(40, -1.0f)), 2, {"X.npy", "negative"}});
  c.push_back({"NpyNaN", npy_case("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 5), }", floats(40, NAN)), 2,
               {"X.npy", "not a finite number"}});
  c.push_back({"NpyHugeShape",
               npy_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1125899906842624, 1125899906842624), }", floats(4)),
               2, {"X.npy", "more data than any file holds"}});
  // --- CSV tables -------------------------------------------------------------------------------
  auto csv_case = [](std::string text) {
    return [text](const fs::path& d) {
      write(d / "t.csv", text);
      return P(d, tabular_pipeline(d, d / "t.csv"));
    };
  };
  c.push_back({"CsvMissing", [](auto d) { return P(d, tabular_pipeline(d, d / "t.csv")); }, 2, {"t.csv", "cannot open"}});
  c.push_back({"CsvEmpty", csv_case(""), 2, {"t.csv is empty"}});
  c.push_back({"CsvHeaderOnly", csv_case("a,b,label\n"), 2, {"t.csv has a header but no data rows"}});
  c.push_back({"CsvRaggedRow", csv_case("a,b,label\n1,2,x\n3,y\n4,5,y\n6,7,x\n"), 2, {"t.csv:3", "2 fields", "header has 3"}});
  // a column of text is categories by default; with data.categorical: none it is refused
  c.push_back({"CsvTextFeature", [](const fs::path& d) {
                 write(d / "t.csv", "a,b,label\n1,2,x\n3,hello,y\n4,5,y\n6,7,x\n");
                 return P(d, tabular_pipeline(d, d / "t.csv"), "data.categorical=none");
               }, 2, {"t.csv", "hello", "data.categorical"}});
  c.push_back({"CsvMissingValue", csv_case("a,b,label\n1,2,x\n3,,y\n4,5,y\n6,7,x\n1,2,x\n3,4,y\n"), 2, {"t.csv", "impute"}});
  c.push_back({"CsvOneClass", csv_case("a,b,label\n1,2,x\n3,4,x\n4,5,x\n6,7,x\n"), 2, {"t.csv", "class"}});
  c.push_back({"CsvClassWithOneRow", csv_case("a,b,label\n1,2,x\n3,4,y\n4,5,x\n6,7,x\n5,5,x\n"), 2, {"t.csv", "'y'"}});
  c.push_back({"CsvBinary", csv_case(std::string("a,b\0\x01\x02", 7) + "\n"), 2, {"t.csv", "is not UTF-8 text"}});
  c.push_back({"CsvFeatureBeyondFloat", csv_case("a,b,label\n1,2,x\n3,1e40,y\n4,5,y\n6,7,x\n1,2,x\n3,4,y\n"), 2, {"t.csv", "1e40"}});
  // --- Matrix Market ----------------------------------------------------------------------------
  auto mtx_case = [](std::string text) {
    return [text](const fs::path& d) {
      write(d / "X.mtx", text);
      return P(d, topic_pipeline(d, "{name: topic-mtx, path: " + (d / "X.mtx").string() + "}"));
    };
  };
  c.push_back({"MtxNoBanner", mtx_case("3 3 1\n1 1 1\n"), 2, {"X.mtx", "not a Matrix Market file"}});
  c.push_back({"MtxArrayFormat", mtx_case("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n"), 2, {"X.mtx", "coordinate"}});
  c.push_back({"MtxEntryOutOfRange",
               mtx_case("%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 1 3\n5 1 2\n"), 2,
               {"X.mtx", "entry (5, 1) is outside the 2 x 2 matrix"}});
  c.push_back({"MtxFewerEntriesThanSaid",
               mtx_case("%%MatrixMarket matrix coordinate integer general\n2 2 3\n1 1 3\n2 2 2\n"), 2,
               {"X.mtx", "truncated", "announces 3 entries, it has 2"}});
  c.push_back({"MtxSizeBeyondTheFile",
               mtx_case("%%MatrixMarket matrix coordinate integer general\n100000 100000 99999999999\n1 1 1\n"), 2,
               {"X.mtx", "more than the file's 81 bytes can hold"}});
  c.push_back({"MtxNegativeCount",
               mtx_case("%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 1 -3\n2 2 2\n"), 2,
               {"X.mtx", "negative count"}});
  // --- Text and tokenizers ----------------------------------------------------------------------
  auto text_case = [](std::string text, std::string data_extra = "") {
    return [text, data_extra](const fs::path& d) {
      write(d / "t.txt", text);
      return P(d, lm_pipeline(d, "{name: text, train: " + (d / "t.txt").string() + ", seq_len: 8" + data_extra + "}"));
    };
  };
  c.push_back({"TextMissing",
               [](auto d) { return P(d, lm_pipeline(d, "{name: text, train: " + (d / "t.txt").string() + "}")); }, 2,
               {"no such file", "t.txt"}});
  c.push_back({"TextEmpty", text_case(""), 2, {"t.txt is empty"}});
  c.push_back({"TextBinary", text_case(std::string("\x7f" "ELF\x02\x01\x01\0\0\0", 10) + std::string(200, '\0')), 2,
               {"t.txt", "NUL byte", "binary: true"}});
  c.push_back({"TextBinaryWithSentencePiece", text_case(std::string(300, 'a'), ", binary: true, tokenizer: sp.model"), 2,
               {"binary", "needs tokenizer: bytes"}});
  c.push_back({"TextInvalidUtf8", text_case(std::string(300, '\xff')), 2, {"t.txt", "UTF-8"}});
  c.push_back({"TextShorterThanAWindow", text_case("abc"), 2, {"t.txt", "seq_len 8 needs at least 9"}});
  c.push_back({"TokenizerModelMissing", text_case(std::string(300, 'a'), ", tokenizer: /nonexistent/sp.model"), 2,
               {"sp.model", "not found", "tt-data tokenizer"}});
  c.push_back({"TokenizerModelGarbage",
               [](auto d) {
                 write(d / "sp.model", "not a sentencepiece model");
                 write(d / "t.txt", std::string(300, 'a'));
                 return P(d, lm_pipeline(d, "{name: text, train: " + (d / "t.txt").string() + ", tokenizer: " +
                                                (d / "sp.model").string() + "}"));
               },
               2, {"sp.model", "not a SentencePiece model"}, /*sentencepiece=*/true});
  c.push_back({"TopicTextBinary",
               [](auto d) {
                 write(d / "c.txt", std::string("ab\0cd\0", 6) + std::string(100, '\x01'));
                 return P(d, topic_pipeline(d, "{name: topic-text, path: " + (d / "c.txt").string() + "}"));
               },
               2, {"c.txt is not a text file"}});
  // --- Checkpoints, runs, init_from -------------------------------------------------------------
  c.push_back({"InitFromMissing",
               [](auto d) { auto y = synthetic(d); y.replace(y.find("k: 3}\ntrainer"), 5, "k: 3, init_from: " + (d / "none").string() + "}"); return P(d, y); },
               2, {"init_from", "none' does not exist"}});
  c.push_back({"InitFromGarbage",
               [](auto d) {
                 write(d / "w.pt", std::string(1000, 'z'));
                 auto y = synthetic(d);
                 y.replace(y.find("k: 3}\ntrainer"), 5, "k: 3, init_from: " + (d / "w.pt").string() + "}");
                 return P(d, y);
               },
               2, {"w.pt", "init_from", "not a zip archive"}});
  c.push_back({"ResumeNotARun",
               [](auto d) {
                 fs::create_directories(d / "plain");
                 write(d / "plain" / "notes.txt", "hello");
                 return "--resume " + (d / "plain").string();
               },
               2, {"plain is not a tt run directory"}});
  c.push_back({"RunDirHoldsARun",
               [](auto d) {
                 const std::string args = P(d, synthetic(d));
                 tt::test::run(tt_run_bin() + " -q " + args);
                 return args;
               },
               2, {"already holds a run", "--resume", "--overwrite"}});
  c.push_back({"ResumeWithEveryCheckpointDamaged",
               [](auto d) {
                 const std::string args = P(d, synthetic(d));
                 tt::test::run(tt_run_bin() + " -q " + args);
                 for (const auto& e : fs::directory_iterator(d / "run" / "checkpoints")) write(e.path(), "damaged");
                 return "--resume " + (d / "run").string() + " trainer.max_steps=4";
               },
               2, {"no readable checkpoint", "--overwrite"}});
  // An archive whose records fail their CRC-32; LibTorch 1.13 parses it and crashes in its
  // TorchScript type parser (found by tests/fuzz/checkpoint). tt checks the records first.
  c.push_back({"ResumeWithACheckpointThatCrashesLibTorch",
               [](auto d) {
                 const std::string args = P(d, synthetic(d));
                 tt::test::run(tt_run_bin() + " -q " + args);
                 for (const auto& e : fs::directory_iterator(d / "run" / "checkpoints"))
                   fs::copy_file(fs::path(TT_SOURCE_DIR) / "tests/fuzz/regressions/checkpoint/libtorch_type_parser_segv.pt",
                                 e.path(), fs::copy_options::overwrite_existing);
                 return "--resume " + (d / "run").string() + " trainer.max_steps=4";
               },
               2, {"no readable checkpoint", "fails its CRC-32 check"}});
  c.push_back({"InitFromACheckpointThatCrashesLibTorch",
               [](auto d) {
                 auto y = synthetic(d);
                 y.replace(y.find("k: 3}\ntrainer"), 5,
                           std::string("k: 3, init_from: ") + TT_SOURCE_DIR +
                               "/tests/fuzz/regressions/checkpoint/libtorch_type_parser_segv.pt}");
                 return P(d, y);
               },
               2, {"init_from", "fails its CRC-32 check"}});
  // --- Weights files for model.init_from and tt-run --export -------------------------------------
  auto init_from = [](const fs::path& d, const fs::path& file) {
    auto y = synthetic(d);
    y.replace(y.find("k: 3}\ntrainer"), 5, "k: 3, init_from: " + file.string() + "}");
    return P(d, y);
  };
  auto st_case = [init_from](std::string header, size_t data, uint64_t claimed = 0) {
    return [=](const fs::path& d) {
      safetensors_bytes(d / "w.safetensors", header, data, claimed);
      return init_from(d, d / "w.safetensors");
    };
  };
  const std::string L = kTopicL, F = kTopicF;
  c.push_back({"SafetensorsOffsetsPastTheEnd", st_case("{" + L + ", " + F + "}", 600), 2,
               {"w.safetensors", "init_from", "'F_raw'", "[384, 624] run past the end of the data section (600 bytes)"}});
  c.push_back({"SafetensorsOverlappingTensors",
               st_case("{" + L + R"(, "F_raw": {"dtype": "F32", "shape": [3, 20], "data_offsets": [380, 620]}})", 620), 2,
               {"w.safetensors", "'L_raw' and 'F_raw' overlap", "the header lies"}});
  c.push_back({"SafetensorsGapBetweenTensors",
               st_case("{" + L + R"(, "F_raw": {"dtype": "F32", "shape": [3, 20], "data_offsets": [400, 640]}})", 640), 2,
               {"w.safetensors", "16 bytes of the data section before tensor 'F_raw' belong to no tensor"}});
  c.push_back({"SafetensorsBytesAfterTheLastTensor", st_case("{" + L + ", " + F + "}", 700), 2,
               {"w.safetensors", "the last 76 bytes of the data section belong to no tensor"}});
  c.push_back({"SafetensorsShapeNotItsByteRange",
               st_case(R"({"L_raw": {"dtype": "F32", "shape": [32, 4], "data_offsets": [0, 384]}, )" + F + "}", 624), 2,
               {"w.safetensors", "'L_raw'", "shape [32, 4] of F32 needs 512 bytes but data_offsets [0, 384] hold 384"}});
  c.push_back({"SafetensorsUnknownDtype",
               st_case(R"({"L_raw": {"dtype": "F7", "shape": [32, 3], "data_offsets": [0, 384]}, )" + F + "}", 624), 2,
               {"w.safetensors", "dtype 'F7'", "F32"}});
  c.push_back({"SafetensorsHeaderLongerThanTheFile", st_case("{" + L + ", " + F + "}", 624, 1 << 20), 2,
               {"w.safetensors", "header length (1048576 bytes) is larger than the file"}});
  c.push_back({"SafetensorsHeaderNotJson", st_case(R"({"L_raw": {"dtype": "F32", )", 624), 2,
               {"w.safetensors", "not valid JSON", "safetensors"}});
  c.push_back({"SafetensorsTensorTheModelLacks",
               st_case("{" + L + ", " + F + R"(, "extra": {"dtype": "F32", "shape": [1], "data_offsets": [624, 628]}})", 628), 2,
               {"w.safetensors", "init_from", "does not fit this model", "unexpected (1): extra"}});
  c.push_back({"SafetensorsTensorMissing", st_case("{" + L + "}", 384), 2,
               {"w.safetensors", "does not fit this model", "missing (1): F_raw"}});
  c.push_back({"SafetensorsShapeNotTheModels",
               st_case(R"({"L_raw": {"dtype": "F32", "shape": [3, 32], "data_offsets": [0, 384]}, )" + F + "}", 624), 2,
               {"w.safetensors", "mis-shaped (1): L_raw is [3, 32] there but [32, 3] here"}});
  c.push_back({"SafetensorsShorterThanItsLength",
               [init_from](auto d) {
                 write(d / "w.safetensors", "abc");
                 return init_from(d, d / "w.safetensors");
               },
               2, {"w.safetensors", "not a safetensors file: 3 bytes"}});
  auto pickled = [init_from](std::function<c10::IValue()> value) {
    return [=](const fs::path& d) {
      const auto bytes = torch::pickle_save(value());
      write(d / "sd.pt", std::string(bytes.begin(), bytes.end()));
      return init_from(d, d / "sd.pt");
    };
  };
  c.push_back({"StateDictIsAList", pickled([] {
                 c10::List<at::Tensor> l;
                 l.push_back(at::ones({2}));
                 return c10::IValue(l);
               }),
               2, {"sd.pt", "init_from", "holds a GenericList, not a dict of name -> tensor", "torch.save("}});
  c.push_back({"StateDictValueNotATensor", pickled([] {
                 c10::impl::GenericDict m(c10::StringType::get(), c10::AnyType::get());
                 m.insert("L_raw", int64_t{7});
                 return c10::IValue(m);
               }),
               2, {"sd.pt", "'L_raw' holds a Int, not a tensor"}});
  c.push_back({"StateDictOfTheWrongModel", pickled([] {
                 c10::Dict<std::string, at::Tensor> m;
                 m.insert("L_raw", at::zeros({32, 3}));
                 m.insert("F_raw", at::zeros({3, 21}));
                 return c10::IValue(m);
               }),
               2, {"sd.pt", "mis-shaped (1): F_raw is [3, 21] there but [3, 20] here"}});
  c.push_back({"ExportOfAFileThatIsNoCheckpoint",
               [](auto d) {
                 write(d / "x.pt", std::string(100, 'z'));
                 return "--export pt " + (d / "x.pt").string();
               },
               2, {"x.pt", "not a tt checkpoint"}});
  c.push_back({"ExportOfARunWithoutCheckpoints",
               [](auto d) {
                 fs::create_directories(d / "empty");
                 return "--export safetensors " + (d / "empty").string();
               },
               2, {"empty has no checkpoints"}});
  c.push_back({"ExportToAPlaceThatCannotBeWritten",
               [](auto d) {
                 const std::string args = P(d, synthetic(d));
                 tt::test::run(tt_run_bin() + " -q " + args);
                 write(d / "file", "a file, not a folder");
                 return "--export safetensors " + (d / "run").string() + " --out " + (d / "file" / "w.safetensors").string();
               },
               6, {"cannot write", "{d}/file/w.safetensors"}});
  c.push_back({"ExportUnknownFormat", [](auto d) { return "--export onnx " + d.string(); }, 2,
               {"unknown weights format 'onnx'", "safetensors", "pt"}});
  // --- Plugins and modules ----------------------------------------------------------------------
  c.push_back({"PluginWithAMissingSymbol",
               [](auto d) { return P(d, synthetic(d) + "plugins: [test-missing-symbol]\n") + "!TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR; },
               3, {"test-missing-symbol", "undefined symbol"}});
  c.push_back({"PluginBuiltForAnotherApi",
               [](auto d) { return P(d, synthetic(d) + "plugins: [test-wrong-api]\n") + "!TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR; },
               3, {"test-wrong-api", "built for tt module API version 999"}});
  c.push_back({"PluginBadOption",
               [](auto d) { return P(d, synthetic(d) + "plugins: [{name: checkpoint, policy: sometimes}]\n"); }, 2,
               {"policy", "sometimes"}});
  c.push_back({"PluginNeedsABlockStack", [](auto d) { return P(d, synthetic(d) + "plugins: [checkpoint]\n"); }, 2,
               {"(checkpoint) acts on a model's block_stack", "model 'topic' has none"}});
  return c;
}

class Robustness : public testing::TestWithParam<Case> {};

TEST_P(Robustness, RefusedWithItsExitCodeAndMessage) {
  const Case& k = GetParam();
#ifdef TT_TEST_ASAN
  if (k.sentencepiece) GTEST_SKIP() << "SentencePiece cannot be opened in a build with AddressSanitizer";
#endif
  const fs::path d = temp_dir("robust-" + k.name);
  std::string args = k.setup(d), env;
  if (const auto bang = args.find('!'); bang != std::string::npos) {
    env = args.substr(bang + 1) + " ";
    args = args.substr(0, bang);
  }
  const auto r = tt::test::run(env + "timeout 120 " + tt_run_bin() + " -q " + args);
  EXPECT_EQ(r.rc, k.rc) << r.output;
  for (std::string w : k.words) {
    if (const auto at = w.find("{d}"); at != std::string::npos) w.replace(at, 3, d.string());
    EXPECT_NE(r.output.find(w), std::string::npos) << "missing '" << w << "' in:\n" << r.output;
  }
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("crashed ("), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << "LibTorch's C++ stack reached the user:\n"
                                                                       << r.output;
}

INSTANTIATE_TEST_SUITE_P(BadInput, Robustness, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) { return i.param.name; });

// A full disk: a small tmpfs (skipped where mounting is not permitted) as the run directory.
TEST(RobustnessDisk, AFullTmpfsStopsTheRunWithAWriteErrorNamingTheFile) {
  const fs::path d = temp_dir("robust-tmpfs");
  const fs::path mnt = d / "small";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=96k") != 0)
    GTEST_SKIP() << "mounting a tmpfs is not permitted here (" << std::strerror(errno) << ")";
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  // A 200 x 300 topic model: its checkpoint (F alone 300 x 3 floats, L 200 x 3, AdamW moments)
  // does not fit beside the rest in 96 KiB.
  write(d / "p.yaml", topic_pipeline(mnt, "{name: topic-synthetic, n_docs: 2000, n_terms: 3000, k: 3, avg_doc_length: 20}"));
  const auto r = tt::test::run("timeout 300 " + tt_run_bin() + " -q " + (d / "p.yaml").string() + " --run-dir " +
                               (mnt / "run").string() + " trainer.checkpoint_every=1");
  EXPECT_EQ(r.rc, 6) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(mnt.string()), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  for (const auto& e : fs::recursive_directory_iterator(mnt)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

}  // namespace
