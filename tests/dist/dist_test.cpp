// Data-parallel training through tt-run --nproc 2 on loopback (Gloo): replicas stay bitwise
// equal, 2 ranks x batch b follow 1 rank x batch 2b, a dead rank ends the run, skips are
// collective, and bad settings are refused with clear errors.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <thread>

#include "checkpoint_reader.h"
#include "test_support.h"
#include "tt/npy.h"
#include "tt/runtime.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using tt::test::checkpoint_params;
using tt::test::csv_rows;
using tt::test::read_file;
using tt::test::run;
using tt::test::summary_of;
using tt::test::tt_run_bin;

namespace {

// A TCP socket bound to a port of `address` the kernel picks (set in `port`), listening when
// `listen` says so; -1 where it cannot be made.
int bound_socket(uint32_t address, bool listen, int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(address);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || (listen && ::listen(fd, 4) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  return fd;
}

// A port free now on every address (rank 0's store listens on all), picked by the kernel, for a
// test's MASTER_PORT: fixed ports collided with another run of the suite on the same machine,
// or with anything listening there.
int free_port() {
  int port = 0;
  const int fd = bound_socket(INADDR_ANY, false, port);
  if (fd < 0) throw std::runtime_error(std::string("no free port: ") + std::strerror(errno));
  ::close(fd);
  return port;
}

// The first CPU this process may run on (taskset -c 0 fails where CPU 0 is not in the allowed set).
int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) return c;
  return 0;
}

std::vector<double> losses(const fs::path& run_dir) {
  std::vector<double> out;
  for (const auto& l : tt::test::step_lines(run_dir / "metrics.jsonl")) out.push_back(json::parse(l)["loss"].get<double>());
  return out;
}

// The topic model on 64 synthetic documents (no dropout; map-style data).
// The batch size is set on the command line (topic_yaml has one in the file).
fs::path topic_pipeline(const fs::path& dir, const std::string& name, const std::string& extra = "") {
  const fs::path f = dir / (name + ".yaml");
  std::ofstream(f) << tt::test::topic_yaml(dir, "  epochs: 3\n" + extra);
  return f;
}

std::string env_clean() {
  return "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT ";
}

// Two ranks started by hand, as torchrun would, on loopback port `port`: rank 1 in the background
// (its output to dir/r1.txt, its exit status to dir/r1.rc), rank 0 in the foreground; each runs
// tt-run with its `args`, from its `cwd`. Returns rank 0's output, "rc0=N" after it.
tt::test::RunResult two_ranks_by_hand(const fs::path& dir, int port, const fs::path& cwd0, const std::string& args0,
                                      const fs::path& cwd1, const std::string& args1) {
  const std::string common =
      "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " TT_DIST_TIMEOUT=20 ";
  return run("{ (cd " + cwd1.string() + " && RANK=1 " + common + tt_run_bin() + " " + args1 + " > " +
             (dir / "r1.txt").string() + " 2>&1; echo $? > " + (dir / "r1.rc").string() + ") & cd " + cwd0.string() +
             " && RANK=0 " + common + tt_run_bin() + " " + args0 + "; echo rc0=$?; wait; }");
}

// Workers started by hand at once, each with its own environment (`envs[k]`, e.g. "RANK=1
// WORLD_SIZE=3") and the same `args`, on loopback port `port`; worker k's output goes to
// dir/wK.txt. Returns each one's exit status and the seconds until the last ended.
struct WorkersEnded {
  std::vector<int> rcs;
  double seconds = 0;
};
WorkersEnded workers_by_hand(const fs::path& dir, int port, const std::vector<std::string>& envs, const std::string& args) {
  std::string cmd = "{ ";
  for (size_t k = 0; k < envs.size(); ++k) {
    const std::string w = (dir / ("w" + std::to_string(k))).string();
    cmd += "(" + env_clean() + envs[k] + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
           " TT_DIST_TIMEOUT=30 " + tt_run_bin() + " " + args + " > " + w + ".txt 2>&1; echo $? > " + w + ".rc) & ";
  }
  const auto t0 = std::chrono::steady_clock::now();
  run(cmd + "wait; }");
  WorkersEnded e;
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t k = 0; k < envs.size(); ++k) e.rcs.push_back(std::stoi(read_file(dir / ("w" + std::to_string(k) + ".rc"))));
  return e;
}

// Runs `command` in the background (its output to dir/interrupted.txt), sends it SIGINT once
// `ready` (a shell condition) holds, or after 60 s, and returns its output and exit status, with
// the milliseconds from the interrupt to its end in `ms`: the interrupt lands in the phase a test
// means whatever the machine's load (a fixed delay landed before the workers were set up on a
// loaded machine, where they died of it).
tt::test::RunResult interrupt_when(const fs::path& dir, const std::string& command, const std::string& ready,
                                   int64_t* ms = nullptr) {
  const std::string out = (dir / "interrupted.txt").string(), took = (dir / "interrupted.ms").string();
  auto r = run("{ " + command + " > " + out + " 2>&1 & pid=$!; for i in $(seq 600); do " + ready +
               " && break; sleep 0.1; done; t0=$(date +%s%N); kill -INT $pid; wait $pid; rc=$?; echo $(( ($(date "
               "+%s%N) - t0) / 1000000 )) > " + took + "; exit $rc; }");
  r.output = read_file(out) + r.output;
  if (ms) *ms = std::stoll("0" + read_file(took));
  return r;
}

// A shell condition: `metrics` (a run's metrics.jsonl) has a step's line.
std::string trains(const fs::path& metrics) { return "grep -q '\"step\"' " + metrics.string() + " 2>/dev/null"; }

}  // namespace

TEST(Dist, TwoRanksStayBitwiseEqualOnTheLm) {
  tt::test::TinyLm lm("dist_lm");
  const fs::path yaml = lm.dir / "lm.yaml";
  lm.run("lm", "[]", "batch_size: 4, max_steps: 1");  // writes lm.yaml (and a 1-process run)
  auto r = run(env_clean() + tt_run_bin() + " --nproc 2 " + yaml.string() +
               " trainer.max_steps=6 trainer.micro_batch_size=2 -q --run-dir " + (lm.dir / "ddp").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  json s = summary_of(lm.dir / "ddp");
  EXPECT_EQ(s["world_size"], 2);
  EXPECT_EQ(s["steps"], 6);
  ASSERT_EQ(s["replica_parameter_hashes"].size(), 2u);
  EXPECT_EQ(s["replica_parameter_hashes"][0], s["replica_parameter_hashes"][1]);
  auto lines = tt::test::step_lines(lm.dir / "ddp" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  for (const auto& l : lines) EXPECT_GE(json::parse(l)["comm_seconds"].get<double>(), 0.0);
  EXPECT_TRUE(s.contains("median_comm_seconds"));
}

TEST(Dist, TwoRanksOfBatchBFollowOneRankOfBatch2BAndRank0LogsTheLaunchInLogTxt) {
  const fs::path dir = tt::test::temp_dir("dist_traj");
  // trainer.threads 0 (the test pipeline asks for 1): the threads each process takes by default
  auto one = run(env_clean() + tt_run_bin() + " " + topic_pipeline(dir, "one").string() +
                 " trainer.threads=0 trainer.batch_size=16 -q --run-dir " +
                 (dir / "one").string());
  ASSERT_EQ(one.rc, 0) << one.output;
  auto two = run(env_clean() + tt_run_bin() + " --nproc 2 " + topic_pipeline(dir, "two").string() +
                 " trainer.threads=0 trainer.batch_size=8 -q --run-dir " + (dir / "two").string());
  ASSERT_EQ(two.rc, 0) << two.output;
  auto a = losses(dir / "one"), b = losses(dir / "two");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(a.size(), b.size());
  // Float sums run in another order (each rank's partial sum, then the all-reduce): equal to
  // rounding, within 1e-5 relative.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(a[i])) << "step " << i + 1;
  json s = summary_of(dir / "two");
  EXPECT_EQ(s["replica_parameter_hashes"][0], s["replica_parameter_hashes"][1]);
  // what the launch was, in summary.json; log.txt begins with rank 0's lines from before it opened
  EXPECT_EQ(s["distributed"]["rank"], 0);
  const std::string log_txt = read_file(dir / "two" / "log.txt");
  EXPECT_LT(log_txt.find("[info] distributed: rank 0 of 2 waiting for the other workers at 127.0.0.1:"),
            log_txt.find("[info] distributed: rank 0 of 2 (local rank 0), master 127.0.0.1:")) << log_txt;
  EXPECT_LT(log_txt.find("[info] distributed: rank 0 of 2 (local rank 0)"), log_txt.find(" run dir ")) << log_txt;
  EXPECT_EQ(log_txt.find("rank 1"), std::string::npos) << log_txt;
  EXPECT_EQ(s["distributed"]["local_world_size"], 2);
  EXPECT_EQ(s["distributed"]["backend"], "gloo");
  EXPECT_EQ(s["distributed"]["master"].get<std::string>().rfind("127.0.0.1:", 0), 0u) << s["distributed"];
  // The launcher shares the cores among its workers (OMP_NUM_THREADS = cores / 2 unless set),
  // where the process alone takes them all.
  const int cores = tt::usable_cores(), env = tt::threads_from_environment();
  EXPECT_EQ(summary_of(dir / "one")["threads"], std::min(cores, env > 0 ? env : cores));
  EXPECT_EQ(s["threads"], std::min(cores, env > 0 ? env : std::max(1, cores / 2)));
  if (cores >= 2) {  // an OMP_NUM_THREADS of the user's reaches the workers as it is
    auto all = run(env_clean() + "OMP_NUM_THREADS=" + std::to_string(cores) + " " + tt_run_bin() + " --nproc 2 " +
                   topic_pipeline(dir, "all").string() + " trainer.threads=0 trainer.max_steps=1 -q --run-dir " +
                   (dir / "all").string());
    ASSERT_EQ(all.rc, 0) << all.output;
    EXPECT_EQ(summary_of(dir / "all")["threads"], cores);
    // ... and two workers of all the cores each are warned about, once
    const std::string warning = "2 workers on this machine x " + std::to_string(cores) + " threads each = " +
                                std::to_string(2 * cores) + ", more than its " + std::to_string(cores) + " cores";
    EXPECT_HAS(all.output, warning);
    EXPECT_EQ(all.output.find(warning), all.output.rfind(warning)) << all.output;
    EXPECT_HAS(all.output, "unset OMP_NUM_THREADS (the workers then share the cores out) or set it to at most " +
                               std::to_string(std::max(1, cores / 2)));
    // the workers of the run above warned exactly where their threads add up to more than the cores
    EXPECT_EQ(two.output.find("workers on this machine") != std::string::npos, 2 * s["threads"].get<int>() > cores)
        << two.output;
  }
  // rank 0 alone wrote the run directory
  EXPECT_TRUE(fs::exists(dir / "two" / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir / "two" / "checkpoints"));
}

// The tabular model too: each episode's feature identities come from the episode (id_seed), not
// from a rank's generator, and its loss is each table's mean averaged over the tables, so the
// trainer's weighting of ranks by their tables gives the whole batch's gradient.
TEST(Dist, TheTabularModelOf2RanksOfBatchBFollows1RankOfBatch2BAndPredictsAlikeInOneProcess) {
  const fs::path dir = tt::test::temp_dir("dist_tab");
  {
    std::ofstream csv(dir / "t.csv");
    csv << "a,b,c,y\n";
    for (int i = 0; i < 90; ++i) csv << (i % 3) * 2 + (i % 7) * 0.1 << "," << (i % 5) * 0.3 << "," << i % 4 << "," << i % 3 << "\n";
  }
  std::ofstream(dir / "t.yaml") << "name: tab\nseed: 0\ndata: {name: tabular-csv, path: " << (dir / "t.csv").string()
                                << ", support_size: 16, query_size: 8, episodes: 8}\nmodel: {name: tabular-icl, d_cell: 4, "
                                   "d_id: 8, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, ensemble: 1}\n"
                                   "optimizer: {name: adamw, lr: 1.0e-3}\ntrainer: {epochs: 2, threads: 0}\n"
                                   "output: {dir: " << dir.string() << ", plots: false}\n";
  const std::string yaml = (dir / "t.yaml").string();
  auto one = run(env_clean() + tt_run_bin() + " " + yaml + " trainer.batch_size=4 -q --run-dir " + (dir / "one").string());
  ASSERT_EQ(one.rc, 0) << one.output;
  auto two = run(env_clean() + tt_run_bin() + " --nproc 2 " + yaml + " trainer.batch_size=2 -q --run-dir " +
                 (dir / "two").string());
  ASSERT_EQ(two.rc, 0) << two.output;
  auto a = losses(dir / "one"), b = losses(dir / "two");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * std::abs(a[i])) << "step " << i + 1;
  // The finished run of 2 predicts in one process as with 2 (its model only is read).
  const std::string predict = " --resume " + (dir / "two").string() + " --predict " + (dir / "t.csv").string();
  auto by_two = run(env_clean() + tt_run_bin() + " --nproc 2" + predict + " --predict-out " + (dir / "p2.csv").string());
  ASSERT_EQ(by_two.rc, 0) << by_two.output;
  auto by_one = run(env_clean() + tt_run_bin() + predict + " --predict-out " + (dir / "p1.csv").string());
  ASSERT_EQ(by_one.rc, 0) << by_one.output;
  EXPECT_NE(by_one.output.find("was trained by 2 processes; its model is read for use in this one"), std::string::npos)
      << by_one.output;
  const auto p1 = csv_rows(dir / "p1.csv"), p2 = csv_rows(dir / "p2.csv");
  ASSERT_EQ(p1.size(), 90u) << read_file(dir / "p1.csv");
  ASSERT_EQ(p2.size(), p1.size()) << read_file(dir / "p2.csv");
  // The same model on the same rows: the same classes, and probabilities alike to rounding (a
  // rank computes with half the threads, and a matmul's sums split over threads round apart).
  for (size_t i = 0; i < p1.size(); ++i) {
    ASSERT_EQ(p1[i].size(), 4u) << "p1.csv row " << i + 1 << ": p_0, p_1, p_2, predicted";
    for (const auto& [column, value] : p1[i]) {
      ASSERT_EQ(p2[i].count(column), 1u) << "p2.csv has no column " << column;
      if (column == "predicted")
        EXPECT_EQ(value, p2[i].at(column)) << "row " << i + 1 << ": the predicted class";
      else
        EXPECT_NEAR(std::stod(value), std::stod(p2[i].at(column)), 1e-5) << "row " << i + 1 << ", " << column;
    }
  }
}

TEST(Dist, ResumeNeedsTheSameWorldSizeButAFinishedRunIsUsedInOneProcess) {
  const fs::path dir = tt::test::temp_dir("dist_resume");
  const fs::path y = topic_pipeline(dir, "r", "  checkpoint_every: 4\n");
  auto full = run(env_clean() + tt_run_bin() + " --nproc 2 " + y.string() + " trainer.batch_size=8 -q --run-dir " + (dir / "full").string());
  ASSERT_EQ(full.rc, 0) << full.output;
  // a copy stopped after step 4: refused in one process; resumed with 2, the same losses after it
  fs::copy(dir / "full", dir / "half", fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(dir / "half" / "checkpoints"))
    if (e.path().filename().string() > "step-00000004.pt") fs::remove(e.path());
  auto one = run(env_clean() + tt_run_bin() + " --resume " + (dir / "half").string() + " -q");
  EXPECT_EQ(one.rc, 2) << one.output;
  EXPECT_NE(one.output.find("same world size"), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("a --sample or --predict of a completed run, with no trainer.max_steps or trainer.epochs "
                            "given, runs in one process"),
            std::string::npos) << one.output;
  EXPECT_NE(one.output.find("start a new run from its weights: model.init_from=" + (dir / "half").string()),
            std::string::npos) << one.output;
  auto res = run(env_clean() + tt_run_bin() + " --nproc 2 --resume " + (dir / "half").string() + " -q");
  ASSERT_EQ(res.rc, 0) << res.output;
  const json full_summary = summary_of(dir / "full"), half_summary = summary_of(dir / "half");
  EXPECT_EQ(half_summary["steps_this_run"].get<int>(), full_summary["steps_this_run"].get<int>() - 4);  // after step 4
  auto a = losses(dir / "full"), b = losses(dir / "half");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6 * std::abs(a[i])) << "step " << i + 1;
  // The finished run resumed in one process trains nothing and keeps its outputs; asked for more
  // steps it is refused as the stopped one is.
  const std::string metrics = read_file(dir / "full" / "metrics.jsonl");
  auto used = run(env_clean() + tt_run_bin() + " --resume " + (dir / "full").string());
  EXPECT_EQ(used.rc, 0) << used.output;
  EXPECT_NE(used.output.find("is complete at step"), std::string::npos) << used.output;
  EXPECT_EQ(read_file(dir / "full" / "metrics.jsonl"), metrics);
  auto more = run(env_clean() + tt_run_bin() + " --resume " + (dir / "full").string() + " trainer.max_steps=99 -q");
  EXPECT_EQ(more.rc, 2) << more.output;
  EXPECT_NE(more.output.find("same world size"), std::string::npos) << more.output;
}

TEST(Dist, ARefusalOnRank0StopsEveryRankWithItsExitCode) {
  // Rank 0 alone checks and takes the run directory. Its refusal reaches the other ranks, which
  // stop with the same exit code and say why, rather than failing on the store rank 0 took with
  // it (exit 1, "did not receive ... from rank 0"), and tt-run --nproc exits with that code.
  const fs::path dir = tt::test::temp_dir("dist_refusal");
  const std::string start =
      env_clean() + tt_run_bin() + " --nproc 2 " + topic_pipeline(dir, "f").string() + " -q --run-dir " + (dir / "f").string();
  auto first = run(start);
  ASSERT_EQ(first.rc, 0) << first.output;
  auto again = run(start);  // the directory holds a run: refused without --overwrite
  fs::remove_all(dir / "f" / "checkpoints");
  auto resume = run(env_clean() + tt_run_bin() + " --nproc 2 --resume " + (dir / "f").string() + " -q");
  for (const auto* r : {&again, &resume}) {
    EXPECT_EQ(r->rc, 2) << r->output;
    EXPECT_HAS(r->output, "rank 0 refused the run: ");
    EXPECT_EQ(r->output.find("did not receive"), std::string::npos) << r->output;
    EXPECT_EQ(r->output.find("writing a checkpoint"), std::string::npos) << r->output;  // nothing was training
  }
  EXPECT_HAS(again.output, "already holds a run");
  EXPECT_HAS(resume.output, "holds no checkpoint, but its summary.json says it trained");
  // the way to start it again is a launch of as many workers (one process trains another global batch)
  EXPECT_HAS(resume.output, "start it again with tt-run --nproc 2 " + (dir / "f" / "pipeline.yaml").string() +
                                " --run-dir " + (dir / "f").string() + " --overwrite (or 2 workers launched as before, "
                                "with --run-dir " + (dir / "f").string() + " --overwrite)");
}

// The modes that start tt-run processes of their own (a comparison, the planner, the profile)
// are refused in a data-parallel launch: each rank started its own comparison, and their variants
// waited on one another's rendezvous. --predict runs on rank 0 alone (every rank predicted and
// wrote the same file).
TEST(Dist, ADataParallelLaunchRefusesTheModesThatRunProcessesAndPredictsOnRankZero) {
  const fs::path dir = tt::test::temp_dir("dist_modes");
  const std::string in_source = "cd " + tt::test::source_dir() + " && " + env_clean() + tt_run_bin() + " --nproc 2 ";
  auto r = run(in_source + "configs/compare-topic.yaml --steps 2 --run-dir " + (dir / "cmp").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "configs/compare-topic.yaml compares variants (its compare: section), each in a tt-run process "
                       "of its own, one after another: run it without --nproc");
  EXPECT_FALSE(fs::exists(dir / "cmp"));
  for (const std::string mode : {"--profile-memory", "--budget 1GiB", "--recommend"}) {
    r = run(in_source + mode + " configs/quickstart.yaml --run-dir " + (dir / "mode").string());
    EXPECT_EQ(r.rc, 2) << mode << ": " << r.output;
    EXPECT_HAS(r.output, mode.substr(0, mode.find(' ')) + " runs tt-run processes of its own, one after another: run it "
                         "without --nproc");
  }
  const std::string iris = tt::test::source_dir() + "/../shared/datasets/tabular/iris.csv";
  r = run(in_source + "configs/tabular-inference.yaml data.path=" + iris + " --predict " + iris + " --run-dir " +
          (dir / "pred").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  size_t lines = 0;
  for (size_t at = r.output.find("predictions: "); at != std::string::npos; at = r.output.find("predictions: ", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << r.output;
  const std::string predictions = read_file(dir / "pred" / "predictions.csv");
  EXPECT_EQ(std::count(predictions.begin(), predictions.end(), '\n'), 151);  // the header and the 150 rows
}

namespace {
// A launcher this test started: whatever way the test ends (a failed ASSERT returns early),
// the launcher and its workers do not outlive it.
struct LauncherGuard {
  pid_t pid = -1;
  bool reaped = false;
  ~LauncherGuard() {
    if (pid <= 0 || reaped) return;
    std::istringstream kids(run("pgrep -P " + std::to_string(pid)).output);
    for (pid_t w; kids >> w;) kill(w, SIGKILL);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
  }
};
}  // namespace

TEST(Dist, AKilledRankEndsTheOthersWithin60s) {
  tt::test::TinyLm lm("dist_kill");
  lm.run("lm", "[]", "batch_size: 4, max_steps: 1");
  const fs::path out = lm.dir / "launcher.out";
  pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  LauncherGuard guard;
  if (launcher > 0) guard.pid = launcher;
  if (launcher == 0) {
    std::string cmd = "exec " + env_clean() + tt_run_bin() + " --nproc 2 " + (lm.dir / "lm.yaml").string() +
                      " trainer.max_steps=100000 trainer.epochs=1000 -q --run-dir " + (lm.dir / "long").string() +
                      " > " + out.string() + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  // wait until training runs (metrics lines), then kill rank 1
  const fs::path metrics = lm.dir / "long" / "metrics.jsonl";
  for (int i = 0; i < 600 && tt::test::step_lines(metrics).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(tt::test::step_lines(metrics).size(), 2u) << read_file(out);
  auto kids = run("pgrep -P " + std::to_string(launcher));
  std::vector<pid_t> workers;
  std::istringstream in(kids.output);
  for (pid_t p; in >> p;) workers.push_back(p);
  ASSERT_EQ(workers.size(), 2u) << kids.output;
  std::sort(workers.begin(), workers.end());  // forked in rank order
  const auto t0 = std::chrono::steady_clock::now();
  kill(workers[1], SIGKILL);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(launcher, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (done == 0) {
    for (pid_t w : workers) kill(w, SIGKILL);
    FAIL() << "the launcher did not exit within 90 s";  // the guard ends it
  }
  guard.reaped = true;
  EXPECT_LT(secs, 60.0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  const std::string text = read_file(out);
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
  EXPECT_NE(text.find("killed by signal"), std::string::npos) << text;
  EXPECT_NE(kill(workers[0], 0), 0) << "rank 0 is still running";
}

TEST(Dist, WithoutTheLauncherASurvivingRankFailsAfterTheTimeout) {
  // torchrun-style: two processes started by hand; rank 1 never comes, rank 0 says it waits,
  // waits TT_DIST_TIMEOUT seconds once (the store's wait and the process group's each took the
  // whole timeout: twice in all) and says how many workers joined.
  const fs::path dir = tt::test::temp_dir("dist_alone");
  const fs::path y = topic_pipeline(dir, "a");
  const std::string port = std::to_string(free_port());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " TT_DIST_TIMEOUT=6 " + tt_run_bin() +
               " " + y.string() + " -q --run-dir " + (dir / "a").string());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.rc, 8) << r.output;  // a rank lost or not reached
  EXPECT_GE(secs, 6.0);
  EXPECT_LT(secs, 12.0) << r.output;  // one wait of 6 s and the process's start and end, not two waits
  EXPECT_HAS(r.output, "distributed: rank 0 of 2 waiting for the other workers at 127.0.0.1:" + port + " (up to "
                       "TT_DIST_TIMEOUT = 6 s)");
  EXPECT_HAS(r.output, "distributed rendezvous: 1 of 2 workers joined at 127.0.0.1:" + port +
                           " within 6 s (TT_DIST_TIMEOUT)");
  EXPECT_HAS(r.output, "TT_DIST_TIMEOUT");
}

TEST(Dist, UnreachableMasterIsAClearTimeoutError) {
  const fs::path dir = tt::test::temp_dir("dist_unreach");
  const fs::path y = topic_pipeline(dir, "u");
  const auto t0 = std::chrono::steady_clock::now();
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never routed
  auto r = run("RANK=1 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=29732 TT_DIST_TIMEOUT=3 " + tt_run_bin() + " " +
               y.string() + " -q --run-dir " + (dir / "u").string());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.rc, 8) << r.output;
  EXPECT_LT(secs, 30.0);
  EXPECT_NE(r.output.find("could not reach the master at 192.0.2.1:29732"), std::string::npos) << r.output;
}

TEST(Dist, BadSettingsAreRefused) {
  const fs::path dir = tt::test::temp_dir("dist_bad");
  const fs::path y = topic_pipeline(dir, "b");
  auto no_rank = run(env_clean() + "WORLD_SIZE=2 " + tt_run_bin() + " " + y.string() + " -q");
  EXPECT_EQ(no_rank.rc, 2) << no_rank.output;
  EXPECT_NE(no_rank.output.find("WORLD_SIZE is set (2) but RANK is not"), std::string::npos) << no_rank.output;
  auto big_rank = run(env_clean() + "WORLD_SIZE=2 RANK=2 " + tt_run_bin() + " " + y.string() + " -q");
  EXPECT_EQ(big_rank.rc, 2) << big_rank.output;
  EXPECT_NE(big_rank.output.find("RANK must be below WORLD_SIZE"), std::string::npos) << big_rank.output;
  auto big_local = run(env_clean() + "WORLD_SIZE=2 RANK=0 LOCAL_WORLD_SIZE=3 " + tt_run_bin() + " " + y.string() + " -q");
  EXPECT_EQ(big_local.rc, 2) << big_local.output;
  EXPECT_HAS(big_local.output, "LOCAL_WORLD_SIZE='3' is not an integer in [1, 2]");
  auto local_rank = run(env_clean() + "WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 LOCAL_WORLD_SIZE=1 " + tt_run_bin() + " " +
                        y.string() + " -q");
  EXPECT_EQ(local_rank.rc, 2) << local_rank.output;
  EXPECT_HAS(local_rank.output, "LOCAL_RANK (1) must be below LOCAL_WORLD_SIZE (1)");
  for (const char* n : {"0", "-1"}) {  // -1 once read as "no --nproc", then refused by the parser
    auto few = run(env_clean() + tt_run_bin() + " --nproc " + n + " " + y.string());
    EXPECT_EQ(few.rc, 2) << few.output;
    EXPECT_HAS(few.output, std::string("--nproc ") + n + ": the number of worker processes must be at least 1");
  }
  auto word = run(env_clean() + tt_run_bin() + " --nproc two " + y.string());
  EXPECT_EQ(word.rc, 2) << word.output;
  EXPECT_HAS(word.output, "--nproc takes the number of worker processes, e.g. --nproc 2");
  // --help lists it beside the other options
  EXPECT_HAS(run(tt_run_bin() + " --help").output, "--nproc");
}

namespace {
// A TCP socket listening on a free loopback port (set in `port`), which accepts connections and
// never answers; -1 where it cannot be made.
int listening_socket(int& port) { return bound_socket(INADDR_LOOPBACK, true, port); }

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}
}  // namespace

// The launcher checks the command line and the pipeline as a worker would before it starts any:
// an error is said once (each worker said it, then the launcher "rank 0 ... exited with status 2;
// stopping the other 1 worker(s)"), and no worker or run directory is made.
TEST(Dist, TheLauncherRefusesABadCommandLineOnceBeforeStartingWorkers) {
  const fs::path dir = tt::test::temp_dir("dist_once");
  const fs::path y = topic_pipeline(dir, "o");
  std::vector<std::string> bads = {"trainer.no_such_key=1", "trainer.device=tpu", "--no-such-option", "--sample hi",
                                   "--profile-memory"};
  if (!torch::cuda::is_available()) bads.push_back("trainer.device=cuda");  // dist::check_device_for_workers
  for (const std::string& bad : bads) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run(env_clean() + tt_run_bin() + " --nproc 2 " + y.string() + " " + bad + " -q --run-dir " +
                 (dir / "o").string());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.output;
    EXPECT_EQ(occurrences(r.output, "tt-run: "), 1u) << bad << ": " << r.output;
    EXPECT_EQ(r.output.find("tt-run --nproc: rank"), std::string::npos) << bad << ": " << r.output;
    EXPECT_EQ(r.output.find("distributed"), std::string::npos) << bad << ": " << r.output;
    EXPECT_LT(secs, 10.0) << bad;
    EXPECT_FALSE(fs::exists(dir / "o")) << bad;
  }
}

// --version, --help, --list and --dry-run train nothing: under --nproc they run once (their output
// was printed by every worker, interleaved).
TEST(Dist, TheCommandsThatTrainNothingRunOnceUnderTheLauncher) {
  const fs::path dir = tt::test::temp_dir("dist_nothing");
  const fs::path y = topic_pipeline(dir, "n");
  const std::string launch = env_clean() + tt_run_bin() + " --nproc 2 ";
  auto r = run(launch + "--version");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "LibTorch "), 1u) << r.output;
  r = run(launch + "--help");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "Exit codes:"), 1u) << r.output;
  r = run(launch + "--list");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "trainer options:"), 1u) << r.output;
  EXPECT_HAS(r.output, "\n\ndatasets:\n  ");  // whole lines, not two workers' spliced together
  r = run(launch + "--dry-run " + y.string() + " -q");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "\ntrainer:\n"), 1u) << r.output;
  EXPECT_HAS(r.output, "tt-run --nproc 2: 2 workers would each train this pipeline (trainer.batch_size per worker)");
}

// A cluster shell's torchrun variables (another host, a port in use) do not reach tt-run --nproc,
// which runs on this machine only.
TEST(Dist, TheLauncherTrainsOnLoopbackWhateverTheEnvironmentsMasterSays) {
  const fs::path dir = tt::test::temp_dir("dist_env");
  const fs::path y = topic_pipeline(dir, "e");
  auto r = run("RANK=3 WORLD_SIZE=8 LOCAL_RANK=3 MASTER_ADDR=192.0.2.1 MASTER_PORT=1 TT_DIST_TIMEOUT=20 " +
               tt_run_bin() + " --nproc 2 " + y.string() + " trainer.batch_size=8 -q --run-dir " + (dir / "e").string());
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(summary_of(dir / "e")["world_size"], 2) << r.output;
}

// A port another process listens on fails the rendezvous at once; the error says so, and names
// MASTER_PORT rather than TT_DIST_TIMEOUT (a longer wait cannot help).
TEST(Dist, AMasterPortInUseIsSaidToBeInUse) {
  const fs::path dir = tt::test::temp_dir("dist_busy");
  const fs::path y = topic_pipeline(dir, "b");
  int port = 0;
  const int fd = listening_socket(port);
  ASSERT_GE(fd, 0);
  auto r = run("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
               " TT_DIST_TIMEOUT=15 " + tt_run_bin() + " " + y.string() + " -q --run-dir " + (dir / "b").string());
  ::close(fd);
  EXPECT_EQ(r.rc, 2) << r.output;  // a setting to change, as any
  EXPECT_HAS(r.output, "distributed rendezvous: rank 0 could not serve the workers at 127.0.0.1:" +
                           std::to_string(port) + ": port " + std::to_string(port) + " is in use");
  EXPECT_HAS(r.output, "Choose another MASTER_PORT");
  EXPECT_EQ(r.output.find("raise TT_DIST_TIMEOUT"), std::string::npos) << r.output;
}

// Workers started by hand on one machine with LOCAL_WORLD_SIZE (as torchrun sets it) share its
// cores out as tt-run --nproc's do, where neither trainer.threads nor OMP_NUM_THREADS says how
// many to take (each took all the cores: steps many times slower).
TEST(Dist, WorkersStartedByHandShareTheMachinesCoresByLocalWorldSize) {
  const fs::path dir = tt::test::temp_dir("dist_share");
  const std::string args = topic_pipeline(dir, "s").string() + " trainer.threads=0 trainer.max_steps=2 -q --run-dir " +
                           (dir / "s").string();
  const std::string each = "-u OMP_NUM_THREADS WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 ";
  const auto e = workers_by_hand(dir, free_port(), {each + "RANK=0", each + "RANK=1"}, args);
  ASSERT_EQ(e.rcs, (std::vector<int>{0, 0})) << read_file(dir / "w0.txt") << read_file(dir / "w1.txt");
  const int cores = tt::usable_cores();
  EXPECT_EQ(summary_of(dir / "s")["threads"], std::max(1, cores / 2));
  EXPECT_EQ(read_file(dir / "w0.txt").find("workers on this machine"), std::string::npos) << read_file(dir / "w0.txt");
}

// More workers than cores, one thread each: the warning says to start fewer (it said to set
// OMP_NUM_THREADS to at most 1, as it was).
TEST(Dist, MoreWorkersThanCoresOfOneThreadEachAreToldToStartFewer) {
  const fs::path dir = tt::test::temp_dir("dist_crowd");
  const int cores = 1;  // on one core (taskset), whatever the machine has: two workers
  auto r = run(env_clean() + "env -u OMP_NUM_THREADS taskset -c " + std::to_string(first_allowed_cpu()) + " " + tt_run_bin() + " --nproc " + std::to_string(cores + 1) + " " +
               topic_pipeline(dir, "c").string() + " trainer.threads=0 trainer.max_steps=1 trainer.batch_size=4 -q "
               "--run-dir " + (dir / "c").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, std::to_string(cores + 1) + " workers on this machine x 1 thread each = " +
                           std::to_string(cores + 1) + ", more than its " + std::to_string(cores) +
                           " cores: their steps wait on each other (many times slower); start at most " +
                           std::to_string(cores) + " workers on this machine");
}

// A worker that reaches another program on MASTER_PORT (one that accepts connections and never
// answers) waited forever; it says so within its bound (TT_DIST_TIMEOUT here, at most 10 s).
TEST(Dist, AWorkerThatReachesAnotherProgramOnTheMasterPortSaysSoInsteadOfHanging) {
  const fs::path dir = tt::test::temp_dir("dist_foreign");
  const fs::path y = topic_pipeline(dir, "f");
  int listening = 0;
  const int fd = listening_socket(listening);  // the kernel accepts; nothing ever answers
  ASSERT_GE(fd, 0);
  const std::string port = std::to_string(listening);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run(env_clean() + "timeout 60 env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
               " TT_DIST_TIMEOUT=3 " + tt_run_bin() + " " + y.string() + " -q --run-dir " + (dir / "f").string());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_LT(secs, 10.0) << r.output;
  EXPECT_HAS(r.output, "distributed rendezvous: rank 1 reached 127.0.0.1:" + port +
                           " but nothing there answered as a store within ");
  EXPECT_HAS(r.output, "another program may listen on MASTER_PORT");
}

// MASTER_ADDR wrong: a name that does not resolve (tried again until TT_DIST_TIMEOUT: a cluster's
// name for its master may come only as the master starts) is named, with the fix, as a setting
// (exit 2), not as a master unreached; rank 0 given another machine's address is warned.
TEST(Dist, AMasterAddressThatDoesNotResolveOrIsAnotherMachinesIsNamed) {
  const fs::path dir = tt::test::temp_dir("dist_addr");
  const fs::path y = topic_pipeline(dir, "a");
  const auto rank = [&](const std::string& r, const std::string& addr) {
    return run(env_clean() + "timeout 60 env RANK=" + r + " WORLD_SIZE=2 MASTER_ADDR=" + addr +
               " MASTER_PORT=29738 TT_DIST_TIMEOUT=3 " + tt_run_bin() + " " + y.string() + " -q --run-dir " +
               (dir / "a").string());
  };
  for (const char* r : {"0", "1"}) {
    auto none = rank(r, "nosuchhost.invalid");  // .invalid never resolves (RFC 2606)
    EXPECT_EQ(none.rc, 2) << none.output;
    EXPECT_HAS(none.output, "distributed rendezvous: MASTER_ADDR='nosuchhost.invalid' did not resolve within 3 s (");
    EXPECT_HAS(none.output, "set MASTER_ADDR to rank 0's machine");
  }
  auto other = rank("0", "192.0.2.1");  // TEST-NET-1 (RFC 5737): no machine's own
  EXPECT_NE(other.rc, 0) << other.output;
  EXPECT_HAS(other.output, "MASTER_ADDR='192.0.2.1' is not an address of this machine, where rank 0 serves the workers");
}

// Under torchrun 2.4+ its agent serves the store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE):
// every rank connects, rank 0 too (it said the port was in use), and tt's keys are apart per
// launch (TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT): a restart on the same store starts
// afresh (the last launch's keys refused its RANKs as taken). The agent's store is PyTorch's own,
// served from Python here.
TEST(Dist, WorkersUnderTorchrunsAgentStoreConnectToItAndARestartStartsAfresh) {
  const fs::path dir = tt::test::temp_dir("dist_agent");
  const std::string pid = (dir / "store.pid").string();
  const std::string ready = (dir / "store.ready").string();
  const int port = free_port();
  // (LibTorch 2.4+ asks for libuv by default, which Debian's build lacks; 1.13 has no such option)
  std::ofstream(dir / "store.py") << "import sys, time, torch.distributed as d\n"
                                     "try:\n    s = d.TCPStore('127.0.0.1', int(sys.argv[2]), 1, True, "
                                     "wait_for_workers=False, use_libuv=False)\n"
                                     "except TypeError:\n    s = d.TCPStore('127.0.0.1', int(sys.argv[2]), 1, "
                                     "True, wait_for_workers=False)\n"
                                     "open(sys.argv[1], 'w').close()\ntime.sleep(120)\n";
  auto served = run("{ /usr/bin/python3 " + (dir / "store.py").string() + " " + ready + " " + std::to_string(port) + " > " + (dir / "store.txt").string() +
                    " 2>&1 & echo $! > " + pid + "; for i in $(seq 200); do [ -e " + ready + " ] && break; sleep 0.1; "
                    "done; [ -e " + ready + " ]; }");
  ASSERT_EQ(served.rc, 0) << served.output << read_file(dir / "store.txt");
  const std::string args = topic_pipeline(dir, "g").string() + " trainer.max_steps=2 -q --overwrite --run-dir " +
                           (dir / "g").string();
  for (const char* restart : {"0", "1"}) {
    const std::string each = std::string("TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=job7 "
                                         "TORCHELASTIC_RESTART_COUNT=") + restart + " WORLD_SIZE=2 ";
    const auto e = workers_by_hand(dir, port, {each + "RANK=0", each + "RANK=1"}, args);
    EXPECT_EQ(e.rcs, (std::vector<int>{0, 0})) << "restart " << restart << ":\n"
                                               << read_file(dir / "w0.txt") << read_file(dir / "w1.txt");
  }
  run("kill $(cat " + pid + ")");
  EXPECT_EQ(read_file(dir / "w0.txt").find("in use"), std::string::npos) << read_file(dir / "w0.txt");
}

TEST(Dist, MismatchedPipelinesAcrossRanksAreDetected) {
  const fs::path dir = tt::test::temp_dir("dist_mismatch");
  const fs::path y = topic_pipeline(dir, "m");
  // rank 1 with another learning rate
  const std::string args = y.string() + " -q --run-dir " + (dir / "m").string();
  auto r = two_ranks_by_hand(dir, free_port(), dir, args, dir, args + " optimizer.lr=0.01");
  EXPECT_NE(r.output.find("rc0=2"), std::string::npos) << r.output;
  EXPECT_HAS(r.output, "distributed: the ranks' resolved pipelines differ (rank(s) 1 from rank 0");
  EXPECT_EQ(read_file(dir / "r1.rc"), "2\n") << read_file(dir / "r1.txt");
  // rank 1 names the line where its pipeline differs from rank 0's
  EXPECT_HAS(read_file(dir / "r1.txt"), "lr: 0.01' here, '");
  EXPECT_HAS(read_file(dir / "r1.txt"), "lr: 0.05' on rank 0): start every worker with the same pipeline file");
}

// Ranks that resolve one pipeline to data of other sizes (a relative data path, each rank in
// its own working directory) build models of other shapes. Broadcasting rank 0's weights then
// aborted the process inside Gloo (SIGABRT); the shapes are compared first.
TEST(Dist, RanksWhoseModelsDifferInShapeAreRefusedBeforeTheyExchangeWeights) {
  const fs::path dir = tt::test::temp_dir("dist_shapes");
  for (const auto& [sub, docs] : {std::pair{"a", "60"}, std::pair{"b", "40"}}) {
    fs::create_directories(dir / sub);
    auto made = run(tt::test::tt_data_bin() + " synth-topics --n " + docs + " --m 30 --k 3 --avg-doc-length 20 " +
                    "--seed 1 --out " + (dir / sub).string());
    ASSERT_EQ(made.rc, 0) << made.output;
    std::ofstream(dir / sub / "p.yaml") << "name: s\ndata: {name: topic-npy, path: X.npy}\nmodel: {name: topic, k: 3}\n"
                                           "trainer: {epochs: 1, batch_size: 8, threads: 1, progress: off}\n"
                                           "output: {plots: false}\n";
  }
  auto r = two_ranks_by_hand(dir, free_port(), dir / "a", "p.yaml -q --run-dir " + (dir / "run-a").string(), dir / "b",
                             "p.yaml -q --run-dir " + (dir / "run-b").string());
  EXPECT_HAS(r.output, "rc0=2");
  EXPECT_HAS(r.output, "distributed: the ranks' models' parameter shapes differ (rank(s) 1 from rank 0");
  EXPECT_EQ(read_file(dir / "r1.rc"), "2\n") << read_file(dir / "r1.txt");
  EXPECT_HAS(read_file(dir / "r1.txt"), "[40, 3]' here, '");
  EXPECT_HAS(read_file(dir / "r1.txt"), "every rank must build the same model from the same data");
}

// Ctrl-C in a data-parallel run: every rank checkpoints and stops, and the line that says how to
// continue names the launch it needs (a resume with another world size is refused).
TEST(Dist, AnInterruptedRunSaysToResumeWithTheSameWorldSize) {
  const fs::path dir = tt::test::temp_dir("dist_int_train");
  const fs::path y = topic_pipeline(dir, "t", "  max_steps: 1000000\n");
  auto r = interrupt_when(dir, env_clean() + tt_run_bin() + " --nproc 2 " + y.string() + " trainer.epochs=~ -q --run-dir " +
                                  (dir / "t").string(), trains(dir / "t" / "metrics.jsonl"));
  EXPECT_EQ(r.rc, 130) << r.output;
  EXPECT_HAS(r.output, "checkpoint written. Continue with: tt-run --nproc 2 --resume " + (dir / "t").string() +
                           " (or 2 workers launched as before, with --resume)");
}

// An interrupt before training (here: waiting for a worker that never comes, as rank 0 and as a
// worker whose master never comes) says the phase the run is in, not "training: after this batch,
// writing a checkpoint", and ends the wait at once, not at the grace's end (15 s).
TEST(Dist, AnInterruptDuringTheRendezvousEndsItAtOnceSayingThePhase) {
  const fs::path dir = tt::test::temp_dir("dist_int_setup");
  const fs::path y = topic_pipeline(dir, "i");
  for (const char* rank : {"0", "1"}) {
    const std::string port = std::to_string(free_port());
    int64_t ms = 0;  // from the interrupt, sent once the rendezvous has begun, to the end
    auto r = interrupt_when(dir, env_clean() + "RANK=" + rank + " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                            " TT_DIST_TIMEOUT=30 " + tt_run_bin() + " " + y.string() + " -q --run-dir " +
                            (dir / (std::string("i") + rank)).string(),
                            "grep -q 'distributed: rank' " + (dir / "interrupted.txt").string(), &ms);
    EXPECT_EQ(r.rc, 130) << r.output;
    EXPECT_LT(ms, 5000) << "rank " << rank << ": " << r.output;
    EXPECT_HAS(r.output, "tt-run: stopping (in setup; Ctrl-C again to abort)");
    EXPECT_HAS(r.output, "interrupted during the distributed rendezvous at 127.0.0.1:" + port + ": nothing was trained");
    EXPECT_EQ(r.output.find("after this batch"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("still in"), std::string::npos) << r.output;  // not ended by the grace
  }
}

// Workers started by hand with settings that cannot make one run are refused at once, every one
// of them told why, instead of waiting TT_DIST_TIMEOUT (30 s here) for a run that cannot start:
// a worker whose WORLD_SIZE is not rank 0's, and a second worker with a RANK already taken.
TEST(Dist, WorkersOfAnotherWorldSizeOrATakenRankAreRefusedAtOnceAndEveryOneSaysWhy) {
  const fs::path dir = tt::test::temp_dir("dist_refuse_join");
  const std::string args = topic_pipeline(dir, "j").string() + " -q --run-dir " + (dir / "j").string();
  const auto sizes = workers_by_hand(dir, free_port(), {"RANK=0 WORLD_SIZE=2", "RANK=1 WORLD_SIZE=3"}, args);
  EXPECT_LT(sizes.seconds, 15.0);
  EXPECT_EQ(sizes.rcs, (std::vector<int>{2, 2})) << read_file(dir / "w0.txt") << read_file(dir / "w1.txt");
  EXPECT_HAS(read_file(dir / "w1.txt"), "distributed rendezvous: rank 1 has WORLD_SIZE=3, rank 0 WORLD_SIZE=2: start "
                                        "every worker with the same WORLD_SIZE");
  EXPECT_HAS(read_file(dir / "w0.txt"), "distributed rendezvous refused: rank 1 has WORLD_SIZE=3, rank 0 "
                                        "WORLD_SIZE=2: start every worker with the same WORLD_SIZE (this is rank 0)");
  // three workers, two of them RANK=1: whichever checks in second is refused, and the others
  // (which wait for a RANK=2 that never comes) hear it
  const auto taken = workers_by_hand(dir, free_port(), {"RANK=0 WORLD_SIZE=3", "RANK=1 WORLD_SIZE=3", "RANK=1 WORLD_SIZE=3"},
                                     args + " --overwrite");
  EXPECT_LT(taken.seconds, 15.0);
  EXPECT_EQ(taken.rcs, (std::vector<int>{2, 2, 2}));
  std::string all;
  for (int k = 0; k < 3; ++k) all += read_file(dir / ("w" + std::to_string(k) + ".txt"));
  EXPECT_EQ(occurrences(all, "two workers have RANK=1: give each of the 3 workers its own RANK, 0 to 2"), 3u) << all;
  EXPECT_HAS(read_file(dir / "w0.txt"), "(this is rank 0)");
}

TEST(Dist, AnInfLossOnOneRankIsSkippedByEveryRank) {
  // 16 documents as .npy; document 3 has a count of 3e38 (its loss is inf). With batch 4 x 2 ranks the batch holding
  // it is on one rank only; on_nan=skip: both ranks skip that step and stay equal.
  const fs::path dir = tt::test::temp_dir("dist_nan");
  at::Tensor x = at::randint(0, 5, {16, 20}, at::TensorOptions().dtype(at::kFloat));
  x[3][2] = 3.0e38f;  // finite, but the loss of its batch overflows to inf
  tt::write_npy((dir / "c.npy").string(), x);
  const fs::path y = dir / "nan.yaml";
  std::ofstream(y) << "name: nan\nseed: 1\ndata: {name: topic-npy, path: " << (dir / "c.npy").string()
                   << "}\nmodel: {name: topic, k: 3}\noptimizer: {name: adamw, lr: 0.05}\n"
                   << "trainer: {batch_size: 4, epochs: 2, threads: 1, progress: off, on_nan: skip}\n"
                   << "output: {dir: " << dir.string() << ", plots: false}\n";
  auto r = run(env_clean() + tt_run_bin() + " --nproc 2 " + y.string() + " -q --run-dir " + (dir / "n").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  json s = summary_of(dir / "n");
  EXPECT_EQ(s["skipped_steps"], 2);  // once per epoch
  EXPECT_EQ(s["replica_parameter_hashes"][0], s["replica_parameter_hashes"][1]);
}

namespace {
fs::path last_checkpoint(const fs::path& run) {
  fs::path best;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (best.empty() || e.path().filename() > best.filename()) best = e.path();
  return best;
}
}  // namespace

TEST(Dist, Zero1ShardsTheOptimizerStateAndMatchesDdpAndResumesIt) {
  tt::test::TinyLm lm("dist_zero1");
  lm.run("lm", "[]", "batch_size: 4, max_steps: 1");
  const std::string base = env_clean() + tt_run_bin() + " --nproc 2 " + (lm.dir / "lm.yaml").string() +
                           " trainer.max_steps=8 trainer.checkpoint_every=4 -q --run-dir ";
  auto ddp = run(base + (lm.dir / "ddp").string());
  ASSERT_EQ(ddp.rc, 0) << ddp.output;
  auto z = run(base + (lm.dir / "z").string() + " 'plugins=[zero1]'");
  ASSERT_EQ(z.rc, 0) << z.output;
  json sd = summary_of(lm.dir / "ddp"), sz = summary_of(lm.dir / "z");
  EXPECT_EQ(sz["replica_parameter_hashes"][0], sz["replica_parameter_hashes"][1]);
  const double ratio = sz["memory"]["optimizer_state_bytes"].get<double>() / sd["memory"]["optimizer_state_bytes"].get<double>();
  EXPECT_GT(ratio, 0.40) << sz["memory"].dump();
  EXPECT_LT(ratio, 0.60) << sd["memory"].dump();
  auto a = checkpoint_params(last_checkpoint(lm.dir / "ddp")), b = checkpoint_params(last_checkpoint(lm.dir / "z"));
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, t] : a) {
    ASSERT_TRUE(b.count(k)) << k;
    EXPECT_LE((t - b[k]).abs().max().item<double>(), 1e-6) << k;
  }
  // trainer.grad_clip: zero1 clips the summed shards by their global norm, as DDP clips the whole
  // gradient (a norm of 0.05 clips every step here: the parameters differ from the unclipped ones)
  auto ddp_clip = run(base + (lm.dir / "ddp-clip").string() + " trainer.grad_clip=0.05");
  ASSERT_EQ(ddp_clip.rc, 0) << ddp_clip.output;
  auto z_clip = run(base + (lm.dir / "z-clip").string() + " trainer.grad_clip=0.05 'plugins=[zero1]'");
  ASSERT_EQ(z_clip.rc, 0) << z_clip.output;
  auto dc = checkpoint_params(last_checkpoint(lm.dir / "ddp-clip")), zc = checkpoint_params(last_checkpoint(lm.dir / "z-clip"));
  ASSERT_EQ(dc.size(), a.size());
  double moved = 0;
  for (const auto& [k, t] : dc) {
    ASSERT_TRUE(zc.count(k)) << k;
    EXPECT_LE((t - zc[k]).abs().max().item<double>(), 1e-6) << k;
    moved = std::max(moved, (t - a[k]).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-4) << "the clipping changed nothing";
  const auto norms = [](const fs::path& dir) {
    std::vector<double> out;
    for (const auto& line : tt::test::step_lines(dir / "metrics.jsonl")) out.push_back(json::parse(line)["grad_norm"].get<double>());
    return out;
  };
  const auto nd = norms(lm.dir / "ddp-clip"), nz = norms(lm.dir / "z-clip");
  ASSERT_EQ(nd.size(), 8u);
  ASSERT_EQ(nz.size(), nd.size());
  for (size_t i = 0; i < nd.size(); ++i) EXPECT_NEAR(nz[i], nd[i], 1e-5 * nd[i]) << "step " << i + 1;
  // resume from step 4 with the sharded state: the same parameters at the end
  fs::copy(lm.dir / "z", lm.dir / "zr", fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(lm.dir / "zr" / "checkpoints"))
    if (e.path().filename().string() > "step-00000004.pt") fs::remove(e.path());
  auto res = run(env_clean() + tt_run_bin() + " --nproc 2 --resume " + (lm.dir / "zr").string() + " -q");
  ASSERT_EQ(res.rc, 0) << res.output;
  EXPECT_EQ(summary_of(lm.dir / "zr")["steps_this_run"], 4);  // steps 5 to 8, from the checkpoint
  EXPECT_EQ(summary_of(lm.dir / "zr")["replica_parameter_hashes"][0], sz["replica_parameter_hashes"][0]);
  // ... and the same size of state: what the checkpoint's load left live on rank 0 (zero1's shard)
  EXPECT_EQ(summary_of(lm.dir / "zr")["memory"]["optimizer_state_bytes"], sz["memory"]["optimizer_state_bytes"]);
}

// trainer.checkpoint_minutes in a data-parallel run with a slow worker (rank 1 takes 50 ms more a
// step): every rank checkpoints at the same steps (the ranks decide together, through the step's
// all-reduce; zero1's checkpoint gathers every rank's shard, so a rank checkpointing alone would
// leave the others waiting until the deadline), and a resume from a timed checkpoint ends where
// the uninterrupted run did.
TEST(Dist, CheckpointsByTimeAreTakenByEveryRankAtTheSameStepAndResume) {
  tt::test::TinyLm lm("dist_timed");
  lm.run("lm", "[]", "batch_size: 4, max_steps: 1");
  const std::string env = env_clean() + "TT_PLUGIN_PATH=" + TT_TEST_MODULE_DIR + " TT_DIST_TIMEOUT=60 ";
  const fs::path dir = lm.dir / "timed";
  auto r = run(env + tt_run_bin() + " --nproc 2 " + (lm.dir / "lm.yaml").string() +
               " trainer.max_steps=24 trainer.checkpoint_minutes=0.005 trainer.keep_checkpoints=0 -q --run-dir " +
               dir.string() + " 'plugins=[zero1, {name: test-stall, event: step, seconds: 0.05, rank: 1}]'");
  ASSERT_EQ(r.rc, 0) << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 3u) << "no checkpoint before the end's";
  EXPECT_EQ(names.back(), "step-00000024.pt");
  // By time, not by step: a timed checkpoint comes 0.3 s or more after the previous one's end
  // (or the start of training) on the rank that calls for it, so the run's training time holds
  // no more of them than 0.3 s fits (one more for the ranks' starts a little apart), however
  // slow its steps were; the end's checkpoint aside.
  const json whole = summary_of(dir);
  const double seconds = whole["train_seconds"].get<double>();
  EXPECT_LE(static_cast<double>(names.size() - 1), seconds / 0.3 + 1.0) << names.size() << " checkpoints in " << seconds << " s";
  EXPECT_LT(names.size() - 1, 23u) << "a checkpoint at every step";
  EXPECT_EQ(whole["replica_parameter_hashes"][0], whole["replica_parameter_hashes"][1]);
  // resumed from the first timed checkpoint (zero1's sharded state in it): the same end
  fs::copy(dir, lm.dir / "resumed", fs::copy_options::recursive);
  for (size_t i = 1; i < names.size(); ++i) fs::remove(lm.dir / "resumed" / "checkpoints" / names[i]);
  auto res = run(env + tt_run_bin() + " --nproc 2 --resume " + (lm.dir / "resumed").string() + " -q");
  ASSERT_EQ(res.rc, 0) << res.output;
  const json resumed = summary_of(lm.dir / "resumed");
  EXPECT_EQ(resumed["steps_this_run"], 24 - std::stoi(names[0].substr(5))) << resumed.dump();  // from the checkpoint
  EXPECT_EQ(resumed["replica_parameter_hashes"][0], whole["replica_parameter_hashes"][0]);
}

// The optimizer step in backward (the test plugin test-step-in-backward) in a data-parallel run:
// the gradients are complete after the all-reduce, where it steps the parameters one by one, to
// DDP's parameters; the run says that it saves no memory there.
TEST(Dist, TheStepInBackwardStepsAfterTheAllReduceAsDdpAndSaysItSavesNothing) {
  tt::test::TinyLm lm("dist_in_backward");
  lm.run("lm", "[]", "batch_size: 4, max_steps: 1");
  const std::string base = env_clean() + "TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt_run_bin() + " --nproc 2 " +
                           (lm.dir / "lm.yaml").string() + " trainer.max_steps=4 -q --run-dir ";
  auto ddp = run(base + (lm.dir / "ddp").string());
  ASSERT_EQ(ddp.rc, 0) << ddp.output;
  auto sib = run(base + (lm.dir / "sib").string() + " 'plugins=[test-step-in-backward]'");
  ASSERT_EQ(sib.rc, 0) << sib.output;
  const json sd = summary_of(lm.dir / "ddp"), ss = summary_of(lm.dir / "sib");
  EXPECT_EQ(ss["replica_parameter_hashes"], sd["replica_parameter_hashes"]);
  EXPECT_EQ(ss["final_loss"], sd["final_loss"]);
  EXPECT_EQ(ss["memory"]["gradients_bytes"], sd["memory"]["gradients_bytes"]) << "every gradient live after the sync";
  EXPECT_HAS(read_file(lm.dir / "sib" / "log.txt"),
             "plugin 'test-step-in-backward' takes the optimizer step in backward, but in a data-parallel run the "
             "gradients are complete only after their all-reduce");
}

// trainer.dist_rows: owned keeps L's rows on the rank that owns the documents (i % 2) and
// all-reduces F only. In file order (shuffle off) a step's 2 x 8 documents are the same ones
// either way (documents 16s..16s+15, split by halves for all-reduce, by parity for owned), so
// the trajectory must be all-reduce's to rounding, and the assembled L that rank 0 writes
// must hold every rank's rows.
TEST(Dist, OwnedRowsTrainLikeAllReduce) {
  const fs::path dir = tt::test::temp_dir("dist_owned");
  const fs::path y = topic_pipeline(dir, "o", "  shuffle: false\n  checkpoint_every: 4\n");
  const std::string base = env_clean() + tt_run_bin() + " --nproc 2 " + y.string() + " trainer.batch_size=8 -q ";
  auto all = run(base + "--run-dir " + (dir / "all").string());
  ASSERT_EQ(all.rc, 0) << all.output;
  auto owned = run(base + "trainer.dist_rows=owned --run-dir " + (dir / "owned").string());
  ASSERT_EQ(owned.rc, 0) << owned.output;
  auto a = losses(dir / "all"), b = losses(dir / "owned");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * std::abs(a[i])) << "step " << i + 1;
  json s = summary_of(dir / "owned");
  EXPECT_EQ(s["world_size"], 2);
  EXPECT_EQ(s["replica_parameter_hashes"][0], s["replica_parameter_hashes"][1]);
  for (const char* f : {"L.npy", "F.npy"}) {
    at::Tensor x = tt::read_npy((dir / "all" / f).string()), z = tt::read_npy((dir / "owned" / f).string());
    ASSERT_EQ(x.sizes(), z.sizes()) << f;
    EXPECT_LT((x - z).abs().max().item<double>(), 1e-5) << f;
  }
  // rank 0 holds the other rank's optimizer moments only for its own rows: no resume
  for (const auto& e : fs::directory_iterator(dir / "owned" / "checkpoints"))
    if (e.path().filename().string() > "step-00000004.pt") fs::remove(e.path());
  fs::remove(dir / "owned" / "summary.json");
  auto res = run(env_clean() + tt_run_bin() + " --nproc 2 --resume " + (dir / "owned").string() + " -q");
  EXPECT_EQ(res.rc, 2) << res.output;
  EXPECT_NE(res.output.find("dist_rows: owned cannot resume"), std::string::npos) << res.output;
  // and its interrupt says so, where it said to resume
  auto stopped = interrupt_when(dir, base + "trainer.dist_rows=owned trainer.max_steps=1000000 "
                                "trainer.epochs=~ --run-dir " + (dir / "stopped").string(),
                                trains(dir / "stopped" / "metrics.jsonl"));
  EXPECT_EQ(stopped.rc, 130) << stopped.output;
  EXPECT_HAS(stopped.output, "checkpoint written. trainer.dist_rows: owned cannot resume (rank 0 holds the optimizer "
                             "moments of its own rows only); a new run may start from its weights: model.init_from=" +
                             (dir / "stopped").string());
  EXPECT_EQ(stopped.output.find("Continue with"), std::string::npos) << stopped.output;
}

// state.stop set by a plugin on one rank only (test-stop on rank 1 from step 2, at BATCH_END or at
// CHECKPOINT) ends the fit on every rank at that step, and rank 0's summary names the plugin:
// rank 0 used to wait in the next step's all-reduce until Gloo's 60 s timeout failed the run.
TEST(Dist, AStopOnOneRankEndsEveryRanksFitAtThatStep) {
  tt::test::TinyLm lm("dist_stop");
  lm.run("lm", "[]", "batch_size: 4, max_steps: 1");
  for (const std::string event : {"batch_end", "checkpoint"}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run(env_clean() + "TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt_run_bin() + " --nproc 2 " +
                 (lm.dir / "lm.yaml").string() + " trainer.max_steps=6 trainer.checkpoint_every=1 " +
                 "'plugins=[{name: test-stop, rank: 1, at_step: 2, event: " + event + "}]' -q --run-dir " +
                 (lm.dir / event).string());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.rc, 0) << event << ": " << r.output;
    const json s = summary_of(lm.dir / event);
    EXPECT_EQ(s["steps"], 2) << event;
    EXPECT_EQ(s["stopped_early_by"], "test-stop") << event;
    EXPECT_LT(seconds, 50) << event << ": no rank waited for the collective's timeout";
  }
  // at the end of the first epoch (the topic pipeline: 3 epochs of 4 steps at batch 8)
  const fs::path y = topic_pipeline(lm.dir, "topic");
  auto r = run(env_clean() + "TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt_run_bin() + " --nproc 2 " + y.string() +
               " trainer.batch_size=8 'plugins=[{name: test-stop, rank: 1, event: epoch_end}]' -q --run-dir " +
               (lm.dir / "epoch").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const json s = summary_of(lm.dir / "epoch");
  EXPECT_EQ(s["steps"], 4);
  EXPECT_EQ(s["epochs_completed"], 1);
  EXPECT_EQ(s["stopped_early_by"], "test-stop");
}
