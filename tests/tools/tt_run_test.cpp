// tt-run as a user runs it: exit codes, dry-run, overrides, --list, crash-safe checkpoints.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/compat.h"
#include "tt/options.h"
#include "tt/registry.h"
#include "tt/runtime.h"

namespace fs = std::filesystem;
using tt::test::quote;
using tt::test::run;

namespace {
std::string tt_run() { return tt::test::tt_run_bin(); }

fs::path write_pipeline(const fs::path& dir, const std::string& yaml) {
  fs::path f = dir / "pipeline.yaml";
  std::ofstream(f) << yaml;
  return f;
}
}  // namespace

TEST(TtRun, QuickstartConfigRunsAndPrintsASummary) {
  auto dir = tt::test::temp_dir("cli");
  auto r = run("cd " + tt::test::source_dir() + " && " + tt_run() + " configs/quickstart.yaml trainer.epochs=2 " +
               "--run-dir " + quote(dir / "run"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("== quickstart finished"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak tensors"), std::string::npos);
  auto s = tt::test::summary_of(dir / "run");
  EXPECT_EQ(s["steps"], 126);
  EXPECT_LT(s["final_epoch_loss"].get<double>(), s["first_epoch_loss"].get<double>());
  EXPECT_TRUE(fs::exists(dir / "run" / "L.npy"));
  EXPECT_TRUE(fs::exists(dir / "run" / "F.npy"));
  // what started it, as typed, and the versions (tt-run --version's)
  EXPECT_EQ(s["command"], nlohmann::json({tt_run(), "configs/quickstart.yaml", "trainer.epochs=2", "--run-dir",
                                          (dir / "run").string()}));
  EXPECT_EQ(s["machine"]["tt"], tt::tt_version());
  EXPECT_EQ(s["machine"]["libtorch"], TT_TORCH_VERSION_STRING);
  // the load around it (Linux: always readable), what the printed summary's warning of other
  // processes' work is taken from
  EXPECT_GE(s["machine"]["load_average_before"].get<double>(), 0.0);
  EXPECT_GE(s["machine"]["load_average_after"].get<double>(), 0.0);
  EXPECT_HAS(run(tt_run() + " --version").output, std::string("tt-run ") + tt::tt_version() + "\n");
  // every file it wrote, the plots' data included
  for (const char* f :
       {"L.npy", "F.npy", "loss.png", "loss.dat", "log.txt", "metrics.jsonl", "pipeline.yaml", "summary.json"})
    EXPECT_HAS(s["outputs"].dump(), std::string("\"") + f + "\"");
}

// A mode that cannot apply to the command line's pipeline or options is refused before anything
// runs, naming the options given, rather than ignored or half-applied.
TEST(TtRun, ModesThatCannotApplyAreRefusedNamingWhatWasGiven) {
  auto dir = tt::test::temp_dir("cli_modes");
  const std::string in_source = "cd " + tt::test::source_dir() + " && " + tt_run() + " ";
  // --budget on a comparison planned the base pipeline and trained it, the section dropped
  auto r = run(in_source + "--budget 1GiB configs/compare-topic.yaml --run-dir " + quote(dir / "b"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "compares variants (its compare: section) and --budget plans one pipeline: add the override "
                       "'compare=~'");
  r = run(in_source + "--plan-estimates configs/compare-topic.yaml --run-dir " + quote(dir / "e"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "compares variants (its compare: section) and --plan-estimates plans one pipeline: add the "
                       "override 'compare=~'");
  // the refusal named --resume, --dry-run or --compare, none of them given
  r = run(in_source + "--profile-memory --budget 10MiB configs/quickstart.yaml --run-dir " + quote(dir / "p"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--profile-memory trains and profiles one pipeline as written: it does not go with --budget\n");
  // an evaluation-only pipeline was trained 3 steps with the default learning rate, silently
  r = run(in_source + "--profile-memory configs/tabular-inference.yaml --run-dir " + quote(dir / "inf"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "configs/tabular-inference.yaml trains no steps (trainer.max_steps: 0");
  EXPECT_HAS(r.output, "give the override trainer.max_steps=3");
  // --budget on it planned 24 probes of training steps and trained plugins into an evaluation
  r = run(in_source + "--budget 10MiB configs/tabular-inference.yaml --run-dir " + quote(dir / "binf"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "configs/tabular-inference.yaml trains no steps (trainer.max_steps: 0");
  EXPECT_HAS(r.output, "and --budget plans training steps");
  EXPECT_FALSE(fs::exists(dir / "binf-plan")) << r.output;
  r = run(in_source + "configs/tabular-inference.yaml trainer.memory_budget=10MiB --run-dir " + quote(dir / "minf"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "and trainer.memory_budget plans training steps");
  // a comparison trained it (its row showed fine-tuning's figures and loss as the inference's)
  r = run(in_source + "--dry-run --compare configs/tabular-inference.yaml configs/tabular-finetune.yaml");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "configs/tabular-inference.yaml trains no steps (trainer.max_steps: 0");
  EXPECT_HAS(r.output, "and a comparison times training steps; to compare fine-tuning it, give the override "
                       "trainer.max_steps=N");
  EXPECT_HAS(r.output, "compare: 1 of 2 variants valid");
  // --overwrite was not passed on to the profile's run
  const std::string profile = in_source + "--profile-memory configs/quickstart.yaml -q --run-dir " + quote(dir / "again");
  ASSERT_EQ(run(profile).rc, 0);
  r = run(profile + " --overwrite");
  EXPECT_EQ(r.rc, 0) << r.output;
  // an empty --run-dir went to <output.dir>/<name>-<timestamp>
  r = run(in_source + "configs/quickstart.yaml --run-dir ''");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--run-dir is empty");
  // a --run-dir that is a file (or a device) was exit 1, "set output.dir to a writable place"
  for (const std::string& file : {(dir / "p" / "summary.json").string(), std::string("/dev/full")}) {
    fs::create_directories(dir / "p");
    std::ofstream(dir / "p" / "summary.json") << "{}";
    r = run(in_source + "configs/quickstart.yaml --run-dir " + file);
    EXPECT_EQ(r.rc, 2) << r.output;
    EXPECT_HAS(r.output, "the run directory " + file + " is a file, not a directory: give --run-dir another path");
  }
  // --predict-out is checked before training: a directory is refused, a missing directory made
  const std::string iris = "../shared/datasets/tabular/iris.csv";
  const std::string predict = in_source + "configs/tabular-inference.yaml data.path=" + iris + " --predict " + iris +
                              " -q --run-dir " + quote(dir / "pred") + " --predict-out ";
  r = run(predict + quote(dir));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--predict-out " + dir.string() + " is a directory: name the file to write");
  EXPECT_FALSE(fs::exists(dir / "pred" / "summary.json"));  // refused before the run
  r = run(predict + quote(dir / "made" / "p.csv") + " --overwrite");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "made" / "p.csv"));
}

// A path is any bytes: a run directory named in Latin-1 gets its summary.json and metrics (the
// path in them with U+FFFD for the byte that is not UTF-8), not an error from the JSON writer
// after training.
TEST(TtRun, ARunDirectoryWhosePathIsNotUtf8GetsItsSummary) {
  auto dir = tt::test::temp_dir("cli_latin1");
  const fs::path y = write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: 2\n"));
  const fs::path out = dir / "caf\xe9";
  auto r = run(tt_run() + " " + y.string() + " -q --run-dir " + quote(out));
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto s = tt::test::summary_of(out);
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["run_dir"], (dir / "caf\xef\xbf\xbd").string());
  EXPECT_EQ(tt::test::step_lines(out / "metrics.jsonl").size(), 2u);
}

// trainer.release_library_pages (on by default) gives back library pages before training and
// records how far RSS fell; it changes nothing the run computes: the same losses, step for step,
// as with it off (which records 0). How far RSS falls depends on the other processes mapping the
// same libraries (their shared pages stay), so docs/benchmarks.md measures it alone.
TEST(TtRun, ReleasingLibraryPagesLeavesTheTrainingUnchanged) {
  auto dir = tt::test::temp_dir("pages");
  std::vector<double> losses[2];
  for (int on = 0; on < 2; ++on) {
    const fs::path run_dir = dir / (on ? "on" : "off");
    auto r = run("cd " + tt::test::source_dir() + " && " + tt_run() + " configs/quickstart.yaml trainer.epochs=2 " +
                 "trainer.release_library_pages=" + (on ? "true" : "false") + " -q --run-dir " + quote(run_dir));
    ASSERT_EQ(r.rc, 0) << r.output;
    auto s = tt::test::summary_of(run_dir);
    ASSERT_TRUE(s["memory"].contains("library_pages_released_bytes")) << s.dump();
    if (!on) {
      EXPECT_EQ(s["memory"]["library_pages_released_bytes"].get<int64_t>(), 0);
    }
    std::ifstream in(run_dir / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) losses[on].push_back(j["loss"].get<double>());
    }
  }
  EXPECT_EQ(losses[0].size(), 126u);
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(TtRun, DryRunPrintsResolvedPipelineWithOverrides) {
  auto r = run("cd " + tt::test::source_dir() + " && " + tt_run() +
               " --dry-run configs/quickstart.yaml trainer.batch_size=64 model.k=7");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("batch_size: 64"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("k: 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("beta2: 0.999"), std::string::npos) << r.output;  // defaults filled in
}

// --dry-run refuses what the run would refuse before training, though it reads no data: a
// model's options that contradict each other, a plugin's factory's check of its options,
// plugins listed in an order their declarations forbid, and a plugin on a device it does not
// run on.
TEST(TtRun, DryRunRefusesContradictoryOptionsAPluginOrderAndADeviceTheRunWouldRefuse) {
  const std::string lm = "cd " + tt::test::source_dir() + " && " + tt_run() + " --dry-run configs/lm-brown.yaml ";
  struct Case {
    std::string overrides, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"model.d_model=65", "configs/lm-brown.yaml:23:12: model (transformer).n_heads (4) must divide d_model (65)"},
           {"model.d_model=100 model.n_heads=4 model.positions=rotary", "rotary needs an even head dimension"},
           {"model.target_params=100000", "cannot be set together with target_params"},
           {"'plugins=[offload, adam8bit]'",
            "plugins: 'offload' must be listed after 'adam8bit' (it moves the state and step of the optimizer it is "
            "given, e.g. adam8bit's; 'adam8bit' replaces the optimizer), but the list is [offload, adam8bit]"},
           {"'plugins=[{name: lora, targets: []}]'", "targets is empty"},
           {"'plugins=[{name: amp, dtype: fp16}]'",
            "plugins: 'amp' runs only on CUDA (dtype fp16: tt's amp autocasts fp16 on CUDA only; on the CPU use dtype: "
            "bf16), and trainer.device is cpu: set trainer.device: cuda, or change or remove 'amp'"},
           {"'plugins=[{name: offload, target: host}]'", "plugins: 'offload' runs only on CUDA (target host"},
           {"trainer.device=cuda 'plugins=[offload]'", "plugins: 'offload' runs only on the CPU (target disk"},
       }) {
    const auto r = run(lm + c.overrides);
    EXPECT_EQ(r.rc, 2) << c.overrides << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.overrides << "\n" << r.output;
  }
  const auto ok = run(lm + "'plugins=[adam8bit, offload]' model.d_model=96 model.n_heads=3 model.positions=rotary");
  EXPECT_EQ(ok.rc, 0) << ok.output;
}

// A pipeline loads the modules it names, not every installed one: the model's module brings its
// datasets (glibc's loader lists the files it opens under LD_DEBUG=files).
TEST(TtRun, APipelineLoadsOnlyTheModulesItNames) {
  auto r = run("cd " + tt::test::source_dir() + " && LD_DEBUG=files " + tt_run() +
               " --dry-run configs/quickstart.yaml 'plugins=[oom-guard]'");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("tt_model_topic.so"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tt_plugin_oom-guard.so"), std::string::npos) << r.output;
  for (const char* other : {"tt_model_transformer.so", "tt_model_tabular-icl.so", "tt_plugin_checkpoint.so",
                            "tt_plugin_lora.so", "tt_plugin_zero1.so"})
    EXPECT_EQ(r.output.find(other), std::string::npos) << other << " was loaded";
  // a dataset no loaded module brings still makes every module load, to find it or list them all
  r = run("cd " + tt::test::source_dir() + " && " + tt_run() + " --dry-run configs/quickstart.yaml data=no-such-data");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("tabular-csv"), std::string::npos) << r.output;
}

// --dry-run checks every shipped pipeline without training, a comparison's variants included
// (each built as compare would run it: configs/compare-lm-cuda.yaml is checked here, on a
// machine without a GPU, before a GPU run spends its time on it).
TEST(TtRun, EveryShippedConfigPassesDryRunComparisonsVariantByVariant) {
  int configs = 0, comparisons = 0;
  for (const auto& e : fs::directory_iterator(fs::path(tt::test::source_dir()) / "configs")) {
    if (e.path().extension() != ".yaml") continue;
    ++configs;
    auto r = run("cd " + tt::test::source_dir() + " && " + tt_run() + " --dry-run configs/" + e.path().filename().string());
    EXPECT_EQ(r.rc, 0) << e.path() << "\n" << r.output;
    if (tt::test::read_file(e.path()).find("\ncompare:") == std::string::npos) continue;
    ++comparisons;
    EXPECT_NE(r.output.find("variants valid"), std::string::npos) << e.path() << "\n" << r.output;
    EXPECT_EQ(r.output.find("refused"), std::string::npos) << e.path() << "\n" << r.output;
  }
  EXPECT_GE(configs, 10);
  EXPECT_GE(comparisons, 3);
}

// A refused variant is named with its reason, the exit code is 2, and the variants' pipelines
// were written to a temporary folder that is gone afterwards.
TEST(TtRun, DryRunOfAComparisonNamesARefusedVariant) {
  auto dir = tt::test::temp_dir("cli_dry_compare");
  fs::create_directories(dir / "tmp");
  auto y = write_pipeline(dir,
                          "name: c\nmodel: {name: topic, k: 4}\ndata: {name: topic-synthetic, n_docs: 64, n_terms: 50, k: 4}\n"
                          "compare:\n  steps: 2\n  variants:\n    baseline: {}\n"
                          "    bad: {set: {optimizer.lr: -1}}\n    fine: {set: {trainer.batch_size: 8}}\n");
  auto r = run("TMPDIR=" + quote(dir / "tmp") + " " + tt_run() + " --dry-run " + quote(y));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("compare: variant 'baseline': valid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("compare: variant 'fine': valid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("compare: variant 'bad': refused"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lr"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 of 3 variants valid"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir / "tmp")) << "the variants' folder was left behind";
  EXPECT_FALSE(fs::exists(dir / "runs")) << "a dry run made a run folder";
}

TEST(TtRun, ExitCodesAndMessages) {
  auto dir = tt::test::temp_dir("cli");
  auto bad = write_pipeline(dir, "model: topic\ndata: topic-synthetic\ntrainer:\n  epoch: 3\n");
  auto r = run(tt_run() + " " + quote(bad));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("pipeline.yaml:4:3: unknown key 'epoch' in trainer; did you mean 'epochs'?"),
            std::string::npos)
      << r.output;
  r = run(tt_run() + " /no/such/file.yaml");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("/no/such/file.yaml: pipeline file not found"), std::string::npos) << r.output;
  r = run(tt_run());
  EXPECT_EQ(r.rc, 2);
  r = run(tt_run() + " --no-such-flag");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("tt-run: error: The following argument was not expected: --no-such-flag (tt-run --help "
                          "lists the options)"),
            std::string::npos)
      << r.output;
  r = run(tt_run() + " --help");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("6 a file could not be written"), std::string::npos) << r.output;
  auto refused = write_pipeline(dir, "model: topic\ndata: topic-synthetic\nplugins: [test-wrong-api]\n");
  r = run("TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt_run() + " " + quote(refused));
  EXPECT_EQ(r.rc, 3) << r.output;
  EXPECT_NE(r.output.find("built for tt module API version 999"), std::string::npos) << r.output;
  auto oom = write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: 2\n  memory_cap: 1KiB\n"));
  r = run(tt_run() + " " + quote(oom));
  EXPECT_EQ(r.rc, 4) << r.output;
  EXPECT_NE(r.output.find("out of memory at step 1"), std::string::npos) << r.output;
  // a model too large to allocate (a 19 GB attention weight, under a 6 GB address-space limit so
  // that it fails whatever the host's overcommit) is out of memory too, in the exit and the summary
  const tt::test::TinyLm lm("huge");
  std::ofstream(dir / "huge.yaml") << "name: huge\ndata: {name: text, train: " << (lm.dir / "train.txt").string()
                                   << ", seq_len: 16}\nmodel: {name: transformer, d_model: 40000, n_layers: 1, "
                                      "n_heads: 1, sample_tokens: 0}\ntrainer: {max_steps: 1, threads: 1}\n";
  r = run("ulimit -v 6000000 && " + tt_run() + " " + quote(dir / "huge.yaml") + " -q --run-dir " + quote(dir / "huge"));
  EXPECT_EQ(r.rc, 4) << r.output;
  EXPECT_HAS(r.output, "out of memory in setup, building the model or reading the data: ");
  EXPECT_HAS(r.output, "(a smaller model: its size options, such as model.k or model.d_model; or less data in memory)");
  EXPECT_EQ(r.output.find("trainer.batch_size"), std::string::npos) << r.output;
  EXPECT_EQ(tt::test::summary_of(dir / "huge")["exit_code"], 4);
  // a --predict file that is not there is refused before anything trains
  auto plain = write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: 2\n"));
  r = run(tt_run() + " " + quote(plain) + " --predict " + quote(dir / "no-such.csv") + " --run-dir " +
          quote(dir / "predict"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--predict '" + (dir / "no-such.csv").string() + "' does not exist or is not a file");
  EXPECT_FALSE(fs::exists(dir / "predict")) << "a run started";
  // nor one that --predict-out would overwrite
  tt::test::write_text(dir / "rows.csv", "a,b\n1,2\n");
  r = run(tt_run() + " " + quote(plain) + " --predict " + quote(dir / "rows.csv") + " --predict-out " +
          quote(dir / "." / "rows.csv") + " --run-dir " + quote(dir / "predict"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "is the --predict file itself");
  EXPECT_EQ(tt::test::read_file(dir / "rows.csv"), "a,b\n1,2\n");
  EXPECT_FALSE(fs::exists(dir / "predict")) << "a run started";
  // nor the table the pipeline trains on (it was overwritten with the predictions), nor a file of
  // the run's own (its pipeline.yaml: the run could not be resumed)
  const std::string table = tt::test::read_file(tt::test::source_dir() + "/../shared/datasets/tabular/iris.csv");
  tt::test::write_text(dir / "table.csv", table);
  tt::test::write_text(dir / "queries.csv", table);
  const std::string tabular = "cd " + tt::test::source_dir() + " && " + tt_run() +
                              " configs/tabular-inference.yaml trainer.threads=1 data.path=" + quote(dir / "." / "table.csv") +
                              " --predict " + quote(dir / "queries.csv");
  r = run(tabular + " --predict-out " + quote(dir / "table.csv") + " --run-dir " + quote(dir / "tab"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--predict-out " + (dir / "table.csv").string() + " is the file data.path names");
  EXPECT_EQ(tt::test::read_file(dir / "table.csv"), table);
  EXPECT_FALSE(fs::exists(dir / "tab" / "summary.json"));
  r = run(tabular + " --predict-out " + quote(dir / "tab3" / "pipeline.yaml") + " --run-dir " + quote(dir / "tab3"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "is a file of the run's own");
  EXPECT_FALSE(fs::exists(dir / "tab3" / "summary.json"));
  r = run(tabular + " output.dir=" + quote(dir) + " output.run_name=named --predict-out " +
          quote(dir / "named" / "summary.json"));  // a run directory named by output.run_name
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "is a file of the run's own");
  // a run's relative data path, read again by a resume from another directory: where it started is said
  fs::create_directories(dir / "first");
  tt::test::write_text(dir / "first" / "t.csv", table);
  r = run("cd " + quote(dir / "first") + " && " + tt_run() + " " + tt::test::source_dir() +
          "/configs/tabular-inference.yaml -q trainer.threads=1 data.path=t.csv model.init_from=" +
          tt::test::source_dir() + "/models/tabular-icl/pretrained/small.safetensors --run-dir " + quote(dir / "rel"));
  ASSERT_EQ(r.rc, 0) << r.output;
  r = run("cd " + quote(dir) + " && " + tt_run() + " --resume rel");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "(the run was started in " + fs::canonical(dir / "first").string() +
                           ", where its relative paths lead: resume it from there");
  r = run("cd " + quote(dir / "first") + " && " + tt_run() + " --resume " + quote(dir / "rel"));
  EXPECT_EQ(r.rc, 0) << r.output;
  // a comparison's options on a pipeline that is not one are refused, not ignored
  r = run(tt_run() + " " + quote(plain) + " --steps 5 --run-dir " + quote(dir / "steps"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--steps, --warmup and --repeats set a comparison");
  // a negative count was taken for not given: ignored, or refused as a comparison's on a pipeline without one
  for (const auto& [option, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--steps -1", "--steps must be at least 1, got -1"},
           {"--warmup -5", "--warmup must be at least 0, got -5"},
           {"--repeats 0", "--repeats must be at least 1, got 0"}}) {
    r = run(tt_run() + " " + quote(plain) + " " + option + " --run-dir " + quote(dir / "steps"));
    EXPECT_EQ(r.rc, 2) << option << "\n" << r.output;
    EXPECT_HAS(r.output, expect);
  }
  EXPECT_FALSE(fs::exists(dir / "steps")) << "a run started";
  // as are the options of a mode not asked for, and --run-dir with --resume (it was ignored)
  const std::pair<std::string, std::string> unused[] = {
      {"--tokens 5", "--tokens sets how --sample PROMPT generates; give --sample too"},
      {"--temperature 0.5", "--temperature sets how --sample PROMPT generates"},
      {"--top-k 3", "--top-k sets how --sample PROMPT generates"},
      {"--seed 3", "--seed seeds the sampling of --sample PROMPT; give --sample too"},
      {"--predict-out " + quote(dir / "p.csv"), "--predict-out names the file --predict FILE writes"},
      {"--margin 0.2", "--margin sets the budget planner, which runs for --budget SIZE, --recommend or a pipeline's "
                       "trainer.memory_budget; give one of them"},
      {"--probe-steps 2", "--probe-steps sets the budget planner"},
      {"--max-probes 2", "--max-probes sets the budget planner"},
      {"--profile-memory --predict " + quote(dir / "rows.csv"), "--profile-memory trains 3 steps to profile them"},
  };
  for (const auto& [args, message] : unused) {
    r = run(tt_run() + " " + quote(plain) + " " + args + " --run-dir " + quote(dir / "unused"));
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.output;
    EXPECT_HAS(r.output, message);
    EXPECT_FALSE(fs::exists(dir / "unused")) << args << ": a run started";
  }
  r = run(tt_run() + " --resume " + quote(dir / "predict") + " --run-dir " + quote(dir / "unused"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--resume continues the run in its own directory");
  // --profile-memory on a comparison's pipeline profiles nothing of the section: refused, with the way
  auto compared = write_pipeline(dir, tt::test::topic_yaml(dir, "", "compare: {variants: {a: {}, b: {}}}\n"));
  r = run(tt_run() + " " + quote(compared) + " --profile-memory --run-dir " + quote(dir / "unused"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--profile-memory profiles one pipeline: add the override 'compare=~'");
  EXPECT_FALSE(fs::exists(dir / "unused")) << "a run started";
}

// --sample and --predict on a model that declares it does not generate or predict are refused
// before anything trains (not after training), on a resumed run before it is touched, and on a
// comparison, which trains one model per variant; a model declaring the ability gets past the
// check.
TEST(TtRun, SampleOrPredictOnAModelWithoutTheAbilityIsRefusedBeforeTraining) {
  auto dir = tt::test::temp_dir("cli_ability");
  tt::test::write_text(dir / "rows.csv", "a,b\n1,2\n");
  const std::string rows = quote(dir / "rows.csv");
  const std::string topic = quote(write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: 2\n")));
  const auto config = [](const char* name) { return quote(tt::test::source_dir() + "/configs/" + name); };
  struct Case {
    std::string pipelines, options, message;
  } cases[] = {
      {topic, "--sample hello", "--sample: model 'topic' does not generate text"},
      {topic, "--predict " + rows, "--predict: model 'topic' does not predict from files"},
      {config("tabular-finetune.yaml"), "--sample hello",
       "--sample: model 'tabular-icl' does not generate text"},
      {config("lm-brown.yaml"), "--predict " + rows,
       "--predict: model 'transformer' does not predict from files"},
      {config("compare-topic.yaml"), "--sample hello", "a comparison trains one model per variant"},
      {topic + " " + topic, "--compare --predict " + rows, "a comparison trains one model per variant"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const fs::path run_dir = dir / ("run" + std::to_string(i++));
    auto r = run(tt_run() + " " + c.pipelines + " " + c.options + " --run-dir " + quote(run_dir));
    EXPECT_EQ(r.rc, 2) << c.options << "\n" << r.output;
    EXPECT_HAS(r.output, c.message);
    EXPECT_FALSE(fs::exists(run_dir)) << c.options << ": a run started\n" << r.output;
  }
  auto trained = run(tt_run() + " -q " + topic + " --run-dir " + quote(dir / "trained"));
  ASSERT_EQ(trained.rc, 0) << trained.output;
  const std::string summary = tt::test::read_file(dir / "trained" / "summary.json");
  auto resumed = run(tt_run() + " --resume " + quote(dir / "trained") + " --sample hello");
  EXPECT_EQ(resumed.rc, 2) << resumed.output;
  EXPECT_HAS(resumed.output, "--sample: model 'topic' does not generate text");
  EXPECT_EQ(tt::test::read_file(dir / "trained" / "summary.json"), summary);
  auto lm = run(tt_run() + " --dry-run " + config("lm-brown.yaml") + " --sample hi");
  EXPECT_EQ(lm.rc, 0) << lm.output;
  auto tabular = run(tt_run() + " --dry-run " + config("tabular-finetune.yaml") + " --predict " + rows);
  EXPECT_EQ(tabular.rc, 0) << tabular.output;
  // the registry takes only the abilities tt-run knows
  EXPECT_THROW(tt::Registry::global().add_model("test-flier", "", tt::Schema(), nullptr, std::nullopt,
                                                std::vector<std::string>{"fly"}),
               tt::ModuleError);
  tt::ModelComponent undeclared, declared;
  declared.abilities = std::vector<std::string>{"predict"};
  EXPECT_TRUE(tt::may_have_ability(undeclared, "generate"));
  EXPECT_TRUE(tt::may_have_ability(declared, "predict"));
  EXPECT_FALSE(tt::may_have_ability(declared, "generate"));
}

// A resume whose overrides change the model's structure is refused as a mismatch (exit 2), the
// run left as it was: more layers (tensors the checkpoint lacks) are not taken for damaged
// checkpoints, whose advice (--overwrite) would throw the run away, and fewer layers (tensors the
// model lacks) do not load the first layers and drop the rest without a word.
TEST(TtRun, AResumeWithAnotherLayerCountIsRefusedAsAMismatch) {
  const tt::test::TinyLm lm("resume_layers");
  auto r = lm.run("a", "[]", "batch_size: 4, max_steps: 2, checkpoint_every: 1, threads: 1");
  ASSERT_EQ(r.rc, 0) << r.output;
  const std::string pipeline = tt::test::read_file(lm.dir / "a" / "pipeline.yaml");
  for (const char* layers : {"6", "2"}) {
    auto res = run(tt_run() + " --resume " + quote(lm.dir / "a") + " model.n_layers=" + layers + " trainer.max_steps=3 -q");
    EXPECT_EQ(res.rc, 2) << layers << "\n" << res.output;
    EXPECT_HAS(res.output, "does not fit the model of this pipeline");
    EXPECT_HAS(res.output, std::string(layers) == "6" ? "blocks.4" : "blocks.2");
    EXPECT_EQ(res.output.find("damaged"), std::string::npos) << res.output;
    EXPECT_EQ(tt::test::read_file(lm.dir / "a" / "pipeline.yaml"), pipeline);
  }
  auto same = run(tt_run() + " --resume " + quote(lm.dir / "a") + " trainer.max_steps=3 -q");
  EXPECT_EQ(same.rc, 0) << same.output;
  EXPECT_EQ(tt::test::summary_of(lm.dir / "a")["steps"], 3);
}

TEST(TtRun, ListAndVersion) {
  auto r = run(tt_run() + " --list");
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const char* s : {"models:", "topic", "topic-synthetic", "optimizers:", "adamw", "cosine_warm_restarts",
                        "avg_doc_length", "trainer options:", "micro_batch_size",
                        // every section a pipeline has, the output's and the top level's included
                        "output options:", "run_name", "export", "pipeline keys:", "seed", "warmup_steps",
                        // what a refusal of a plugin beside a model points to
                        "parts: block_stack, attention, linear, embedding, output_head", "abilities: generate",
                        "parts: none", "acts on the model's: block_stack"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
  r = run(tt_run() + " --version");
  ASSERT_EQ(r.rc, 0);
  EXPECT_NE(r.output.find("LibTorch " TT_TORCH_VERSION_STRING), std::string::npos) << r.output;
}

TEST(TtRun, CrashDuringCheckpointWriteKeepsThePreviousOne) {
  auto dir = tt::test::temp_dir("cli");
  auto pipe = write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: 15\n  checkpoint_every: 5\n"));
  auto straight = run(tt_run() + " -q " + quote(pipe) + " --run-dir " + quote(dir / "straight"));
  ASSERT_EQ(straight.rc, 0) << straight.output;
  // Crash 3000 bytes into the second checkpoint (step 10).
  auto crashed = run("TT_FAULT_CHECKPOINT_CRASH=2:3000 " + tt_run() + " -q " + quote(pipe) + " --run-dir " +
                     quote(dir / "crash"));
  ASSERT_EQ(crashed.rc, 86) << crashed.output;
  auto ckpts = tt::list_checkpoints(dir / "crash" / "checkpoints");
  ASSERT_EQ(ckpts.size(), 1u);
  EXPECT_EQ(ckpts[0].filename(), "step-00000005.pt");
  EXPECT_TRUE(fs::exists(dir / "crash" / "checkpoints" / ".step-00000010.pt.tmp"));  // the torn write
  EXPECT_LE(fs::file_size(dir / "crash" / "checkpoints" / ".step-00000010.pt.tmp"), 3000u);
  auto resumed = run(tt_run() + " -q --resume " + quote(dir / "crash"));
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  auto a = tt::test::summary_of(dir / "straight");
  auto b = tt::test::summary_of(dir / "crash");
  EXPECT_EQ(b["steps"], 15);
  EXPECT_EQ(a["final_loss"].get<double>(), b["final_loss"].get<double>());  // bitwise
}

namespace {
// A run resumed from its checkpoint of step `from` against the uninterrupted one: it goes on to
// the last step with every step's loss the uninterrupted run's, each step once in metrics.jsonl,
// and reports the memory breakdown the uninterrupted run measured: the optimizer state came
// from the checkpoint; the model's workspace is measured at the first step run here, whose
// batch is another than the uninterrupted run's first (its non-zeros, and so the workspace,
// differ by a few percent).
void expect_resumed_as_uninterrupted(const fs::path& straight, const fs::path& resumed, int steps, int from) {
  auto a = tt::test::step_lines(straight / "metrics.jsonl");
  auto b = tt::test::step_lines(resumed / "metrics.jsonl");
  ASSERT_EQ(a.size(), static_cast<size_t>(steps));
  ASSERT_EQ(b.size(), a.size()) << "resumed from step " << from;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = nlohmann::json::parse(a[i]), y = nlohmann::json::parse(b[i]);
    ASSERT_EQ(y["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
    ASSERT_EQ(y["loss"].get<double>(), x["loss"].get<double>()) << "step " << i + 1 << " (resumed from " << from << ")";
  }
  auto s1 = tt::test::summary_of(straight);
  auto s2 = tt::test::summary_of(resumed);
  EXPECT_EQ(s2["steps"], steps);
  EXPECT_EQ(s2["steps_this_run"], steps - from);
  EXPECT_EQ(s2["final_loss"].get<double>(), s1["final_loss"].get<double>());
  const auto &m1 = s1["memory"], &m2 = s2["memory"];
  for (const char* part : {"parameters_bytes", "gradients_bytes", "optimizer_state_bytes"})
    EXPECT_EQ(m2[part], m1[part]) << part << "\n" << m1.dump(2) << "\n" << m2.dump(2);
  EXPECT_GT(m2["optimizer_state_bytes"].get<int64_t>(), 0);
  EXPECT_GT(m2["activations_bytes"].get<int64_t>(), 0) << m2.dump(2);
  EXPECT_NEAR(m2["activations_bytes"].get<double>(), m1["activations_bytes"].get<double>(),
              0.1 * m1["activations_bytes"].get<double>())
      << m1.dump(2) << m2.dump(2);
}
}  // namespace

TEST(TtRun, CtrlCWritesACheckpointAndTheResumedRunEndsAndReportsAsTheUninterruptedOne) {
  auto dir = tt::test::temp_dir("cli");
  constexpr int kSteps = 1000;
  auto pipe = write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: " + std::to_string(kSteps) + "\n"));
  // Ctrl-C at step 20: the test plugin test-stall holds the end of step 20 until the file `go`
  // exists (it changes nothing the run computes); the Ctrl-C is sent while it holds, then `go` is
  // written, so the interrupt lands at step 20 however fast or slow the steps are. The
  // uninterrupted run has the plugin too, holding from a step it never reaches: with a plugin
  // the topic model trains through autograd, off its fused step, in both runs (the fused step's
  // resume: TtRun.AResumeOnTheTopicModelsFusedStep...).
  const std::string held = quote(dir / "held"), go = quote(dir / "go");
  const auto gate = [&](int from) {
    return " 'plugins=[{name: test-stall, event: gate, from_step: " + std::to_string(from) + ", seconds: 120, marker: " +
           (dir / "held").string() + ", release: " + (dir / "go").string() + "}]'";
  };
  const std::string modules = "TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " ";
  auto straight = run(modules + tt_run() + " -q " + quote(pipe) + gate(kSteps + 1) + " --run-dir " + quote(dir / "straight"));
  ASSERT_EQ(straight.rc, 0) << straight.output;
  ASSERT_FALSE(fs::exists(dir / "held"));

  auto r = run("(" + modules + tt_run() + " -q " + quote(pipe) + gate(20) + " --run-dir " +
               quote(dir / "run") + " & pid=$!; for i in $(seq 6000); do [ -e " + held +
               " ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.01; done; kill -INT $pid; touch " + go +
               "; wait $pid)");
  ASSERT_EQ(r.rc, 130) << "the run was not interrupted mid-run:\n" << r.output;
  EXPECT_NE(r.output.find("checkpoint written. Continue with: tt-run --resume"), std::string::npos) << r.output;
  auto ckpts = tt::list_checkpoints(dir / "run" / "checkpoints");
  ASSERT_EQ(ckpts.size(), 1u);
  const int stopped = std::stoi(ckpts[0].stem().string().substr(std::string("step-").size()));
  ASSERT_EQ(stopped, 20);
  EXPECT_EQ(tt::test::step_lines(dir / "run" / "metrics.jsonl").size(), static_cast<size_t>(stopped));

  // Resumed as the message says, it ends and reports as the uninterrupted run; its epoch losses
  // are the whole run's, from epoch 1 (the checkpoint carries those before it).
  r = run(modules + tt_run() + " -q --resume " + quote(dir / "run"));
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_resumed_as_uninterrupted(dir / "straight", dir / "run", kSteps, stopped);
  auto s1 = tt::test::summary_of(dir / "straight");
  auto s2 = tt::test::summary_of(dir / "run");
  EXPECT_EQ(s2["first_epoch"], 1);
  EXPECT_EQ(s2["first_epoch_loss"].get<double>(), s1["first_epoch_loss"].get<double>());
  EXPECT_EQ(s2["final_epoch_loss"].get<double>(), s1["final_epoch_loss"].get<double>());
}

// A resume on the topic model's own fused step (no plugin: the loss, the gradients and AdamW's
// update without autograd): a copy of a finished run cut back to its checkpoint of step 20 ends
// and reports as the uninterrupted run. The deferred row updates resume to float rounding only
// (TopicTraining.DeferredRowUpdatesResumeToRounding): off here, so the losses agree bitwise.
TEST(TtRun, AResumeOnTheTopicModelsFusedStepEndsAndReportsAsTheUninterruptedOne) {
  auto dir = tt::test::temp_dir("cli");
  constexpr int kSteps = 60;
  std::string yaml = tt::test::topic_yaml(dir, "  max_steps: " + std::to_string(kSteps) + "\n  checkpoint_every: 20\n");
  yaml.replace(yaml.find("k: 4}"), 5, "k: 4, defer_updates: false}");
  auto pipe = write_pipeline(dir, yaml);
  auto straight = run(tt_run() + " -q " + quote(pipe) + " --run-dir " + quote(dir / "straight"));
  ASSERT_EQ(straight.rc, 0) << straight.output;
  fs::copy(dir / "straight", dir / "cut", fs::copy_options::recursive);
  for (const auto& c : tt::list_checkpoints(dir / "cut" / "checkpoints"))
    if (c.filename() != "step-00000020.pt") fs::remove(c);
  auto resumed = run(tt_run() + " -q --resume " + quote(dir / "cut"));
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  EXPECT_EQ(tt::test::summary_of(dir / "straight")["memory"]["gradients_bytes"], 0)
      << "not the fused step (no gradient tensors)";
  expect_resumed_as_uninterrupted(dir / "straight", dir / "cut", kSteps, 20);
}

// An evaluation is metered apart from training: with no training step the run's peak is its
// parameters, and the evaluation's own peak (parameters and the forward pass's activations) is
// in summary.json and the printed summary; periodic evaluations during training still count in
// the run's peak, as they always did.
TEST(TtRun, EvaluationIsMeteredApartFromTraining) {
  auto dir = tt::test::temp_dir("cli-eval");
  {
    std::ofstream t(dir / "train.txt");
    for (int i = 0; i < 300; ++i) t << "the quick brown fox jumps over the lazy dog " << i << "\n";
    std::ofstream v(dir / "val.txt");
    for (int i = 0; i < 80; ++i) v << "a lazy dog sleeps under the quick brown fox " << i << "\n";
  }
  const std::string yaml = "name: evalmeter\nseed: 0\ndata: {name: text, train: " + (dir / "train.txt").string() +
                           ", validation: [" + (dir / "val.txt").string() +
                           "], seq_len: 64}\nmodel: {name: transformer, d_model: 64, n_layers: 2, n_heads: 2, "
                           "sample_tokens: 0}\ntrainer: {batch_size: 8, threads: 1}\n";
  auto pipe = write_pipeline(dir, yaml);
  auto none = run(tt_run() + " " + quote(pipe) + " trainer.max_steps=0 --run-dir " + quote(dir / "none"));
  ASSERT_EQ(none.rc, 0) << none.output;
  auto m = tt::test::summary_of(dir / "none")["memory"];
  const int64_t params = m["parameters_bytes"].get<int64_t>();
  ASSERT_TRUE(m.contains("evaluation_peak_tensor_bytes")) << m.dump(1);
  // the forward pass of 8 windows of 64 tokens through 2 blocks holds far more than nothing
  EXPECT_GT(m["evaluation_peak_tensor_bytes"].get<int64_t>(), params + 100 * 1024) << m.dump(1);
  EXPECT_LT(m["peak_tensor_bytes"].get<int64_t>(), m["evaluation_peak_tensor_bytes"].get<int64_t>()) << m.dump(1);
  EXPECT_GT(m["evaluation_peak_rss_bytes"].get<int64_t>(), 0);
  EXPECT_NE(none.output.find("evaluation peak tensors " + tt::format_bytes(m["evaluation_peak_tensor_bytes"])),
            std::string::npos)
      << none.output;

  auto trained = run(tt_run() + " -q " + quote(pipe) + " trainer.max_steps=4 trainer.eval_every=2 --run-dir " +
                     quote(dir / "trained"));
  ASSERT_EQ(trained.rc, 0) << trained.output;
  m = tt::test::summary_of(dir / "trained")["memory"];
  EXPECT_GT(m["evaluation_peak_tensor_bytes"].get<int64_t>(), params) << m.dump(1);
  EXPECT_GE(m["peak_tensor_bytes"].get<int64_t>(), m["evaluation_peak_tensor_bytes"].get<int64_t>()) << m.dump(1);
  EXPECT_GE(m["peak_rss_bytes"].get<int64_t>(), m["evaluation_peak_rss_bytes"].get<int64_t>()) << m.dump(1);
}
