#pragma once
// tt-run --nproc N: N local workers of the same command line (like torchrun --standalone).
#include <optional>
#include <string>
#include <vector>

namespace tt::launch {

struct Options {
  int nproc = 1;
  std::string tt_run;              // this executable
  std::vector<std::string> args;   // the command line without --nproc
  double grace_seconds = 10;       // after one worker fails, how long the others get to exit
};

// Starts the workers with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
// (always 127.0.0.1), MASTER_PORT (a port free now: the environment's MASTER_ADDR and
// MASTER_PORT are not read, as torchrun --standalone) and OMP_NUM_THREADS (the usable cores / N
// unless set, so that the workers share the cores); writes the output of ranks 1 and up with
// "[rank R] " before each line (rank 0's is unchanged); forwards the first SIGINT/SIGTERM to them
// and answers a second with SIGKILL (unless one of the two came from the parent process: a
// copy, as timeout(1) sends; tt-run then exits 130, as it does when they exit 130 after an
// interrupt); when one fails, stops the others (SIGTERM with
// tt::dist::kStopAfterWorkerFailed a second later, then SIGKILL after grace_seconds) and names
// the rank and how it ended. Returns tt-run's exit code: 0 when all succeeded, else the first
// failing worker's code (1 where a signal ended it), unless that was 1 and a later one gave a
// reason (an exit code from 2 to 127 other than 130): then that one.
int run(const Options& options);

// Removes "--nproc N" / "--nproc=N" from argv; returns N (run() refuses one below 1), or
// nothing when absent. A value that is not an integer throws ConfigError.
std::optional<int> take_nproc(std::vector<std::string>& args);

}  // namespace tt::launch
