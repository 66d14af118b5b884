// What tt does when the machine or the user misbehaves: a full disk (a file-size limit stands in
// for it: writes past it fail as on a full disk), a run directory that already holds a run, and
// an input file truncated while training reads it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/npy.h"
#include "tt/report.h"
#include "tt/runtime.h"

namespace fs = std::filesystem;
using tt::test::read_file;
using tt::test::run;
using tt::test::temp_dir;
using tt::test::topic_yaml;
using tt::test::tt_run_bin;

namespace {

// Runs `command` with files limited to `kib` KiB: a write past that fails with EFBIG (SIGXFSZ
// ignored), as a write to a full disk fails with ENOSPC.
tt::test::RunResult run_with_file_limit(int kib, const std::string& command) {
  return run("bash -c \"ulimit -f " + std::to_string(kib) + "; trap '' XFSZ; exec " + command + "\"");
}

// The file-size limit within this process, restored when it ends.
class FileLimit {
 public:
  explicit FileLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit r = old_;
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(Reliability, AFullDiskDuringACheckpointStopsTheRunWithExitSixAndKeepsNoPartialFile) {
  const fs::path dir = temp_dir("full_ckpt");
  // the transformer: checkpoints of ~3 MiB, everything else a few KiB
  tt::test::TinyLm lm("full_ckpt_lm");
  lm.run("lm", "[]", "batch_size: 4, max_steps: 1");
  auto r = run_with_file_limit(1024, tt_run_bin() + " " + (lm.dir / "lm.yaml").string() +
                                         " trainer.max_steps=2 -q --run-dir " + (lm.dir / "full").string());
  EXPECT_EQ(r.rc, 6) << r.output;
  EXPECT_NE(r.output.find("cannot write checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("disk full?"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("kept"), std::string::npos) << r.output;  // the run's first: no earlier one to keep
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  EXPECT_TRUE(names_in(lm.dir / "full" / "checkpoints").empty());  // neither a checkpoint nor a .tmp
  const std::string summary = read_file(lm.dir / "full" / "summary.json");
  EXPECT_NE(summary.find("\"status\": \"failed\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"exit_code\": 6"), std::string::npos) << summary;
  // the topic model: the same (it used to end in an uncaught exception)
  std::ofstream(dir / "topic.yaml") << topic_yaml(dir, "  max_steps: 2\n");
  r = run_with_file_limit(4, tt_run_bin() + " " + (dir / "topic.yaml").string() + " -q --run-dir " +
                                 (dir / "topic").string());
  EXPECT_EQ(r.rc, 6) << r.output;
  EXPECT_NE(r.output.find("cannot write checkpoint"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  EXPECT_TRUE(names_in(dir / "topic" / "checkpoints").empty());
}

// A file given as a device or a pipe (--predict-out /dev/stdout, /dev/full) is written in place:
// a rename over it replaced the device with a plain file (as root, /dev/full itself), and the
// write's failure went unseen.
TEST(Reliability, AnOutputThatIsADeviceOrAPipeIsWrittenInPlace) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  try {
    tt::write_file_atomic("/dev/full", "predictions\n");
    ADD_FAILURE() << "expected a WriteError";
  } catch (const tt::WriteError& e) {
    EXPECT_HAS(e.what(), "cannot write /dev/full: write failed: No space left on device");
  }
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
  EXPECT_FALSE(fs::exists("/dev/.full.tmp"));
  // a FIFO: what is written comes out the other end
  const fs::path fifo = temp_dir("fifo_out") / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string read_back;
  std::thread reader([&] { read_back = tt::test::read_file(fifo); });
  tt::write_file_atomic(fifo, "a,b\n1,2\n");
  reader.join();
  EXPECT_EQ(read_back, "a,b\n1,2\n");
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST(Reliability, AnOutputThatCannotBeWrittenWholeIsAWriteErrorAndTheOldFileStays) {
  const fs::path dir = temp_dir("full_out");
  tt::write_file_atomic(dir / "summary.json", "{\"old\": true}\n");
  {
    FileLimit limit(4096);
    try {
      tt::write_file_atomic(dir / "summary.json", std::string(10000, 'x'));
      ADD_FAILURE() << "expected a WriteError";
    } catch (const tt::WriteError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot write " + (dir / "summary.json").string()), std::string::npos)
          << e.what();
      EXPECT_EQ(e.exit_code(), 6);
    }
    tt::MetricsFile metrics;
    metrics.open(dir / "metrics.jsonl");
    EXPECT_THROW(
        {
          for (int i = 0; i < 100; ++i) metrics.write("{\"step\": " + std::to_string(i) + std::string(100, ' ') + "}");
        },
        tt::WriteError);
  }
  EXPECT_EQ(read_file(dir / "summary.json"), "{\"old\": true}\n");
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"metrics.jsonl", "summary.json"}));  // no temp file left
}

TEST(Reliability, ARunDirectoryThatHoldsARunIsNotReusedByAnotherRun) {
  const fs::path dir = temp_dir("reuse");
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: 2\n");
  const std::string cmd = tt_run_bin() + " " + (dir / "p.yaml").string() + " -q --run-dir " + (dir / "r").string();
  ASSERT_EQ(run(cmd).rc, 0);
  const std::string metrics = read_file(dir / "r" / "metrics.jsonl"), summary = read_file(dir / "r" / "summary.json"),
                    log = read_file(dir / "r" / "log.txt");
  auto r = run(cmd + " trainer.max_steps=4");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("the run directory " + (dir / "r").string() +
                          " already holds a run (summary.json, metrics.jsonl, 1 checkpoint)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("continue it with tt-run --resume " + (dir / "r").string()), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir / "r" / "metrics.jsonl"), metrics);  // untouched
  // output.run_name names the same place the same way
  r = run(tt_run_bin() + " " + (dir / "p.yaml").string() + " -q output.run_name=r");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("or give another output.run_name"), std::string::npos) << r.output;
  // the refusals left the run as it was: not a failure summary written over its own
  EXPECT_EQ(read_file(dir / "r" / "summary.json"), summary);
  EXPECT_EQ(read_file(dir / "r" / "log.txt"), log);
  // a run that failed before its first step leaves nothing to keep: the next one may use its place
  r = run(tt_run_bin() + " " + (dir / "p.yaml").string() + " -q --run-dir " + (dir / "bad").string() +
          " optimizer.name=nosuch");
  EXPECT_EQ(r.rc, 2) << r.output;
  r = run(tt_run_bin() + " " + (dir / "p.yaml").string() + " -q --run-dir " + (dir / "early").string() +
          " model.init_average=2");  // fails in setup, after the directory is made
  EXPECT_EQ(r.rc, 2) << r.output;
  ASSERT_TRUE(fs::exists(dir / "early" / "summary.json")) << r.output;
  r = run(tt_run_bin() + " " + (dir / "p.yaml").string() + " -q --run-dir " + (dir / "early").string());
  EXPECT_EQ(r.rc, 0) << r.output;
  // resuming it is what works
  r = run(tt_run_bin() + " --resume " + (dir / "r").string() + " -q");
  EXPECT_EQ(r.rc, 0) << r.output;
}

TEST(Reliability, OverwriteEmptiesARunDirectoryAndNothingElse) {
  const fs::path dir = temp_dir("overwrite");
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: 2\n");
  const std::string cmd = tt_run_bin() + " " + (dir / "p.yaml").string() + " --run-dir " + (dir / "r").string();
  ASSERT_EQ(run(cmd + " -q").rc, 0);
  std::ofstream(dir / "r" / "stale.txt") << "from before";
  auto r = run(cmd + " trainer.max_steps=3 --overwrite");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("--overwrite: emptied " + (dir / "r").string()), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "r" / "stale.txt"));
  EXPECT_NE(read_file(dir / "r" / "summary.json").find("\"steps\": 3"), std::string::npos);
  EXPECT_EQ(names_in(dir / "r" / "checkpoints"), std::vector<std::string>{"step-00000003.pt"});
  // A directory with run files that tt-run did not make is not emptied.
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "metrics.jsonl") << "{\"step\": 1}\n";
  std::ofstream(dir / "mine" / "notes.txt") << "keep me";
  r = run(tt_run_bin() + " " + (dir / "p.yaml").string() + " -q --overwrite --run-dir " + (dir / "mine").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--overwrite empties only a run directory"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "mine" / "notes.txt"));
  r = run(tt_run_bin() + " --resume " + (dir / "r").string() + " --overwrite");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("give one of them"), std::string::npos) << r.output;
}

TEST(Reliability, AnNpyFileTruncatedWhileTrainingStopsTheRunNamingTheFile) {
  const fs::path dir = temp_dir("sigbus");
  // 4000 documents x 1000 terms (16 MB): long enough to truncate while it trains
  at::Tensor x = at::randint(0, 3, {4000, 1000}, at::TensorOptions().dtype(at::kFloat));
  x.select(1, 0).fill_(1);  // no empty document
  const fs::path npy = dir / "X.npy";
  // the memory-mapped path: data.load memory (auto picks it for a file this small) reads the file once, before training
  tt::write_npy(npy, x);
  std::ofstream(dir / "p.yaml") << "name: bus\nseed: 0\ndata: {name: topic-npy, load: map, path: " << npy.string()
                                << "}\nmodel: {name: topic, k: 4}\n"
                                << "trainer: {batch_size: 8, epochs: 50, threads: 1, progress: off}\n"
                                << "output: {dir: " << dir.string() << ", plots: false}\n";
  const fs::path log = dir / "out.txt";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = tt_run_bin() + " " + (dir / "p.yaml").string() + " --run-dir " + (dir / "r").string() +
                            " > " + log.string() + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // once steps are being taken, cut the file to its header and a few rows
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (fs::exists(dir / "r" / "metrics.jsonl", ec) && fs::file_size(dir / "r" / "metrics.jsonl", ec) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  fs::resize_file(npy, 4096);
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 600 && !ended; ++i) {  // at most 60 s
    ended = waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(ended) << "tt-run did not stop after its input shrank:\n" << read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << read_file(log);
  EXPECT_EQ(WEXITSTATUS(status), 1) << read_file(log);
  const std::string out = read_file(log);
  EXPECT_NE(out.find(npy.string() + " changed while it was being read (SIGBUS"), std::string::npos) << out;
}

// Without gnuplot a plot is skipped with a note in its log; a gnuplot that exits before reading
// its script (here a stand-in that exits at once) must not end the process with SIGPIPE.
TEST(Reliability, AMissingOrDyingGnuplotSkipsThePlotWithoutKillingTheRun) {
  const auto dir = tt::test::temp_dir("gnuplot");
  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  const std::string big(1 << 20, '#');  // more than a pipe holds: the writer would block or get SIGPIPE
  setenv("PATH", (dir / "nowhere").c_str(), 1);
  EXPECT_FALSE(tt::gnuplot_png(big, dir / "a.png", "100,100", dir / "a.log"));
  EXPECT_NE(tt::test::read_file(dir / "a.log").find("gnuplot is not on PATH"), std::string::npos);
  fs::create_directories(dir / "bin");
  std::ofstream(dir / "bin" / "gnuplot") << "#!/bin/sh\nexit 1\n";
  fs::permissions(dir / "bin" / "gnuplot", fs::perms::owner_all);
  setenv("PATH", ((dir / "bin").string() + ":" + old_path).c_str(), 1);
  EXPECT_FALSE(tt::gnuplot_png(big, dir / "b.png", "100,100", dir / "b.log"));
  setenv("PATH", old_path.c_str(), 1);
  EXPECT_FALSE(fs::exists(dir / "b.png"));
  struct sigaction now {};
  sigaction(SIGPIPE, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL) << "SIGPIPE's disposition is restored";
}

namespace {

// tt-run started in the background (its own pid: exec'd by the shell), output to `log`.
pid_t start_tt_run(const std::string& args, const fs::path& log, const std::string& env = "") {
  const std::string cmd = env + " exec " + tt_run_bin() + " " + args + " > " + log.string() + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

bool wait_for_file(const fs::path& f, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(f)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits up to `seconds` for pid; kills it if it is still there. Returns the wait status, or -1
// when it had to be killed.
int wait_or_kill(pid_t pid, int seconds, double* waited = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (int i = 0; i < seconds * 50; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      if (waited) *waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// The tt-run processes whose command line names `path` (/proc, not pgrep): "PID: CMDLINE" lines,
// the first one's PID first.
std::string tt_runs_naming(const fs::path& path) {
  std::string found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_file(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find("tt-run") != std::string::npos && cmd.find(path.string()) != std::string::npos)
      found += pid + ": " + cmd + "\n";
  }
  return found;
}

const std::string kStallEnv = std::string("TT_PLUGIN_PATH=") + TT_TEST_MODULE_DIR + " TT_INTERRUPT_GRACE=2";

// Starts tt-run with `args`, sends SIGTERM once the stall plugin wrote `marker`, and waits up to
// 30 s for the end: its wait status (-1: still running, killed), output and seconds after SIGTERM.
struct Stopped {
  int status = -1;
  std::string out;
  double waited = 0;
};
Stopped sigterm_at_marker(const std::string& args, const fs::path& dir, const fs::path& marker, int marker_seconds) {
  Stopped r;
  const pid_t pid = start_tt_run(args, dir / "out.txt", kStallEnv);
  if (!wait_for_file(marker, marker_seconds)) {
    kill(pid, SIGKILL);
    waitpid(pid, &r.status, 0);
    r.status = -1;
    r.out = "the stall never started:\n" + read_file(dir / "out.txt");
    return r;
  }
  kill(pid, SIGTERM);
  r.status = wait_or_kill(pid, 30, &r.waited);
  r.out = read_file(dir / "out.txt");
  return r;
}

// dir/c.yaml: a comparison whose variant 'stalled' sleeps 120 s in INIT once it has written
// `marker`, after a variant 'plain' when `plain_first`, and before a variant 'after'.
void write_stalled_comparison(const fs::path& dir, const fs::path& marker, bool plain_first) {
  std::ofstream(dir / "c.yaml") << topic_yaml(dir, "  max_steps: 4\n",
                                              std::string("compare:\n  steps: 2\n  warmup_steps: 1\n  variants:\n") +
                                                  (plain_first ? "    plain: {}\n" : "") +
                                                  "    stalled: {plugins: [{name: test-stall, event: init, seconds: "
                                                  "120, marker: " + marker.string() + "}]}\n    after: {}\n");
}

}  // namespace

// A phase that does not look at interrupt requests (here a plugin that sleeps in INIT, as a long
// set-up would) still ends within the grace after SIGTERM, saying where it was.
TEST(Reliability, SigtermDuringALongSetupEndsTheRunWithinTheGraceNamingThePhase) {
  const fs::path dir = temp_dir("sigterm-setup");
  const fs::path marker = dir / "stalled";
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  epochs: 5\n",
                                              "plugins: [{name: test-stall, event: init, seconds: 120, marker: " +
                                                  marker.string() + "}]\n");
  const auto [status, out, waited] =
      sigterm_at_marker((dir / "p.yaml").string() + " --run-dir " + (dir / "r").string(), dir, marker, 120);
  ASSERT_NE(status, -1) << "still running 30 s after SIGTERM, or never stalled:\n" << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  EXPECT_LT(waited, 15.0) << out;  // the 2 s grace, and the process's exit
  EXPECT_NE(out.find("tt-run: still in setup 2 s after the interrupt; stopping now"), std::string::npos) << out;
}

// SIGTERM while a checkpoint is being written (the stall stands in for a slow disk): the run ends
// within the grace, the checkpoint written before is whole, and --resume continues from it.
TEST(Reliability, SigtermWhileACheckpointIsWrittenKeepsTheLastOneAndTheRunResumes) {
  const fs::path dir = temp_dir("sigterm-ckpt");
  const fs::path marker = dir / "stalled";
  std::ofstream(dir / "p.yaml") << topic_yaml(
      dir, "  max_steps: 8\n  checkpoint_every: 2\n",
      "plugins: [{name: test-stall, event: checkpoint, from_step: 4, seconds: 120, marker: " + marker.string() + "}]\n");
  const fs::path run_dir = dir / "r";
  [[maybe_unused]] const auto [status, out, waited] =
      sigterm_at_marker((dir / "p.yaml").string() + " --run-dir " + run_dir.string(), dir, marker, 120);
  ASSERT_NE(status, -1) << "still running 30 s after SIGTERM, or never stalled:\n" << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  EXPECT_NE(out.find("still writing a checkpoint 2 s after the interrupt"), std::string::npos) << out;
  // The stall ran before the step-4 checkpoint was written: step 2's is the newest, whole.
  const auto names = names_in(run_dir / "checkpoints");
  ASSERT_FALSE(names.empty()) << out;
  for (const auto& n : names) EXPECT_EQ(n.find(".tmp"), std::string::npos) << n;
  EXPECT_EQ(names, std::vector<std::string>{"step-00000002.pt"});
  // The plugin stalls once (its marker exists now): the resumed run goes to the end.
  const auto resumed = run(kStallEnv + " " + tt_run_bin() + " --resume " + run_dir.string());
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 2"), std::string::npos) << resumed.output;
  EXPECT_NE(read_file(run_dir / "summary.json").find("\"steps\": 8"), std::string::npos);
}

// Two tt-runs in one run directory mixed their checkpoints and records (one's pruning removed the
// other's checkpoints): while a run holds its directory, a second run there (--overwrite) and a
// resume of it are refused naming the process; once it has ended, the directory is free. And two
// runs named by the clock in the same second take two directories.
TEST(Reliability, ARunDirectoryInUseIsRefusedToAnotherProcessAndSameSecondRunsTakeTwoNames) {
  const fs::path dir = temp_dir("in-use");
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: 1000000\n  checkpoint_every: 5\n");
  const fs::path r = dir / "r";
  const pid_t pid = start_tt_run((dir / "p.yaml").string() + " -q --run-dir " + r.string(), dir / "first.log");
  struct KillAtEnd {  // an assertion that fails leaves no run of a million steps behind
    pid_t pid;
    ~KillAtEnd() {
      if (waitpid(pid, nullptr, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } stop_first{pid};
  // a checkpoint written (each is pruned 15 steps later: wait for any, not for one)
  bool checkpointed = false;
  for (int i = 0; i < 3000 && !checkpointed; ++i) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(r / "checkpoints", ec))
      checkpointed = checkpointed || e.path().extension() == ".pt";
    if (!checkpointed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(checkpointed) << read_file(dir / "first.log");
  for (const std::string& second : {(dir / "p.yaml").string() + " -q --overwrite trainer.max_steps=2 --run-dir " + r.string(),
                                    "--resume " + r.string() + " -q"}) {
    const auto refused = run(tt_run_bin() + " " + second);
    EXPECT_EQ(refused.rc, 2) << refused.output;
    EXPECT_NE(refused.output.find("the run directory " + r.string() + " is in use by another tt-run (process " +
                                  std::to_string(pid) + ")"),
              std::string::npos) << refused.output;
  }
  EXPECT_FALSE(names_in(r / "checkpoints").empty());  // not emptied by the refused --overwrite
  kill(pid, SIGINT);
  const int status = wait_or_kill(pid, 30);
  ASSERT_TRUE(status != -1 && WIFEXITED(status)) << read_file(dir / "first.log");
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_file(dir / "first.log");
  const auto again = run(tt_run_bin() + " " + (dir / "p.yaml").string() + " -q --overwrite trainer.max_steps=2 --run-dir " +
                         r.string());
  EXPECT_EQ(again.rc, 0) << again.output;
  EXPECT_NE(read_file(r / "summary.json").find("\"steps\": 2"), std::string::npos);
  ASSERT_EQ(run(tt_run_bin() + " " + (dir / "p.yaml").string() + " -q trainer.max_steps=1 --run-dir " +
                (dir / "fresh").string()).rc, 0);
  EXPECT_TRUE(fs::exists(dir / "fresh" / ".tt-lock"));
  EXPECT_EQ(read_file(dir / "fresh" / "summary.json").find(".tt-lock"), std::string::npos);  // not an output
  // the clock's names: each call makes its directory, so the second in the same second is another
  const fs::path a = tt::timestamped_dir(dir / "auto", "p"), b = tt::timestamped_dir(dir / "auto", "p");
  EXPECT_NE(a, b);
  EXPECT_TRUE(fs::is_directory(a) && fs::is_directory(b));
}

// A learning rate given to a resume (the way out of a NaN: --resume RUN optimizer.lr=SMALLER)
// applies from its first step, at the rate a run of that lr has there; it applied one step late,
// the checkpoint's own rate taken first.
TEST(Reliability, ALearningRateGivenToAResumeAppliesFromItsFirstStep) {
  const fs::path dir = temp_dir("resume-lr");
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "");
  const std::string p = tt_run_bin() + " " + (dir / "p.yaml").string() + " -q";
  ASSERT_EQ(run(p + " trainer.max_steps=4 optimizer.lr=0.2 --run-dir " + (dir / "straight").string()).rc, 0);
  ASSERT_EQ(run(p + " trainer.max_steps=2 --run-dir " + (dir / "r").string()).rc, 0);
  const auto r = run(tt_run_bin() + " --resume " + (dir / "r").string() + " -q trainer.max_steps=4 optimizer.lr=0.2");
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto lr_at = [](const fs::path& metrics, int64_t step) {
    for (const auto& line : tt::test::step_lines(metrics)) {
      const auto j = nlohmann::json::parse(line);
      if (j["step"] == step && j.contains("lr")) return j["lr"].get<double>();
    }
    return -1.0;
  };
  const double at_2 = lr_at(dir / "r" / "metrics.jsonl", 2), at_3 = lr_at(dir / "r" / "metrics.jsonl", 3);
  ASSERT_GT(at_2, 0);
  EXPECT_GT(at_3, 2 * at_2);  // the new base rate, not the checkpoint's
  for (int64_t step : {3, 4}) {
    const double resumed = lr_at(dir / "r" / "metrics.jsonl", step);
    ASSERT_GT(resumed, 0) << step;
    EXPECT_EQ(resumed, lr_at(dir / "straight" / "metrics.jsonl", step)) << step;
  }
}

// tt-run --compare passes an interrupt on to the variant it is running (in its own process
// group, so a Ctrl-C at the terminal reaches only the parent), and both end, the table of the
// variants that finished written.
TEST(Reliability, SigtermToCompareEndsTheVariantItRunsAndTheComparison) {
  const fs::path dir = temp_dir("sigterm-compare");
  const fs::path marker = dir / "stalled";
  write_stalled_comparison(dir, marker, true);
  [[maybe_unused]] const auto [status, out, waited] =
      sigterm_at_marker((dir / "c.yaml").string() + " --run-dir " + (dir / "cmp").string(), dir, marker, 180);
  ASSERT_NE(status, -1) << "still running 30 s after SIGTERM, or never stalled:\n" << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  // The table holds the variant that finished; the interrupted one's row says so.
  ASSERT_TRUE(fs::exists(dir / "cmp" / "compare.json")) << out;
  const auto j = tt::test::read_json(dir / "cmp" / "compare.json");
  ASSERT_EQ(j["variants"].size(), 3u) << j.dump(1);
  EXPECT_EQ(j["variants"][0]["name"], "plain");
  EXPECT_EQ(j["variants"][0]["status"], "ok");
  EXPECT_GT(j["variants"][0]["peak_tensor_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["variants"][1]["name"], "stalled");
  EXPECT_EQ(j["variants"][1]["status"], "interrupted");
  EXPECT_EQ(j["variants"][2]["name"], "after");
  EXPECT_EQ(j["variants"][2]["status"], "not run");
  EXPECT_EQ(j["variants"][2]["reason"], "the comparison was interrupted before this variant");
  EXPECT_FALSE(fs::exists(dir / "cmp" / "after")) << "the variant after the interrupt did not start";
  EXPECT_NE(out.find("the comparison was interrupted; the table holds the variants that finished (a comparison is "
                     "not resumed: run it again to measure them all)"),
            std::string::npos)
      << out;
  // No tt-run of this comparison is left.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(tt_runs_naming(dir / "cmp"), "");
}

// A signal to every process of a comparison (`pkill tt-run`, a container's stop, a batch
// system's SIGTERM) is an interrupt, not a crash: the variant running gets it twice, directly
// and passed on by the comparison, and stops as a run does (the second, its parent's, is not a
// second Ctrl-C); its row says interrupted and the comparison ends with 130.
TEST(Reliability, SigtermToEveryProcessOfACompareIsAnInterruptNotACrash) {
  const fs::path dir = temp_dir("sigterm-compare-all");
  const fs::path marker = dir / "stalled";
  write_stalled_comparison(dir, marker, false);
  const pid_t pid =
      start_tt_run((dir / "c.yaml").string() + " --run-dir " + (dir / "cmp").string(), dir / "out.txt", kStallEnv);
  ASSERT_TRUE(wait_for_file(marker, 180)) << read_file(dir / "out.txt");
  const std::string variant = tt_runs_naming(dir / "cmp" / "stalled");
  ASSERT_NE(variant, "") << "no process of the running variant";
  kill(static_cast<pid_t>(std::stol(variant)), SIGTERM);  // as pkill would: each process once
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(pid, SIGTERM);
  const int status = wait_or_kill(pid, 30);
  const std::string out = read_file(dir / "out.txt");
  ASSERT_NE(status, -1) << "still running 30 s after SIGTERM:\n" << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  const auto j = tt::test::read_json(dir / "cmp" / "compare.json");
  ASSERT_EQ(j["variants"].size(), 2u) << j.dump(1);
  EXPECT_EQ(j["variants"][0]["status"], "interrupted") << j.dump(1);
  EXPECT_EQ(j["variants"][1]["status"], "not run") << j.dump(1);
  // the variant ended by its own grace (130), not killed by the signal passed on to it
  EXPECT_HAS(read_file(dir / "cmp" / "stalled.log"), "still in setup 2 s after the interrupt");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(tt_runs_naming(dir / "cmp"), "");
}

// tt-run --nproc passes the first Ctrl-C / SIGTERM on to its workers and answers a second with
// SIGKILL: a second Ctrl-C ends a data-parallel run at once, as it does a run alone (the grace,
// 60 s here, is not waited for).
TEST(Reliability, ASecondSignalToTheLauncherEndsItsWorkersAtOnce) {
  const fs::path dir = temp_dir("sigterm-nproc");
  const fs::path marker = dir / "stalled";
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: 4\n",
                                              "plugins: [{name: test-stall, event: init, seconds: 120, marker: " +
                                                  marker.string() + "}]\n");
  const std::string env = std::string("TT_PLUGIN_PATH=") + TT_TEST_MODULE_DIR + " TT_INTERRUPT_GRACE=60";
  const pid_t pid = start_tt_run("--nproc 2 " + (dir / "p.yaml").string() + " -q --run-dir " + (dir / "r").string(),
                                 dir / "out.txt", env);
  ASSERT_TRUE(wait_for_file(marker, 180)) << read_file(dir / "out.txt");
  kill(pid, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid, SIGTERM);
  double waited = 0;
  const int status = wait_or_kill(pid, 30, &waited);
  ASSERT_NE(status, -1) << "still running 30 s after the second SIGTERM:\n" << read_file(dir / "out.txt");
  EXPECT_LT(waited, 10.0) << read_file(dir / "out.txt");
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(dir / "out.txt");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(tt_runs_naming(dir / "r"), "");
}

// More threads than the process may use are capped at its cores, with a warning.
TEST(Reliability, MoreThreadsThanCoresAreCappedWithAWarning) {
  const fs::path dir = temp_dir("threads");
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: 2\n");
  const int cores = tt::usable_cores();
  const auto r = run(tt_run_bin() + " " + (dir / "p.yaml").string() + " --run-dir " + (dir / "r").string() +
                     " trainer.threads=" + std::to_string(cores + 62));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("trainer.threads is " + std::to_string(cores + 62) + ", more than the " +
                          std::to_string(cores) + " cores this process may use; using " + std::to_string(cores)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("| " + std::to_string(cores) + " threads |"), std::string::npos) << r.output;
}

// trainer.threads 0 takes OMP_NUM_THREADS when it is set, as PyTorch does (capped at the cores,
// with a warning naming it); trainer.threads above 0 takes precedence; a malformed value is a
// configuration error naming the variable.
TEST(Reliability, OmpNumThreadsSetsTheDefaultThreadsAndAMalformedOneIsRefused) {
  const fs::path dir = temp_dir("omp_threads");
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: 2\n");
  const int cores = tt::usable_cores();
  const auto threads_of = [&](const std::string& env, const std::string& extra, const std::string& tag) {
    const auto r = run("env " + env + " " + tt_run_bin() + " " + (dir / "p.yaml").string() + " --run-dir " +
                       (dir / tag).string() + extra);
    EXPECT_EQ(r.rc, 0) << r.output;
    const auto summary = nlohmann::json::parse(read_file(dir / tag / "summary.json"), nullptr, false);
    return std::make_pair(summary.is_object() ? summary.value("threads", -1) : -1, r.output);
  };
  const std::string dflt = " trainer.threads=0";  // the test pipeline asks for 1
  EXPECT_EQ(threads_of("-u OMP_NUM_THREADS", dflt, "unset").first, cores);
  EXPECT_EQ(threads_of("OMP_NUM_THREADS=' '", dflt, "blank").first, cores);  // blank is unset, as for libgomp
  if (cores >= 2) {  // on one core every count below is 1 whatever the variable says
    EXPECT_EQ(threads_of("OMP_NUM_THREADS=1", dflt, "one").first, 1);
    EXPECT_EQ(threads_of("OMP_NUM_THREADS=' 1 , 2'", dflt, "nested").first, 1);  // OpenMP's list: the first level
    EXPECT_EQ(threads_of("OMP_NUM_THREADS=1", " trainer.threads=" + std::to_string(cores), "explicit").first, cores);
  }
  const auto [capped, out] = threads_of("OMP_NUM_THREADS=" + std::to_string(cores + 3), dflt, "capped");
  EXPECT_EQ(capped, cores);
  EXPECT_NE(out.find("OMP_NUM_THREADS is " + std::to_string(cores + 3) + ", more than the " + std::to_string(cores) +
                     " cores this process may use"),
            std::string::npos)
      << out;
  for (const std::string bad : {"two", "0", "-3", "4x", "1,x", "1,0", "2,"}) {
    const auto r = run("env OMP_NUM_THREADS=" + bad + " " + tt_run_bin() + " " + (dir / "p.yaml").string() +
                       " --run-dir " + (dir / ("bad" + bad)).string() + dflt);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("OMP_NUM_THREADS='" + bad + "' is not a positive number of threads"), std::string::npos)
        << r.output;
  }
}

// A topic run of `steps` steps with a checkpoint every `every` steps in DIR/r: its checkpoints,
// oldest first (empty when the run failed, which the caller's size check reports).
static std::vector<fs::path> topic_checkpoints(const fs::path& dir, int steps, int every) {
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: " + std::to_string(steps) +
                                                       "\n  checkpoint_every: " + std::to_string(every) + "\n");
  const auto r = run(tt_run_bin() + " -q " + (dir / "p.yaml").string() + " --run-dir " + (dir / "r").string());
  EXPECT_EQ(r.rc, 0) << r.output;
  return tt::list_checkpoints(dir / "r" / "checkpoints");
}

// tt checks a checkpoint's zip records against their CRC-32 before LibTorch reads it: a sound
// archive passes, one flipped byte in any record is named, and resume falls back past it.
TEST(Reliability, ADamagedCheckpointRecordIsFoundByItsCrcAndResumeUsesThePreviousOne) {
  const fs::path dir = temp_dir("crc"), run_dir = dir / "r";
  const auto files = topic_checkpoints(dir, 4, 2);
  ASSERT_EQ(files.size(), 2u);
  for (const auto& f : files) EXPECT_EQ(tt::archive_damage(f), "") << f;
  // One byte in the middle of the newest archive (inside a record's data).
  std::string bytes = read_file(files.back());
  bytes[bytes.size() / 3] = static_cast<char>(bytes[bytes.size() / 3] ^ 0x5a);
  std::ofstream(files.back(), std::ios::binary | std::ios::trunc) << bytes;
  const std::string damage = tt::archive_damage(files.back());
  EXPECT_NE(damage.find("fails its CRC-32 check"), std::string::npos) << damage;
  EXPECT_NE(damage.find("record 'archive/"), std::string::npos) << damage;
  const auto r = run(tt_run_bin() + " --resume " + run_dir.string() + " trainer.max_steps=6");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("is unreadable (damaged: record"), std::string::npos) << r.output;
  // the line says what the command line changed (pipeline.yaml now holds it; log.txt keeps both)
  EXPECT_NE(r.output.find("resumed from " + files.front().string() + " at step 2 with trainer.max_steps=6"),
            std::string::npos) << r.output;
}

// LibTorch deflates a checkpoint's TorchScript sources (archive/code/...) and, its zip reader
// being built without CRC checks, parses whatever they inflate to (its parser crashed on such a
// record): tt inflates every deflated record and checks its CRC-32 too. Every damaged archive the
// fuzzer found (tests/fuzz/regressions/checkpoint) is refused the same way.
TEST(Reliability, ADamagedDeflatedCheckpointRecordIsFoundAndEveryFuzzedArchiveIsRefused) {
  const fs::path dir = temp_dir("deflated");
  const auto files = topic_checkpoints(dir, 2, 2);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(tt::archive_damage(files[0]), "");
  std::string bytes = read_file(files[0]);
  // The first "archive/code/__torch__.py" is the name in its record's local header.
  const std::string name = "archive/code/__torch__.py";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  ASSERT_GE(at, 30u);
  auto u16 = [&](size_t p) { return static_cast<size_t>(static_cast<unsigned char>(bytes[p])) |
                                    static_cast<size_t>(static_cast<unsigned char>(bytes[p + 1])) << 8; };
  // Its sizes are in its central directory entry (the local header's are 0: a data descriptor
  // follows the data), at the end: the last occurrence of the name.
  const size_t central = bytes.rfind(name) - 46;
  ASSERT_GT(central, at);
  const size_t local = at - 30, method = u16(local + 8), csize = u16(central + 20) | u16(central + 22) << 16;
  EXPECT_EQ(method, 8u) << "LibTorch stores this source uncompressed now: the check still runs, as for any record";
  ASSERT_GT(csize, 8u);
  const size_t data = at + name.size() + u16(local + 28);
  bytes[data + csize / 2] = static_cast<char>(bytes[data + csize / 2] ^ 0x21);
  const fs::path damaged = dir / "damaged.pt";
  std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;
  const std::string why = tt::archive_damage(damaged);
  EXPECT_EQ(why.rfind("record '" + name + "' ", 0), 0u) << why;
  int found = 0;
  for (const auto& e : fs::directory_iterator(fs::path(tt::test::source_dir()) / "tests/fuzz/regressions/checkpoint")) {
    EXPECT_NE(tt::archive_damage(e.path()), "") << e.path() << " would reach LibTorch's reader";
    ++found;
  }
  EXPECT_GE(found, 3);
}

// A central directory that names one record twice, or names a record whose local header is
// another's, passes every CRC (the bytes are sound) but makes LibTorch read the wrong bytes under
// a name (its TorchScript parser crashed on one such archive): both are damage, named.
TEST(Reliability, ACheckpointDirectoryNamingARecordTwiceOrAnotherRecordsBytesIsDamage) {
  const fs::path dir = temp_dir("zipnames");
  const auto files = topic_checkpoints(dir, 2, 2);
  ASSERT_EQ(files.size(), 1u);
  const std::string sound = read_file(files.back());
  // The central directory is at the end: the last "archive/data/1" (not "archive/data/1x") is
  // its entry's name.
  size_t at = sound.size();
  do at = sound.rfind("archive/data/1", at - 1);
  while (at != std::string::npos && at > 0 && at + 14 < sound.size() && std::isdigit(static_cast<unsigned char>(sound[at + 14])));
  ASSERT_NE(at, std::string::npos);
  ASSERT_GT(at, sound.rfind("archive/data/0"));  // data/0's directory entry comes first
  auto damaged = [&](char last) {
    std::string bytes = sound;
    bytes[at + 13] = last;
    const fs::path f = dir / (std::string("named-") + last + ".pt");
    std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
    return tt::archive_damage(f);
  };
  EXPECT_EQ(damaged('1'), "");
  EXPECT_EQ(damaged('0'), "record 'archive/data/0' appears twice in its central directory");
  EXPECT_EQ(damaged('Z'), "record 'archive/data/Z': its local header names another record");
}

// A crash whose stack the unwinder cannot follow (a call through a pointer to nowhere: the
// instruction address lies in no library) still says where it came from: the faulting address
// and instruction, then the stack's code addresses, the plugin's call site among them.
TEST(Reliability, ACrashThroughABadFunctionPointerIsReportedWithItsCaller) {
  const fs::path dir = temp_dir("crash-report");
  std::ofstream(dir / "p.yaml") << topic_yaml(dir, "  max_steps: 2\n", "plugins: [{name: test-crash, how: bad-call}]\n");
  const auto r = run(std::string("TT_PLUGIN_PATH=") + TT_TEST_MODULE_DIR + " " + tt_run_bin() + " " +
                     (dir / "p.yaml").string() + " -q --run-dir " + (dir / "r").string());
  EXPECT_EQ(r.rc, 128 + SIGSEGV) << r.output;
  EXPECT_NE(r.output.find("tt-run: crashed (SIGSEGV)\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fault address 0x10 (in no loaded library"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("instruction 0x10 (in no loaded library"), std::string::npos) << r.output;
  const auto stack = r.output.find("code addresses on the stack, nearest first:\n");
  ASSERT_NE(stack, std::string::npos) << r.output;
  // the first code address above the stack pointer is the return address into the plugin
  const auto first = r.output.find('\n', stack) + 1;
  const std::string line = r.output.substr(first, r.output.find('\n', first) - first);
  EXPECT_NE(line.find("tt_plugin_test-crash.so+0x"), std::string::npos) << r.output;
  // a write through a null pointer is said to be one, not taken for a bad call
  std::ofstream(dir / "n.yaml") << topic_yaml(dir, "  max_steps: 2\n", "plugins: [{name: test-crash, how: null-write}]\n");
  const auto n = run(std::string("TT_PLUGIN_PATH=") + TT_TEST_MODULE_DIR + " " + tt_run_bin() + " " +
                     (dir / "n.yaml").string() + " -q --run-dir " + (dir / "n").string());
  EXPECT_EQ(n.rc, 128 + SIGSEGV) << n.output;
  EXPECT_NE(n.output.find("fault address 0x0 (a null pointer: the code read or wrote through a pointer that is null)"),
            std::string::npos) << n.output;
  EXPECT_NE(n.output.find("instruction 0x"), std::string::npos) << n.output;
  EXPECT_NE(n.output.find("tt_plugin_test-crash.so+0x"), std::string::npos) << n.output;
  fs::remove_all(dir);
}
