#include "train/run_dir.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>
#include <unistd.h>

#include "train/grad_sync.h"
#include "train/run.h"
#include "tt/dist.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/report.h"

namespace fs = std::filesystem;

namespace tt {

namespace {
constexpr const char* kStartedIn = "# relative paths from ";
}  // namespace

void write_pipeline_file(Run& run) {
  if (!run.root) return;
  std::error_code ec;
  const std::string here = run.config.resume ? started_in(run.state.run_dir) : fs::current_path(ec).string();
  write_file_atomic(run.state.run_dir / "pipeline.yaml", "# resolved by tt-run from " + run.pipeline.file + "\n" +
                                                             (here.empty() ? "" : kStartedIn + here + "\n") +
                                                             run.pipeline.resolved_yaml());
}

void check_run_directory(const fs::path& given) {
  std::error_code ec;
  if (fs::exists(given / "pipeline.yaml", ec)) return;
  fs::path run_dir = given.lexically_normal();  // runs/lm/ is runs/lm
  if (run_dir.filename().empty()) run_dir = run_dir.parent_path();
  TT_CHECK_AS(ConfigError, !fs::is_regular_file(run_dir, ec), given.string(), " is a file: --resume takes a run's "
              "directory (the one holding its pipeline.yaml, checkpoints/ and summary.json)");
  const bool is_dir = fs::is_directory(run_dir, ec);
  TT_CHECK_AS(ConfigError, !is_dir || !fs::exists(run_dir / "compare.json", ec), given.string(), " is a comparison's "
              "folder (compare.json), not a run: a comparison is not resumed, and its variants keep their measurements, "
              "not their weights; run the comparison again to measure the variants it did not (tt-run --compare with "
              "its variants' folders tabulates those that ran)");
  const fs::path where = is_dir ? run_dir : run_dir.parent_path().empty() ? fs::path(".") : run_dir.parent_path();
  const std::string name = is_dir ? "" : run_dir.filename().string();
  // NAME-YYYYMMDD-HHMMSS (report.cpp's run directory names): another run's name is no match
  const auto of_that_name = [&](const std::string& f) {
    if (is_dir) return true;
    const std::string rest = f.size() > name.size() + 1 && f.rfind(name + "-", 0) == 0 ? f.substr(name.size() + 1) : "";
    return rest.size() >= 15 && rest[8] == '-' &&
           std::all_of(rest.begin(), rest.begin() + 8, [](char c) { return c >= '0' && c <= '9'; }) &&
           std::all_of(rest.begin() + 9, rest.begin() + 15, [](char c) { return c >= '0' && c <= '9'; });
  };
  std::vector<std::pair<fs::file_time_type, std::string>> runs;  // by the time their pipeline.yaml was written
  for (fs::directory_iterator it(where, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    const auto when = fs::last_write_time(it->path() / "pipeline.yaml", ec2);
    if (!ec2 && of_that_name(it->path().filename().string()))
      runs.emplace_back(when, (is_dir || run_dir.has_parent_path() ? it->path() : it->path().filename()).string());
  }
  std::sort(runs.begin(), runs.end());
  std::string known;
  for (size_t i = runs.size() > 5 ? runs.size() - 5 : 0; i < runs.size(); ++i)
    known += (known.empty() ? "" : ", ") + runs[i].second;
  TT_FAIL_AS(ConfigError, given.string(), is_dir ? " is not a tt run directory (no pipeline.yaml)" : ": no such directory",
             runs.empty() ? "" : is_dir ? "; the runs in it: " : "; the runs of that name: ", known,
             runs.size() > 5 ? " (the newest 5 of " + std::to_string(runs.size()) + ")" : "",
             runs.empty() ? "" : ": give one of them");
}

std::string started_in(const fs::path& run_dir) {
  std::ifstream in(run_dir / "pipeline.yaml");
  for (std::string line; std::getline(in, line) && line.rfind('#', 0) == 0;)
    if (line.rfind(kStartedIn, 0) == 0) return line.substr(std::strlen(kStartedIn));
  return "";
}

int lock_run_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) return -1;
  const fs::path file = dir / ".tt-lock";
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);  // the umask decides who else may lock
  if (fd < 0) {  // read-only storage, or another user's lock file
    log().warn("cannot open {} ({}): the run directory is not locked against a second tt-run", file.string(),
               std::strerror(errno));
    return -1;
  }
  // A POSIX record lock: the kernel drops it when the process ends, however it ends; the
  // process's own Trainers share it (closing any descriptor of the file drops it: only
  // ~Run closes one).
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &whole) == 0) return fd;
  const int err = errno;
  struct flock holder {};
  holder.l_type = F_WRLCK;
  holder.l_whence = SEEK_SET;
  const bool known = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK;
  ::close(fd);
  TT_CHECK_AS(ConfigError, err != EACCES && err != EAGAIN, "the run directory ", dir.string(),
              " is in use by another tt-run", known ? detail::cat(" (process ", holder.l_pid, ")") : std::string(),
              ": a second run, resume or --overwrite there would mix the two runs' checkpoints and records. Wait for "
              "it to end (or stop it), or give another --run-dir or output.run_name");
  return -1;  // locks unsupported where it lies: the run goes on without one
}

nlohmann::json read_summary(const fs::path& summary) {
  std::ifstream in(summary);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json();
}

std::string summary_status(const nlohmann::json& j) {
  return j.contains("status") && j["status"].is_string() ? j["status"].get<std::string>() : "";
}

namespace {
// Calls f(step, line) for each line of metrics.jsonl that is a JSON object with an integer "step",
// in the file's order (a line cut short by a kill is skipped).
template <class F>
void for_each_step_line(const fs::path& metrics, F&& f) {
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) f(j["step"].get<int64_t>(), j);
  }
}
}  // namespace

int64_t last_logged_step(const fs::path& metrics) {
  int64_t last = 0;
  for_each_step_line(metrics, [&](int64_t step, const nlohmann::json&) { last = std::max(last, step); });
  return last;
}

std::vector<LoggedLoss> logged_losses(const fs::path& metrics, int64_t up_to) {
  std::vector<LoggedLoss> out;
  for_each_step_line(metrics, [&](int64_t step, const nlohmann::json& j) {
    if (!j.contains("loss") || !j["loss"].is_number()) return;
    const double loss = j["loss"].get<double>();
    const int64_t examples = j.contains("examples") && j["examples"].is_number_integer() ? j["examples"].get<int64_t>() : 0;
    if (step <= up_to && std::isfinite(loss) && (out.empty() || step > out.back().step)) out.push_back({step, loss, examples});
  });
  return out;
}

std::vector<std::pair<int64_t, double>> logged_val_losses(const fs::path& metrics, int64_t up_to) {
  std::vector<std::pair<int64_t, double>> out;
  for_each_step_line(metrics, [&](int64_t step, const nlohmann::json& j) {
    if (j.contains("step_seconds") || !j.contains("val_loss") || !j["val_loss"].is_number()) return;  // a step's line
    const double v = j["val_loss"].get<double>();
    if (step <= up_to && std::isfinite(v) && (out.empty() || step > out.back().first)) out.emplace_back(step, v);
  });
  return out;
}

std::string moved_data_hint(const Run& run) {
  const std::string first = run.config.resume ? started_in(run.state.run_dir) : "";
  if (first.empty()) return "";
  std::error_code ec;
  for (const auto& [key, yaml] : run.pipeline.data.options.resolved()) {
    const YAML::Node v = YAML::Load(yaml);
    for (const YAML::Node& x : v.IsSequence() ? std::vector<YAML::Node>(v.begin(), v.end()) : std::vector<YAML::Node>{v})
      if (x.IsScalar() && fs::path(x.Scalar()).is_relative() && !fs::exists(x.Scalar(), ec) &&
          fs::exists(fs::path(first) / x.Scalar(), ec))
        return detail::cat(" (the run was started in ", first, ", where its relative paths lead: resume it from there, cd ",
                           first, ")");
  }
  return "";
}

void check_resume_length(const Run& run, const std::string& status) {
  const State& s = run.state;
  const int64_t epochs = (s.step + s.batches_per_epoch - 1) / std::max<int64_t>(1, s.batches_per_epoch);
  TT_CHECK_AS(ConfigError, !run.from_checkpoint || s.step <= s.total_steps || status == "completed",
              s.run_dir.string(), "'s checkpoint is at step ", s.step, ", past the ", s.total_steps,
              " steps this resume would train: resume with trainer.max_steps of at least ", s.step,
              run.pipeline.trainer.is_set("epochs") ? detail::cat(" and trainer.epochs of at least ", epochs) : "",
              " (or as it was)");
}

std::string how_to_continue(const Run& run) {
  const std::string dir = run.state.run_dir.string();
  if (run.sync && run.sync->owned_rows())
    return "trainer.dist_rows: owned cannot resume (rank 0 holds the optimizer moments of its own rows only); a new "
           "run may start from its weights: model.init_from=" + dir;
  return "Continue with: " + launch_command(run) + " --resume " + dir + launched_as_before(run, "--resume");
}

std::string launch_command(const Run& run) {
  return run.dist ? "tt-run --nproc " + std::to_string(run.dist->world_size()) : std::string("tt-run");
}

std::string launched_as_before(const Run& run, const std::string& args) {
  return run.dist ? " (or " + std::to_string(run.dist->world_size()) + " workers launched as before, with " + args + ")"
                  : std::string();
}

}  // namespace tt
