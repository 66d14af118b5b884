#pragma once
// tt-run --profile-memory PIPELINE: trains a few steps and profiles one of them with tt's meter:
// the memory breakdown, a per-block table (activation bytes each block of a tt::nn::BlockStack
// adds in forward, its forward and backward time), and the timeline of live tensor bytes over
// the step (every allocation and free), plotted with the forward/backward/optimizer phases.
#include <string>
#include <vector>

namespace tt::profile {

struct Options {
  std::string file;
  std::vector<std::string> overrides;
  std::string run_dir;  // default <output.dir>/<name>-profile-<time>
  bool overwrite = false;  // run_dir holds a run: empty it first (tt-run --overwrite)
  int step = 3;         // the profiled step (the ones before it warm up)
};

int run(const Options& o);

}  // namespace tt::profile
