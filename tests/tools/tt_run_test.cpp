// tt-run as a user runs it: exit codes, dry-run, overrides, --list, crash-safe checkpoints.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/compat.h"

namespace fs = std::filesystem;
using tt::test::run;

namespace {
std::string tt_run() { return tt::test::tt_run_bin(); }
std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

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
  auto s = nlohmann::json::parse(tt::test::read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["steps"], 126);
  EXPECT_LT(s["final_epoch_loss"].get<double>(), s["first_epoch_loss"].get<double>());
  EXPECT_TRUE(fs::exists(dir / "run" / "L.npy"));
  EXPECT_TRUE(fs::exists(dir / "run" / "F.npy"));
}

TEST(TtRun, DryRunPrintsResolvedPipelineWithOverrides) {
  auto r = run("cd " + tt::test::source_dir() + " && " + tt_run() +
               " --dry-run configs/quickstart.yaml trainer.batch_size=64 model.k=7");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("batch_size: 64"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("k: 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("beta2: 0.999"), std::string::npos) << r.output;  // defaults filled in
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
  auto refused = write_pipeline(dir, "model: topic\ndata: topic-synthetic\nplugins: [test-wrong-api]\n");
  r = run("TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt_run() + " " + quote(refused));
  EXPECT_EQ(r.rc, 3) << r.output;
  EXPECT_NE(r.output.find("built for tt module API version 999"), std::string::npos) << r.output;
  auto oom = write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: 2\n  memory_cap: 1KiB\n"));
  r = run(tt_run() + " " + quote(oom));
  EXPECT_EQ(r.rc, 4) << r.output;
  EXPECT_NE(r.output.find("out of memory at step 1"), std::string::npos) << r.output;
}

TEST(TtRun, ListAndVersion) {
  auto r = run(tt_run() + " --list");
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const char* s : {"models:", "topic", "topic-synthetic", "optimizers:", "adamw", "cosine_warm_restarts",
                        "avg_doc_length", "trainer options:", "micro_batch_size"})
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
  auto a = nlohmann::json::parse(tt::test::read_file(dir / "straight" / "summary.json"));
  auto b = nlohmann::json::parse(tt::test::read_file(dir / "crash" / "summary.json"));
  EXPECT_EQ(b["steps"], 15);
  EXPECT_EQ(a["final_loss"].get<double>(), b["final_loss"].get<double>());  // bitwise
}

TEST(TtRun, CtrlCWritesACheckpointAndResumes) {
  auto dir = tt::test::temp_dir("cli");
  auto pipe = write_pipeline(dir, tt::test::topic_yaml(dir, "  max_steps: 100000000\n"));
  auto r = run("(" + tt_run() + " -q " + quote(pipe) + " --run-dir " + quote(dir / "run") +
               " & pid=$!; sleep 3; kill -INT $pid; wait $pid)");
  ASSERT_EQ(r.rc, 130) << r.output;
  EXPECT_NE(r.output.find("checkpoint written. Continue with: tt-run --resume"), std::string::npos) << r.output;
  auto ckpts = tt::list_checkpoints(dir / "run" / "checkpoints");
  ASSERT_EQ(ckpts.size(), 1u);
  r = run(tt_run() + " -q --resume " + quote(dir / "run") + " trainer.max_steps=1");  // already past: finishes at once
  EXPECT_EQ(r.rc, 0) << r.output;
}
