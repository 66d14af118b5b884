// tt-run --nproc's launcher (tools/tt-run/launch.cpp) over stand-in workers: shell scripts that
// exit as a worker would, so that the order in which the workers end is fixed (one ends first,
// the other only when the launcher stops it: no race of sleeps). Which exit code the launcher
// gives, and how it stops the others.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "../../tools/tt-run/launch.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

// A stand-in worker: `script` runs with RANK set by the launcher.
std::string worker(const fs::path& dir, const std::string& script) {
  const fs::path f = dir / "worker.sh";
  std::ofstream(f) << "#!/bin/sh\n" << script << "\n";
  chmod(f.c_str(), 0755);
  return f.string();
}

struct Ended {
  int code;
  std::string err;
  double seconds;
};

Ended launch_two(const std::string& tt_run, const std::function<void()>& meanwhile = {}) {
  tt::launch::Options o;
  o.nproc = 2;
  o.tt_run = tt_run;
  o.grace_seconds = 5;
  testing::internal::CaptureStderr();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread side;
  if (meanwhile) side = std::thread(meanwhile);
  const int code = tt::launch::run(o);
  if (side.joinable()) side.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {code, testing::internal::GetCapturedStderr(), s};
}

}  // namespace

TEST(Launch, AReasonGivenAfterAPlainFailureOrALostPeerIsTheExitCode) {
  // rank 1 fails first with a plain error (1) or a lost peer (8: as a rank does whose peer went
  // away), rank 0 after it, as the launcher stops it, with a reason (6: a file it could not
  // write): tt-run exits 6, as a run alone would
  const fs::path dir = tt::test::temp_dir("launch_reason");
  for (const char* first : {"1", "8"}) {
    // (rank 1 ends once rank 0 has set its trap: a SIGTERM before it would end rank 0 otherwise)
    const std::string ready = (dir / (std::string("ready.") + first)).string();
    const auto e = launch_two(worker(dir, "if [ \"$RANK\" = 0 ]; then trap 'kill $!; exit 6' TERM; touch " + ready +
                                              "; sleep 30 & wait; fi; for i in $(seq 600); do [ -e " + ready +
                                              " ] && break; sleep 0.05; done; exit " + first));
    EXPECT_EQ(e.code, 6) << e.err;
    EXPECT_HAS(e.err, "rank 1 (pid ");
    EXPECT_HAS(e.err, std::string("exited with status ") + first + "; stopping the other 1 worker(s)");
    EXPECT_HAS(e.err, "exited with status 6; tt-run exits with its status");
  }
}

TEST(Launch, TheOthersStoppedAfterAFailureLeaveItsExitCode) {
  // rank 1 fails (1); rank 0 trains on until the launcher stops it, then exits as interrupted
  // (130) or is killed: neither replaces the failure's code
  const fs::path dir = tt::test::temp_dir("launch_stop");
  auto e = launch_two(worker(dir, "if [ \"$RANK\" = 0 ]; then trap 'kill $!; exit 130' TERM; sleep 30 & wait; fi; exit 1"));
  EXPECT_EQ(e.code, 1) << e.err;
  EXPECT_LT(e.seconds, 10.0) << e.err;  // stopped a second after the failure, not after 30 s
  EXPECT_EQ(e.err.find("tt-run exits with its status"), std::string::npos) << e.err;
  // a reason given first stays the exit code whatever the others end with (rank 1 fails as the
  // launcher stops it)
  const std::string ready = (dir / "ready").string();
  e = launch_two(worker(dir, "if [ \"$RANK\" = 0 ]; then for i in $(seq 600); do [ -e " + ready +
                                 " ] && break; sleep 0.05; done; exit 2; fi; trap 'kill $!; exit 1' TERM; touch " + ready +
                                 "; sleep 30 & wait"));
  EXPECT_EQ(e.code, 2) << e.err;
  EXPECT_HAS(e.err, "exited with status 2; stopping the other 1 worker(s)");
}

namespace {
// Waits until both stand-in workers have written dir/started.RANK, then sends this process (the
// launcher) `count` SIGINTs, 30 ms apart, as a terminal's Ctrl-C pressed twice would.
std::function<void()> ctrl_c(const fs::path& dir, int count) {
  return [dir, count] {
    for (int i = 0; i < 200 && !(fs::exists(dir / "started.0") && fs::exists(dir / "started.1")); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int i = 0; i < count; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      kill(getpid(), SIGINT);
    }
  };
}
}  // namespace

TEST(Launch, ACtrlCIsAnInterruptNotAFailure) {
  // each worker writes its checkpoint and exits 130: tt-run exits 130 and names no rank as failed
  const fs::path dir = tt::test::temp_dir("launch_int");
  const std::string started = "touch " + (dir / "started.").string() + "$RANK; ";
  auto e = launch_two(worker(dir, "trap 'kill $!; exit 130' INT; " + started + "sleep 30 & wait"), ctrl_c(dir, 1));
  EXPECT_EQ(e.code, 130) << e.err;
  EXPECT_EQ(e.err.find("tt-run --nproc: rank"), std::string::npos) << e.err;
  // a second Ctrl-C kills the workers at once (they take the first as a stop after the batch): 130 too,
  // not "killed by signal" and 1
  fs::remove(dir / "started.0");
  fs::remove(dir / "started.1");
  e = launch_two(worker(dir, "trap '' INT; " + started + "while :; do sleep 0.1; done"), ctrl_c(dir, 2));
  EXPECT_EQ(e.code, 130) << e.err;
  EXPECT_LT(e.seconds, 10.0) << e.err;
  EXPECT_EQ(e.err.find("tt-run --nproc: rank"), std::string::npos) << e.err;
  EXPECT_EQ(e.err.find("killed by signal"), std::string::npos) << e.err;
  // workers the Ctrl-C ends before their handlers are installed say nothing: the launcher says it
  fs::remove(dir / "started.0");
  fs::remove(dir / "started.1");
  e = launch_two(worker(dir, started + "exec sleep 30"), ctrl_c(dir, 1));
  EXPECT_EQ(e.code, 130) << e.err;
  EXPECT_HAS(e.err, "tt-run --nproc: interrupted; 2 of the 2 workers ended before they were set up (nothing was trained)");
}

TEST(Launch, AWorkerEndingWith130UnsignalledByTheLauncherIsSaidToEndOnAnInterruptThatStopsThemAll) {
  // SIGTERM to one worker (not the launcher) stops every worker (the trainer agrees on it): the
  // one that ends first with 130 may be another; here rank 1 exits 130 as such a worker would,
  // and the launcher says it ended on an interrupt sent to any worker, not that it "was interrupted"
  const fs::path dir = tt::test::temp_dir("launch_one_int");
  const auto e = launch_two(worker(dir, "if [ \"$RANK\" = 0 ]; then trap 'kill $!; exit 130' TERM; sleep 30 & wait; fi; "
                                        "sleep 0.2; exit 130"));
  EXPECT_EQ(e.code, 130) << e.err;
  EXPECT_HAS(e.err, "ended on an interrupt (status 130; one sent to any worker stops them all); stopping the other 1 "
                    "worker(s)");
  EXPECT_EQ(e.err.find("was interrupted"), std::string::npos) << e.err;
}

TEST(Launch, TheWorkersTrainOnLoopbackAndAFreePortWhateverTheEnvironmentSays) {
  // torchrun's variables exported in a cluster shell: --nproc is one machine (torchrun --standalone)
  const fs::path dir = tt::test::temp_dir("launch_env");
  setenv("MASTER_ADDR", "192.0.2.1", 1);
  setenv("MASTER_PORT", "1", 1);
  const auto e = launch_two(worker(dir, "echo $MASTER_ADDR $MASTER_PORT $WORLD_SIZE > " + (dir / "at.").string() + "$RANK"));
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  EXPECT_EQ(e.code, 0) << e.err;
  const std::string at0 = tt::test::read_file(dir / "at.0"), at1 = tt::test::read_file(dir / "at.1");
  EXPECT_EQ(at0, at1);
  EXPECT_EQ(at0.rfind("127.0.0.1 ", 0), 0u) << at0;
  EXPECT_EQ(at0.find(" 1 "), std::string::npos) << at0;
  EXPECT_HAS(at0, " 2\n");
}

TEST(Launch, AWorkerStoppedAfterAnotherFailedSaysSoNotCtrlC) {
  // rank 1 fails once rank 0 (a real tt-run) listens at the rendezvous (its handlers are in place
  // by then); rank 0 is stopped by the launcher and says why, not "Ctrl-C again to abort"
  const fs::path dir = tt::test::temp_dir("launch_peer");
  const fs::path y = dir / "p.yaml";
  std::ofstream(y) << tt::test::topic_yaml(dir);
  const std::string listening = "H=$(printf %04X $MASTER_PORT); for i in $(seq 1200); do cat /proc/net/tcp "
                                "/proc/net/tcp6 2>/dev/null | grep -qE \":$H [0-9A-F]+:0000 0A\" && break; sleep 0.05; "
                                "done; ";
  const auto e = launch_two(worker(dir, "if [ \"$RANK\" = 1 ]; then " + listening + "exit 1; fi; TT_DIST_TIMEOUT=30 "
                                        "TT_INTERRUPT_GRACE=1 exec " + tt::test::tt_run_bin() + " " + y.string() +
                                        " -q --run-dir " + (dir / "run").string()));
  EXPECT_EQ(e.code, 1) << e.err;
  EXPECT_HAS(e.err, "rank 1 (pid ");
  EXPECT_HAS(e.err, "tt-run: stopping (in setup): another worker failed, and tt-run --nproc stops the others");
  EXPECT_EQ(e.err.find("Ctrl-C"), std::string::npos) << e.err;
}

TEST(Launch, TheLinesOfRanksAboveZeroSayTheirRank) {
  // the same warning from every rank: rank 1's lines start "[rank 1] ", rank 0's are as it wrote
  // them; an empty line stays empty, and a last line without its newline is passed on too
  const fs::path dir = tt::test::temp_dir("launch_label");
  const auto e = launch_two(worker(dir, "echo \"warning: from $RANK\" >&2; echo >&2; printf 'last %s' $RANK >&2"));
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_HAS(e.err, "[rank 1] warning: from 1\n");
  EXPECT_HAS(e.err, "[rank 1] last 1\n");
  EXPECT_HAS(e.err, "warning: from 0\n");
  EXPECT_EQ(e.err.find("[rank 0]"), std::string::npos) << e.err;
  EXPECT_EQ(e.err.find("[rank 1] \n"), std::string::npos) << e.err;
}

TEST(Launch, AFailedWorkersLastLinesComeBeforeTheLauncherSaysItFailed) {
  // rank 1 says why and exits 3 at once: its line is passed on before "rank 1 ... exited"
  const fs::path dir = tt::test::temp_dir("launch_last");
  const auto e = launch_two(worker(dir, "if [ \"$RANK\" = 1 ]; then echo 'error: why it failed' >&2; exit 3; fi; "
                                        "sleep 0.5"));
  EXPECT_EQ(e.code, 3) << e.err;
  const size_t why = e.err.find("[rank 1] error: why it failed\n"), said = e.err.find("tt-run --nproc: rank 1");
  ASSERT_NE(why, std::string::npos) << e.err;
  ASSERT_NE(said, std::string::npos) << e.err;
  EXPECT_LT(why, said) << e.err;
}

TEST(Launch, ALongLineIsPassedOnAsLabelledLinesOf64KiBAndALineOfExactly64KiBAsOne) {
  // 300,000 characters without a newline (a progress bar that never ends its line), then more:
  // passed on as lines of 64 KiB as they come, each labelled (no other rank's line can land
  // inside one), nothing lost
  const fs::path dir = tt::test::temp_dir("launch_long");
  const auto e = launch_two(worker(dir, "if [ \"$RANK\" = 1 ]; then head -c 300000 /dev/zero | tr '\\0' x >&2; "
                                        "echo ' end' >&2; echo 'next' >&2; fi"));
  EXPECT_EQ(e.code, 0) << e.err;
  const std::string part = "[rank 1] " + std::string(65536, 'x') + "\n";
  EXPECT_HAS(e.err, part + part + part + part + "[rank 1] " + std::string(300000 - 4 * 65536, 'x') +
                        " end\n[rank 1] next\n");
  // a line of exactly 64 KiB is one line (it was split before its newline came: an empty line after it)
  const auto exact = launch_two(worker(dir, "if [ \"$RANK\" = 1 ]; then head -c 65536 /dev/zero | tr '\\0' x >&2; "
                                            "echo >&2; echo 'next' >&2; fi"));
  EXPECT_EQ(exact.code, 0) << exact.err;
  EXPECT_HAS(exact.err, part + "[rank 1] next\n");
}
