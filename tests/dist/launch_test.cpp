// tt-run --nproc's launcher (tools/tt-run/launch.cpp) over stand-in workers: shell scripts that
// exit as a worker would, so that the order in which the workers end is fixed. Which exit code
// the launcher gives, and how it stops the others.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>

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

Ended launch_two(const std::string& tt_run) {
  tt::launch::Options o;
  o.nproc = 2;
  o.tt_run = tt_run;
  o.grace_seconds = 5;
  testing::internal::CaptureStderr();
  const auto t0 = std::chrono::steady_clock::now();
  const int code = tt::launch::run(o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {code, testing::internal::GetCapturedStderr(), s};
}

}  // namespace

TEST(Launch, AReasonGivenAfterAPlainFailureIsTheExitCode) {
  // rank 1 fails first with a plain error (as a rank does whose peer went away), rank 0 a moment
  // later with a reason (6: a file it could not write): tt-run exits 6, as a run alone would
  const fs::path dir = tt::test::temp_dir("launch_reason");
  const auto e = launch_two(worker(dir, "if [ \"$RANK\" = 0 ]; then sleep 0.5; exit 6; fi; exit 1"));
  EXPECT_EQ(e.code, 6) << e.err;
  EXPECT_HAS(e.err, "rank 1 (pid ");
  EXPECT_HAS(e.err, "exited with status 1; stopping the other 1 worker(s)");
  EXPECT_HAS(e.err, "exited with status 6; tt-run exits with its status");
}

TEST(Launch, TheOthersStoppedAfterAFailureLeaveItsExitCode) {
  // rank 1 fails (1); rank 0 trains on until the launcher stops it, then exits as interrupted
  // (130) or is killed: neither replaces the failure's code
  const fs::path dir = tt::test::temp_dir("launch_stop");
  auto e = launch_two(worker(dir, "if [ \"$RANK\" = 0 ]; then trap 'kill $!; exit 130' TERM; sleep 30 & wait; fi; exit 1"));
  EXPECT_EQ(e.code, 1) << e.err;
  EXPECT_LT(e.seconds, 10.0) << e.err;  // stopped a second after the failure, not after 30 s
  EXPECT_EQ(e.err.find("tt-run exits with its status"), std::string::npos) << e.err;
  // a reason given first stays the exit code whatever the others end with
  e = launch_two(worker(dir, "if [ \"$RANK\" = 0 ]; then exit 2; fi; sleep 0.3; exit 1"));
  EXPECT_EQ(e.code, 2) << e.err;
  EXPECT_HAS(e.err, "exited with status 2; stopping the other 1 worker(s)");
}
