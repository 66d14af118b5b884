#include "train/setup.h"

#include <spdlog/sinks/base_sink.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "log_early.h"
#include "train/checkpoints.h"
#include "train/grad_sync.h"
#include "train/run.h"
#include "tt/checkpoint.h"
#include "tt/data_loader.h"
#include "tt/dist.h"
#include "tt/extension.h"
#include "tt/fused_adamw.h"
#include "tt/helper.h"
#include "tt/log.h"
#include "tt/registry.h"
#include "tt/report.h"
#include "tt/runtime.h"
#include "tt/schedule.h"

namespace fs = std::filesystem;

namespace tt {

namespace {
// log.txt: the lines logged before it opened first (log_early.h), then each line written and
// flushed at once; the first failure (disk full) is kept for the end of the run, which then fails
// naming the file, instead of spdlog's note on stderr.
class LogFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogFileSink(const fs::path& path) : path_(path), f_(std::fopen(path.c_str(), "a")) {
    if (!f_) TT_FAIL_AS(WriteError, "cannot write ", path.string(), ": ", std::strerror(errno));
    for (const std::string& line : early_log::take()) write(line.data(), line.size());
  }
  ~LogFileSink() override {
    if (f_) std::fclose(f_);
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    write(line.data(), line.size());
  }
  void flush_() override {}

 private:
  void write(const char* data, size_t size) {
    if (!error_.empty()) return;
    if (std::fwrite(data, 1, size, f_) != size || std::fflush(f_) != 0)
      error_ = "cannot write " + path_.string() + ": " + std::strerror(errno) + " (is the disk full?)";
  }

  fs::path path_;
  std::FILE* f_;
  std::string error_;
};
}  // namespace

std::string Run::log_file_error() const {
  auto* sink = dynamic_cast<LogFileSink*>(log_file.get());
  return sink ? sink->error() : std::string();
}

Run::Run(Pipeline p, TrainerConfig c) : pipeline(std::move(p)), config(std::move(c)) {}

Run::~Run() {
  if (log_file) {
    auto& sinks = log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), log_file), sinks.end());
    early_log::resume();  // a later run's log.txt begins with what comes between
  }
  if (dir_lock >= 0) ::close(dir_lock);
}

int64_t Run::live() const {
  return state.device.is_cuda() ? Meter::device_current() : meter.foreground_current();
}
int64_t Run::peak() const {
  return std::max(peak_floor, state.device.is_cuda() ? Meter::device_peak() : meter.peak());
}
bool Run::checkpoint_due() const {
  return (checkpoint_every > 0 && state.step % checkpoint_every == 0) || (sync ? sync->checkpoint_due() : time_for_checkpoint());
}
int64_t Run::rss_peak() const { return std::max(rss_peak_floor, Meter::rss_peak()); }
Run::Peaks Run::measure_apart(const std::function<void()>& f) {
  const int64_t peak_before = peak(), rss_before = rss_peak();
  struct Uncapped {  // evaluation is not a training step: measured apart, not capped
    Run& run;
    const bool was = run.capping;
    explicit Uncapped(Run& r) : run(r) { run.set_capping(false); }
    ~Uncapped() { run.set_capping(was); }
  } uncapped(*this);
  reset_peak();
  Meter::reset_rss_peak();
  f();
  const Peaks own{peak(), Meter::rss_peak()};
  reset_peak();
  Meter::reset_rss_peak();
  peak_floor = peak_before;
  rss_peak_floor = rss_before;
  return own;
}
void Run::set_capping(bool on) {
  capping = on && memory_cap > 0;
  const int64_t bytes = capping ? memory_cap : 0;
  if (state.device.is_cuda()) Meter::set_device_cap(bytes);  // the device's: the CPU holds little besides the batch
  else meter.set_cap(bytes);
}
void Run::reset_peak() {
  peak_floor = 0;
  meter.reset_peak();
  if (state.device.is_cuda()) Meter::reset_device_peak();
}
void Run::set_lr(double lr) {
  state.lr = lr;
  for (auto& g : state.optimizer->param_groups()) g.options().set_lr(lr);
}
void Run::flush_optimizer() {
  if (auto* f = dynamic_cast<FusedAdamW*>(state.optimizer.get())) f->flush();
  if (sync && sync->owned_rows()) sync->assemble_owned_rows();
}
void Run::zero_grads() {
  for (auto& t : trainable)
    if (t.grad().defined()) t.mutable_grad() = at::Tensor();
}

namespace {

// Processes, threads, seeds, the meter's settings and the device.
void setup_process(Run& run) {
  const Options& T = run.pipeline.trainer;
  State& s = run.state;
  run.dist = dist::context();
  if (run.dist) {
    run.root = run.dist->is_root();
    s.rank = run.dist->rank();
    s.world_size = run.dist->world_size();
    // The same pipeline everywhere, or gradients of different models would be averaged.
    run.dist->check_same("resolved pipelines", run.pipeline.resolved_yaml());
    if (!run.root) {
      run.config.quiet = true;
      log().set_level(spdlog::level::warn);  // rank 0 reports; the others only warn
    }
  }
  run.meter.install();
  // More threads than cores only slow LibTorch down (and 100000 of them never start).
  const int option = static_cast<int>(T.get_int("threads")), local = run.dist ? run.dist->env().local_world_size : 0;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  // Workers on one machine (LOCAL_WORLD_SIZE: torchrun's, or set by hand) share its cores out, as
  // tt-run --nproc's do (it sets OMP_NUM_THREADS), unless told otherwise.
  const bool shared = option == 0 && !(omp && *omp) && local > 1;
  const int asked = shared ? std::max(1, usable_cores() / local) : option;
  if (const int threads = resolve_threads(asked), cores = usable_cores(); threads > cores)
    log().warn("{} is {}, more than the {} cores this process may use; using {}",
               asked > 0 ? "trainer.threads" : "OMP_NUM_THREADS", threads, cores, cores);
  run.threads = configure_threads(asked);
  // Workers whose threads add up to more than the machine's cores wait on each other's threads:
  // steps many times slower.
  if (const int cores = usable_cores(); run.root && local > 1 && local * run.threads > cores) {
    const std::string fix = run.threads == 1 ? detail::cat("start at most ", cores, " workers on this machine")
                            : option > 0     ? detail::cat("set trainer.threads=0 (the workers then share the cores "
                                                           "out) or at most ", std::max(1, cores / local))
                                             : detail::cat("unset OMP_NUM_THREADS (the workers then share the cores "
                                                           "out) or set it to at most ", std::max(1, cores / local));
    log().warn("{} workers on this machine x {} thread{} each = {}, more than its {} cores: their steps wait on each "
               "other (many times slower); {}", local, run.threads, run.threads == 1 ? "" : "s", local * run.threads,
               cores, fix);
  }
  set_flush_denormal(T.get_bool("flush_denormal"));
  seed_everything(run.pipeline.seed);
  run.meter.set_caching(T.get_bool("cache_allocations"));
  run.meter.set_cap(0);  // the cap applies to training, from FIT_START on
  s.device = dist::worker_device(T, run.dist ? &run.dist->env() : nullptr);
  if (run.dist && s.device.is_cuda())
    T.check(run.dist->has_nccl(), "device",
            "is cuda in a data-parallel run but this tt has no NCCL backend: build it against a CUDA Torch with NCCL");
  // cuda:N is the current device too: the meter's statistics and device-less launches refer to it
  if (s.device.is_cuda() && s.device.has_index()) Meter::use_device(s.device.index());
}

// Batch sizes and the training length. (Their ranges, and micro_batch_size <= batch_size, are
// checked when the pipeline is read: core/src/pipeline.cpp.)
void read_limits(Run& run) {
  const Options& T = run.pipeline.trainer;
  State& s = run.state;
  s.batch_size = T.get_int("batch_size");
  s.micro_batch_size = T.is_set("micro_batch_size") ? T.get_int("micro_batch_size") : s.batch_size;
  if (T.is_set("epochs")) run.max_epochs = T.get_int("epochs");
  if (T.is_set("max_steps")) run.max_steps = T.get_int("max_steps");
  if (T.is_set("checkpoint_every")) run.checkpoint_every = T.get_int("checkpoint_every");
  run.checkpoint_seconds = T.get_float("checkpoint_minutes") * 60;
  if (run.max_epochs < 0 && run.max_steps < 0) run.max_epochs = 1;
}

// Rank 0's refusal of the run directory, passed to the other ranks in place of its path (which
// never starts with this byte): each stops with the same exit code and says why, rather than
// failing on the store rank 0 took with it.
constexpr char kRefused = '\x01';

[[noreturn]] void stop_as_rank0_did(const std::string& refusal) {
  const size_t space = refusal.find(' ');
  const int code = std::atoi(refusal.substr(1, space - 1).c_str());
  const std::string why = "rank 0 refused the run: " + refusal.substr(space + 1);
  if (code == ConfigError("").exit_code()) throw ConfigError(why);
  if (code == WriteError("").exit_code()) throw WriteError(why);
  throw Error(why);
}

void claim_run_dir(Run& run);

// Rank 0 names and writes the run directory (pipeline.yaml, log.txt); the others only read it.
void make_run_dir(Run& run) {
  State& s = run.state;
  if (!run.root) {
    const std::string dir = run.dist->broadcast_string("");
    if (!dir.empty() && dir[0] == kRefused) {
      run.dist->all_gather_strings("");  // received: rank 0 may exit (its store with it)
      stop_as_rank0_did(dir);
    }
    s.run_dir = dir;
    run.from_checkpoint = run.dist->broadcast_string("") == "1";
    return;
  }
  try {
    claim_run_dir(run);
  } catch (const std::exception& e) {
    if (run.dist) {
      const auto* tt_error = dynamic_cast<const Error*>(&e);
      try {
        run.dist->broadcast_string(kRefused + std::to_string(tt_error ? tt_error->exit_code() : 1) + " " + e.what());
        run.dist->all_gather_strings("");  // every rank has it
      } catch (const std::exception&) {
        // a rank gone already: the refusal is still this rank's error
      }
    }
    throw;
  }
  if (run.dist) {
    run.dist->broadcast_string(s.run_dir.string());
    run.dist->broadcast_string(run.from_checkpoint ? "1" : "0");
  }
}

// Rank 0's part: the directory checked (another run's is refused), made and taken.
void claim_run_dir(Run& run) {
  State& s = run.state;
  const Options& out = run.pipeline.output;
  // The run's directory once it is this run's: a refusal here (another run's directory) leaves it
  // as it was, no failure summary written over that run's.
  fs::path dir;
  if (!run.config.run_dir.empty()) dir = run.config.run_dir;
  else if (out.is_set("run_name")) dir = fs::path(out.get_string("dir")) / out.get_string("run_name");
  else dir = timestamped_dir(out.get_string("dir"), run.pipeline.name);
  run.dir_lock = lock_run_dir(dir);  // before anything in it is read or emptied
  std::error_code ec;
  if (!run.config.resume) {
    // Two runs in one directory would mix their checkpoints and metrics. One that failed before
    // its first step (a bad option) left nothing to keep: its directory is used again.
    std::vector<std::string> held;
    const fs::path summary = dir / "summary.json", metrics = dir / "metrics.jsonl";
    if (fs::exists(summary, ec) && summary_status(read_summary(summary)) != "failed") held.push_back("summary.json");
    if (fs::exists(metrics, ec) && fs::file_size(metrics, ec) > 0) held.push_back("metrics.jsonl");
    if (const size_t n = list_checkpoints(dir / "checkpoints").size())
      held.push_back(std::to_string(n) + " checkpoint" + (n == 1 ? "" : "s"));
    std::string what;
    for (const auto& h : held) what += (what.empty() ? "" : ", ") + h;
    if (!held.empty() && run.config.overwrite) {
      // Only a directory tt-run made is emptied: its pipeline.yaml says so.
      std::ifstream in(dir / "pipeline.yaml");
      std::string first;
      std::getline(in, first);
      TT_CHECK_AS(ConfigError, first.rfind("# resolved by tt-run", 0) == 0, "--overwrite empties only a run directory: ",
                  dir.string(), " holds ", what, " but no pipeline.yaml written by tt-run; remove it yourself");
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().filename() != ".tt-lock") fs::remove_all(e.path(), ec);  // the lock stays this run's
      TT_CHECK_AS(WriteError, !ec, "cannot empty the run directory ", dir.string(), " for --overwrite: ",
                  ec.message());
      log().info("--overwrite: emptied {} (it held {})", dir.string(), what);
      held.clear();
    }
    if (!held.empty())
      TT_FAIL_AS(ConfigError, "the run directory ", dir.string(), " already holds a run (", what,
                 "): continue it with tt-run --resume ", dir.string(), ", start it again with --overwrite, ",
                 "or give another ", run.config.run_dir.empty() ? "output.run_name" : "--run-dir");
  }
  // A run stopped before its first checkpoint (or one that trains no steps) has nothing to
  // continue from: it starts again from step 0, as it started the first time. One whose summary
  // says it trained steps has results a new start would replace: that is --overwrite's to do.
  run.from_checkpoint = run.config.resume && !list_checkpoints(dir / "checkpoints").empty();
  if (run.config.resume && !run.from_checkpoint) {
    const nlohmann::json previous = read_summary(dir / "summary.json");
    const int64_t trained =
        previous.contains("steps") && previous["steps"].is_number_integer() ? previous["steps"].get<int64_t>() : 0;
    const std::string again = detail::cat("start it again with ", launch_command(run), " ", (dir / "pipeline.yaml").string(),
                                          " --run-dir ", dir.string(), " --overwrite",
                                          launched_as_before(run, "--run-dir " + dir.string() + " --overwrite"));
    TT_CHECK_AS(ConfigError, trained == 0 || summary_status(previous) != "failed", dir.string(), " holds no checkpoint: ",
                "the run failed at step ", trained, " before its first (one is written every trainer.checkpoint_every "
                "steps, every trainer.checkpoint_minutes unless 0, and at the end); ", again,
                " (trainer.checkpoint_every=N keeps its progress)");
    // A comparison's variant (tt-run's compare.cpp) keeps no weights: a new start elsewhere, not
    // --overwrite, which would replace the comparison's measurements.
    TT_CHECK_AS(ConfigError, !previous.contains("checkpoints_removed"), dir.string(), " is a variant of a comparison, "
                "which keeps its measurements, not its weights (its checkpoints were removed when it ended): it cannot "
                "continue; to train it, run tt-run ", (dir / "pipeline.yaml").string(), " with another --run-dir");
    TT_CHECK_AS(ConfigError, trained == 0, dir.string(), " holds no checkpoint, but its summary.json says it trained ",
                trained, " step", trained == 1 ? "" : "s", " (were its checkpoints removed?): it cannot continue; ", again);
    // No summary: the process ended before it could write one (killed, or stopped by the
    // interrupt's grace in a phase that does not look at it)
    const int64_t logged = previous.empty() ? last_logged_step(dir / "metrics.jsonl") : 0;
    TT_CHECK_AS(ConfigError, logged == 0, dir.string(), " holds no checkpoint, but its metrics.jsonl shows it trained ",
                logged, " step", logged == 1 ? "" : "s", " before it ended without a summary (killed, or stopped "
                "before it could write its first checkpoint): it cannot continue; ", again,
                " (trainer.checkpoint_every=N keeps its progress)");
  }
  const std::string named_by = !run.config.run_dir.empty() ? (run.config.resume ? "--resume" : "--run-dir")
                               : out.is_set("run_name")    ? "output.dir and output.run_name"
                                                           : "output.dir";
  TT_CHECK_AS(ConfigError, !fs::exists(dir, ec) || fs::is_directory(dir, ec), "the run directory ", dir.string(),
              " is a file, not a directory: give ", named_by, " another path");
  fs::create_directories(dir / "checkpoints", ec);
  TT_CHECK_AS(WriteError, !ec, "cannot create the run directory ", dir.string(), ": ", ec.message(), " (give ",
              named_by, " a writable place)");
  s.run_dir = dir;
  if (!run.config.resume) write_pipeline_file(run);  // a resume's, once it starts training
  run.log_file = std::make_shared<LogFileSink>(s.run_dir / "log.txt");
  log().sinks().push_back(run.log_file);
}
}  // namespace

void setup_run(Run& run, std::vector<std::unique_ptr<Plugin>> extra_plugins) {
  const Pipeline& p = run.pipeline;
  const Options& T = p.trainer;
  State& s = run.state;
  setup_process(run);
  read_limits(run);
  make_run_dir(run);
  s.pipeline = &run.pipeline;
  s.meter = &run.meter;
  s.datasets = &run.data;
  Registry& reg = Registry::global();

  try {
    run.data = with_context("data (" + p.data.name + ")", [&] { return reg.dataset(p.data.name).factory(p.data.options, p.seed); });
  } catch (const ConfigError& e) {
    const std::string hint = moved_data_hint(run);  // a relative path read from another directory
    if (hint.empty()) throw;
    throw ConfigError(e.what() + hint);
  }
  TT_CHECK(run.data.train, "data (", p.data.name, ") produced no training set");
  s.model = with_context("model (" + p.model.name + ")", [&] { return reg.model(p.model.name).factory(p.model.options, run.data); });
  if (!run.predict_input.empty()) s.model->check_predict_input(run.predict_input);  // before training
  // On a resume the checkpoint brings every weight after INIT; init_from is still loaded first
  // (INIT sees the weights it saw the first time) unless it is gone, which does not stop a resume.
  std::error_code gone;
  if (run.from_checkpoint && p.model.options.is_set("init_from") &&
      !fs::exists(p.model.options.get_string("init_from"), gone))
    log().info("model.init_from ({}) is gone; the run resumes without it: its checkpoint has every weight",
               p.model.options.get_string("init_from"));
  else if (p.model.options.is_set("init_from"))
    init_model_from(run, p.model.options.get_string("init_from"), p.model.options.get_int("init_average"));
  else
    p.model.options.check(p.model.options.get_int("init_average") == 1, "init_average",
                          "averages the checkpoints of init_from, which is not set");
  s.model->to(s.device);
  s.model->train();

  run.host.add_pipeline_plugins(p.plugins);
  for (auto& pl : extra_plugins) run.host.add_plugin(std::move(pl));
  run.host.check_declarations(p.trainer);
  run.host.fire(Event::INIT, s);
  check_archive_names(*s.model, p.model.name);  // before training, not at the first resume
  freeze_teacher(s);
  for (const auto& param : s.model->parameters()) {
    s.memory.parameters += static_cast<int64_t>(param.nbytes());
    if (param.requires_grad()) run.trainable.push_back(param);
  }
  TT_CHECK(!run.trainable.empty(), "model (", p.model.name, ") has no trainable parameters");
  s.optimizer = with_context("optimizer (" + p.optimizer.name + ")",
                             [&] { return reg.optimizer(p.optimizer.name).factory(run.trainable, p.optimizer.options); });
  run.host.fire(Event::OPTIMIZER, s);
  TT_CHECK(s.optimizer && !s.optimizer->param_groups().empty(), "no optimizer after the OPTIMIZER event");
  s.model->on_optimizer(*s.optimizer, !run.host.plugins().empty() || T.is_set("grad_clip"));
  run.base_lr = s.optimizer->param_groups()[0].options().get_lr();
  run.schedule = reg.schedule(p.schedule.name).factory(p.schedule.options);
  s.schedule = run.schedule.get();

  run.loader = std::make_unique<DataLoader>(run.data.train, s.batch_size, T.get_bool("shuffle"), p.seed,
                                            T.get_bool("prefetch"));
  if (run.dist) {
    run.sync = std::make_unique<GradSync>(run);
    run.loader->shard(run.dist->rank(), run.dist->world_size(), run.sync->owned_rows());
  }
  s.batches_per_epoch = run.loader->batches_per_epoch();
  if (const int64_t n = run.data.train->size(), world = run.dist ? run.dist->world_size() : 1; n < s.batch_size * world)
    log().warn("trainer.batch_size {}{} is more than the {} examples of an epoch: each step takes {} examples (the "
               "whole epoch), not {}", s.batch_size, world > 1 ? fmt::format(" x {} ranks", world) : "", n, n,
               s.batch_size * world);
  if (run.threads >= 2 && run.loader->helper() && s.model->small_steps()) {
    Helper::use_for_loops(run.loader->helper());
    log().debug("small steps: the prefetch thread joins the model's loops (tt::parallel_for) as the second thread");
  }
  const int64_t by_epochs = run.max_epochs > 0 ? run.max_epochs * s.batches_per_epoch : -1;
  s.total_steps = by_epochs < 0 ? run.max_steps : (run.max_steps < 0 ? by_epochs : std::min(by_epochs, run.max_steps));
  if (s.total_steps == 0 && !p.model.options.is_set("init_from") && !run.from_checkpoint)
    log().warn("this run trains no steps and model.init_from is not set: it evaluates{} the model's initial, untrained "
               "weights (set model.init_from to a run directory or weights file)",
               run.predict_input.empty() ? "" : " and predicts with");
  run.set_lr(run.schedule->lr({0, s.total_steps, 0.0, run.base_lr}));
}

}  // namespace tt
