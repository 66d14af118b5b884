#include "child.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "tt/error.h"
#include "tt/meter.h"
#include "tt/yaml_util.h"
#include "tt/report.h"
#include "tt/runtime.h"

namespace tt::child {

namespace fs = std::filesystem;
using nlohmann::json;

YAML::Node load_yaml(const std::string& file) {
  try {
    YAML::Node root = YAML::LoadFile(file);
    check_unique_keys(root, file);
    return root;
  } catch (const YAML::BadFile&) {
    TT_FAIL_AS(ConfigError, file, ": cannot read the file");
  } catch (const YAML::Exception& e) {
    TT_FAIL_AS(ConfigError, file, ": not valid YAML: ", e.what());
  }
}

std::string status_of(int status) {
  // Ended by a signal after this process was interrupted: the interrupt passed on to it (or a
  // signal that reached every process) stopped it, before or after its own grace; not a crash.
  if (WIFSIGNALED(status) && interrupt_requested() &&
      (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL))
    return "interrupted";
  if (WIFSIGNALED(status)) return "crashed (signal " + std::to_string(WTERMSIG(status)) + ")";
  switch (WEXITSTATUS(status)) {
    case 0: return "ok";
    case 4: return "out of memory";
    case 130: return "interrupted";
    default: return "error (exit " + std::to_string(WEXITSTATUS(status)) + ")";
  }
}

std::string last_error_line(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last, err;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.find("error") != std::string::npos) err = line;
  }
  return err.empty() ? last : err;
}

int run(const std::string& tt_run, const fs::path& yaml, const fs::path& run_dir, const fs::path& log) {
  // The child gives back its library pages before it trains (trainer.release_library_pages),
  // but the kernel leaves a page alone that another process maps too: this one, which maps the
  // same LibTorch. Giving back this process's first lets the child's release work as it does
  // in a run of its own, so a variant's or probe's peak RSS is what that pipeline alone has.
  Meter::release_library_pages();
  std::fflush(nullptr);
  const pid_t pid = fork();
  TT_CHECK(pid >= 0, "cannot start a tt-run process for ", yaml.string());
  if (pid == 0) {
    // Its own process group, so that a Ctrl-C at the terminal reaches only this process, which
    // passes it on once (below); and it ends if this process dies.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      ::close(fd);
    }
    execl(tt_run.c_str(), "tt-run", yaml.c_str(), "-q", "--run-dir", run_dir.c_str(), static_cast<char*>(nullptr));
    std::perror("tt-run: exec");
    _exit(127);
  }
  // An interrupt of this process (compare, the planner) is passed on to the child, once: it
  // stops as a run does (checkpoint, summary "interrupted", exit 130, or at the end of its own
  // grace) and this one reports it. This process's grace waits for the child's; a child still
  // there 10 s after its grace (stopped, stuck in the kernel) is killed.
  InterruptGraceHold hold;
  int status = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) TT_FAIL("waiting for the tt-run process of ", yaml.string(), ": ", std::strerror(errno));
    if (!kill_at && interrupt_requested()) {
      ::kill(pid, SIGTERM);
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(interrupt_grace_seconds() + 10);
    }
    if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
      ::kill(pid, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    ::usleep(20000);
  }
}

double samples_per_s(double examples_per_step, double step_ms) {
  return step_ms > 0 ? examples_per_step * 1e3 / step_ms : 0;
}

std::string trains_no_steps(const std::string& file) {
  return file + " trains no steps (trainer.max_steps: 0: it evaluates, or predicts, with the weights it loads)";
}

Measured collect(const fs::path& run_dir, int warmup) {
  Measured r;
  r.summary = json::parse(std::ifstream(run_dir / "summary.json"));
  const auto& m = r.summary["memory"];
  r.peak = m["peak_tensor_bytes"].get<int64_t>();
  r.rss = m["peak_rss_bytes"].get<int64_t>();
  r.params = m["parameters_bytes"].get<int64_t>();
  r.grads = m["gradients_bytes"].get<int64_t>();
  r.optimizer = m["optimizer_state_bytes"].get<int64_t>();
  r.activations = m["activations_bytes"].get<int64_t>();
  r.teacher = m.value("teacher_bytes", int64_t{0});
  r.rest = m["rest_bytes"].get<int64_t>();
  r.loss = r.summary.value("final_loss", std::nan(""));  // absent: the run took no step
  std::vector<double> times, examples;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step_seconds")) continue;
    if (j.contains("oom_guard_peak_tensor_bytes"))  // since the last retry: the last line's
      r.peak_since_retry = static_cast<int64_t>(j["oom_guard_peak_tensor_bytes"].get<double>());
    if (j["step"].get<int64_t>() <= warmup) continue;
    const double seconds = j["step_seconds"].get<double>();
    times.push_back(1e3 * seconds);
    // a step line's rate is its examples over its own time: the examples a step takes
    if (j.contains("samples_per_s")) examples.push_back(std::round(j["samples_per_s"].get<double>() * seconds));
  }
  r.step_times_ms = times;
  r.step_ms = median(times);
  r.examples_per_step = examples.empty() ? 0 : median(examples);
  r.samples_per_s = samples_per_s(r.examples_per_step, r.step_ms);
  return r;
}

}  // namespace tt::child
