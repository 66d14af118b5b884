#include "tt/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/resource.h>

#include "tt/checkpoint.h"
#include "tt/data_loader.h"
#include "tt/dist.h"
#include "tt/helper.h"
#include "tt/error.h"
#include "tt/fused_adamw.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/report.h"
#include "tt/runtime.h"
#include "tt/schedule.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace tt {

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

int64_t tensor_bytes(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (t.is_sparse()) n += static_cast<int64_t>(t._indices().nbytes() + t._values().nbytes());
    else n += static_cast<int64_t>(t.nbytes());
  }
  return n;
}

// Exceptions from components get the component named, unless they are tt's own (which
// already say what to fix) or out-of-memory (which the loop handles).
template <class F>
auto with_context(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& e) {
    TT_FAIL(what, ": ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    TT_FAIL(what, ": ", e.what());
  }
}
}  // namespace

struct Trainer::Impl {
  Pipeline p;
  TrainerConfig cfg;
  State s;
  std::vector<std::unique_ptr<Plugin>> plugins;
  std::vector<std::unique_ptr<Plugin>> extra_plugins;
  std::unique_ptr<Schedule> schedule;
  Datasets data;
  std::unique_ptr<DataLoader> loader;
  std::vector<torch::Tensor> trainable;
  MetricsFile metrics;
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file_sink;
  std::vector<double> step_losses, step_times, epoch_losses, epoch_times, optimizer_times;
  MemoryBreakdown mem;
  json summary;
  Meter& meter = Meter::global();
  std::vector<double> comm_times;  // seconds in collectives per step (multi-process runs)
  std::vector<std::string> replica_hashes;  // FNV-1a of every rank's parameters after the fit
  int64_t global_examples = 0;       // examples of the last batch over all ranks
  bool owned_rows = false;           // trainer.dist_rows: owned
  std::set<size_t> owned_row_params;  // trainable indices whose row gradients stay on their rank
  bool dist_interrupt = false;     // some rank was interrupted: all stop at this batch
  int64_t bucket_bytes = 25 << 20;
  dist::Context* dist = nullptr;  // a multi-process run (tt-run --nproc, torchrun environment)
  bool root = true;               // rank 0: the one that writes the run directory
  bool sum_reduced = false;       // the last micro-batch's loss was sum-reduced

  int64_t max_epochs = -1, max_steps = -1, skipped = 0, start_step = 0;
  int64_t next_epoch = 0, next_batch = 0;  // resume position
  double base_lr = 0, epoch_loss_sum = 0;
  int64_t epoch_batches = 0, last_checkpoint_step = -1;
  bool optimizer_measured = false, grads_measured = false, resumed = false;
  int threads = 1;
  Clock::time_point t_start;
  double setup_seconds = 0;
  std::string resumed_from;
  struct rusage usage0 {}, usage1 {};  // around the training loop
  std::map<std::string, double> model_metrics;  // what write_outputs reported
  int64_t last_eval_step = -1;
  std::map<std::string, double> last_eval;

  ~Impl() {
    if (file_sink) {
      auto& sinks = log().sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), file_sink), sinks.end());
    }
  }

  // Live and peak bytes where the model's tensors live: the CPU meter, or CUDA's allocator.
  int64_t live() const { return s.device.is_cuda() ? Meter::device_current() : meter.current(); }
  // What this thread's work holds: live() without the batch the loader is prefetching meanwhile
  // (the deltas of activations and optimizer state are measured on it).
  int64_t live_fg() const { return s.device.is_cuda() ? Meter::device_current() : meter.foreground_current(); }
  int64_t peak() const { return s.device.is_cuda() ? Meter::device_peak() : meter.peak(); }
  void reset_peak() {
    meter.reset_peak();
    if (s.device.is_cuda()) Meter::reset_device_peak();
  }

  void fire(Event e) {
    if (runs_in_reverse(e)) {
      for (auto it = plugins.rbegin(); it != plugins.rend(); ++it) (*it)->on(e, s);
    } else {
      for (auto& pl : plugins) pl->on(e, s);
    }
  }

  // ---------------------------------------------------------------- setup
  void make_run_dir() {
    if (!root) {  // rank 0 names and writes the run directory; the others only read it (resume)
      s.run_dir = dist->broadcast_string("");
      return;
    }
    if (!cfg.run_dir.empty()) {
      s.run_dir = cfg.run_dir;
    } else {
      fs::path parent = p.output.get_string("dir");
      std::string name = p.output.is_set("run_name") ? p.output.get_string("run_name") : p.name + "-" + timestamp();
      fs::path dir = parent / name;
      for (int i = 2; fs::exists(dir) && !p.output.is_set("run_name"); ++i) dir = parent / (name + "-" + std::to_string(i));
      s.run_dir = dir;
    }
    std::error_code ec;
    fs::create_directories(s.run_dir / "checkpoints", ec);
    TT_CHECK(!ec, "cannot create the run directory ", s.run_dir.string(), ": ", ec.message(),
             " (set output.dir to a writable place)");
    std::ofstream(s.run_dir / "pipeline.yaml") << "# resolved by tt-run from " << p.file << "\n" << p.resolved_yaml();
    file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>((s.run_dir / "log.txt").string());
    log().sinks().push_back(file_sink);
    if (dist) dist->broadcast_string(s.run_dir.string());
  }

  void setup() {
    const Options& T = p.trainer;
    dist = dist::context();
    if (dist) {
      root = dist->is_root();
      s.rank = dist->rank();
      s.world_size = dist->world_size();
      // The same pipeline everywhere, or gradients of different models would be averaged.
      dist->check_same("resolved pipeline", p.resolved_yaml());
      if (!root) {
        cfg.quiet = true;
        log().set_level(spdlog::level::warn);  // rank 0 reports; the others only warn
      }
      if (const char* b = std::getenv("TT_DIST_BUCKET_MB")) bucket_bytes = static_cast<int64_t>(std::atof(b) * (1 << 20));
    }
    meter.install();
    threads = configure_threads(static_cast<int>(T.get_int("threads")));
    set_flush_denormal(T.get_bool("flush_denormal"));
    seed_everything(p.seed);
    meter.set_caching(T.get_bool("cache_allocations"));
    meter.set_cap(0);  // the cap applies to training, from FIT_START on
    const std::string dev = T.get_string("device");
    try {
      s.device = torch::Device(dev);
    } catch (const std::exception&) {
      T.fail("device", "must be cpu, cuda or cuda:N, got '" + dev + "'");
    }
    if (s.device.is_cuda() && !torch::cuda::is_available())
      T.fail("device", TT_WITH_CUDA ? "is cuda but no CUDA device is visible" : "is cuda but this tt is built without CUDA (LibTorch is CPU-only)");
    if (dist && s.device.is_cuda()) {
      // One GPU per rank, as torchrun does it: `device: cuda` means cuda:LOCAL_RANK.
      const int64_t n = static_cast<int64_t>(torch::cuda::device_count());
      if (!s.device.has_index()) {
        // one visible GPU: the launcher gave each rank its own (CUDA_VISIBLE_DEVICES per rank)
        T.check(dist->local_rank() < n || n == 1, "device",
                "is cuda but local rank " + std::to_string(dist->local_rank()) + " has no GPU of its own (" +
                    std::to_string(n) + " visible): start at most " + std::to_string(n) + " workers per machine");
        s.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(n == 1 ? 0 : dist->local_rank()));
      }
      T.check(dist->has_nccl(), "device",
              "is cuda in a data-parallel run but this tt has no NCCL backend: build it against a CUDA Torch with NCCL");
    }
    // cuda:N is the current device too: the meter's statistics and device-less launches refer to it
    if (s.device.is_cuda() && s.device.has_index()) Meter::use_device(s.device.index());

    s.batch_size = T.get_int("batch_size");
    T.check(s.batch_size > 0, "batch_size", "must be positive");
    s.micro_batch_size = T.is_set("micro_batch_size") ? T.get_int("micro_batch_size") : s.batch_size;
    T.check(s.micro_batch_size > 0 && s.micro_batch_size <= s.batch_size, "micro_batch_size",
            "must be between 1 and batch_size (" + std::to_string(s.batch_size) + ")");
    if (T.is_set("epochs")) {
      max_epochs = T.get_int("epochs");
      T.check(max_epochs > 0, "epochs", "must be positive");
    }
    if (T.is_set("max_steps")) {
      max_steps = T.get_int("max_steps");
      T.check(max_steps >= 0, "max_steps", "must not be negative (0: no training, only evaluation and outputs)");
    }
    if (max_epochs < 0 && max_steps < 0) max_epochs = 1;
    T.check(T.get_string("on_nan") == "error" || T.get_string("on_nan") == "skip", "on_nan", "must be error or skip");
    Progress::parse_mode(T.get_string("progress"));

    make_run_dir();
    s.pipeline = &p;
    s.meter = &meter;
    Registry& reg = Registry::global();

    data = with_context("data (" + p.data.name + ")",
                        [&] { return reg.dataset(p.data.name).factory(p.data.options, p.seed); });
    TT_CHECK(data.train, "data (", p.data.name, ") produced no training set");
    s.model = with_context("model (" + p.model.name + ")",
                           [&] { return reg.model(p.model.name).factory(p.model.options, data); });
    if (p.model.options.is_set("init_from"))
      init_model_from(p.model.options.get_string("init_from"), p.model.options.get_int("init_average"));
    else
      TT_CHECK_AS(ConfigError, p.model.options.get_int("init_average") == 1,
                  "model.init_average: averages the checkpoints of model.init_from, which is not set");
    s.model->to(s.device);
    s.model->train();

    for (size_t i = 0; i < p.plugins.size(); ++i) {
      const auto& spec = p.plugins[i];
      const auto& comp = reg.plugin(spec.name);
      std::unique_ptr<Plugin> pl;
      try {
        pl = comp.factory(spec.options);
      } catch (const ConfigError&) {
        throw;  // the plugin's own check of its options: already names the option and the fix
      } catch (const std::exception& e) {
        TT_FAIL_AS(ModuleError, "plugin '", spec.name, "' (", comp.origin, "): factory threw: ", e.what());
      }
      TT_CHECK_AS(ModuleError, pl, "plugin '", spec.name, "' (", comp.origin, "): factory returned nothing");
      pl->set_name(spec.name);
      plugins.push_back(std::move(pl));
    }
    for (auto& pl : extra_plugins) plugins.push_back(std::move(pl));
    extra_plugins.clear();

    fire(Event::INIT);
    for (const auto& param : s.model->parameters()) {
      mem.parameters += static_cast<int64_t>(param.nbytes());
      if (param.requires_grad()) trainable.push_back(param);
    }
    TT_CHECK(!trainable.empty(), "model (", p.model.name, ") has no trainable parameters");
    s.optimizer = with_context("optimizer (" + p.optimizer.name + ")", [&] {
      return reg.optimizer(p.optimizer.name).factory(trainable, p.optimizer.options);
    });
    fire(Event::OPTIMIZER);
    TT_CHECK(s.optimizer && !s.optimizer->param_groups().empty(), "no optimizer after the OPTIMIZER event");
    s.model->on_optimizer(*s.optimizer, !plugins.empty() || p.trainer.is_set("grad_clip"));
    base_lr = s.optimizer->param_groups()[0].options().get_lr();
    schedule = reg.schedule(p.schedule.name).factory(p.schedule.options);
    s.schedule = schedule.get();

    loader = std::make_unique<DataLoader>(data.train, s.batch_size, T.get_bool("shuffle"), p.seed,
                                          T.get_bool("prefetch"));
    const std::string rows_mode = T.get_string("dist_rows");
    T.check(rows_mode == "all-reduce" || rows_mode == "owned", "dist_rows", "must be all-reduce or owned");
    owned_rows = dist && rows_mode == "owned";
    if (dist) loader->shard(dist->rank(), dist->world_size(), owned_rows);
    s.batches_per_epoch = loader->batches_per_epoch();
    if (threads >= 2 && loader->helper() && s.model->small_steps()) {
      Helper::use_for_loops(loader->helper());
      log().debug("small steps: the prefetch thread joins the model's loops (tt::parallel_for) as the second thread");
    }
    int64_t by_epochs = max_epochs > 0 ? max_epochs * s.batches_per_epoch : -1;
    s.total_steps = by_epochs < 0 ? max_steps : (max_steps < 0 ? by_epochs : std::min(by_epochs, max_steps));
    set_lr(schedule->lr({0, s.total_steps, 0.0, base_lr}));
  }

  // Module::load replaces each tensor by the archive's whatever its shape: check the shapes.
  // Returns what does not match ("" when all do).
  std::string load_model_checked(torch::serialize::InputArchive& model_ar) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& t : s.model->named_parameters()) shapes[t.key()] = t.value().sizes().vec();
    for (const auto& t : s.model->named_buffers()) shapes[t.key()] = t.value().sizes().vec();
    {
      torch::NoGradGuard no_grad;
      s.model->load(model_ar);
    }
    auto check = [&](const std::string& name, const at::Tensor& t) -> std::string {
      const auto& want = shapes[name];
      if (t.sizes().vec() == want) return {};
      return detail::cat(name, " is ", t.sizes(), " there but ", c10::IntArrayRef(want), " here");
    };
    for (const auto& t : s.model->named_parameters())
      if (auto m = check(t.key(), t.value()); !m.empty()) return m;
    for (const auto& t : s.model->named_buffers())
      if (auto m = check(t.key(), t.value()); !m.empty()) return m;
    return {};
  }

  // model.init_from: the weights of another run (its newest readable checkpoint) or of one
  // checkpoint file; loaded before plugins act on the model (LoRA adapts the loaded weights).
  // model.init_average N > 1: the elementwise mean of the newest N readable checkpoints' floating
  // parameters and buffers (accumulated in double); other buffers come from the newest.
  void init_model_from(const std::string& from, int64_t average) {
    const fs::path src = from;
    TT_CHECK_AS(ConfigError, average >= 1, "model.init_average: must be at least 1 (got ", average, ")");
    std::vector<fs::path> files;
    if (fs::is_directory(src)) {
      files = list_checkpoints(fs::is_directory(src / "checkpoints") ? src / "checkpoints" : src);
      TT_CHECK_AS(ConfigError, !files.empty(), "model.init_from: ", from,
                  " has no checkpoints (checkpoints/step-*.pt); train it with trainer.checkpoint_every, or name a "
                  "checkpoint file");
    } else {
      TT_CHECK_AS(ConfigError, fs::is_regular_file(src), "model.init_from: ", from,
                  " does not exist (give a run directory or a checkpoint file)");
      TT_CHECK_AS(ConfigError, average == 1, "model.init_average: ", average, " needs model.init_from to be a run ",
                  "directory with that many checkpoints, not the file ", from);
      files.push_back(src);
    }
    std::string failures;
    std::vector<fs::path> used;
    std::map<std::string, at::Tensor> sum, newest;  // floating tensors' sums; the newest's others
    auto tensors = [&] {
      std::vector<std::pair<std::string, at::Tensor>> all;
      for (const auto& t : s.model->named_parameters()) all.emplace_back(t.key(), t.value());
      for (const auto& t : s.model->named_buffers()) all.emplace_back(t.key(), t.value());
      return all;
    };
    for (auto it = files.rbegin(); it != files.rend() && static_cast<int64_t>(used.size()) < average; ++it) {
      torch::serialize::InputArchive ar, model_ar;
      try {
        ar.load_from(it->string());
        ar.read("model", model_ar);
      } catch (const std::exception& e) {
        failures += "\n  " + it->string() + ": " + std::string(e.what()).substr(0, 200);
        continue;  // unreadable: try the one before (as --resume does)
      }
      std::string mismatch;
      try {
        mismatch = load_model_checked(model_ar);
      } catch (const std::exception& e) {
        std::string what = e.what();
        mismatch = what.substr(0, what.find('\n'));
      }
      TT_CHECK_AS(ConfigError, mismatch.empty(), "model.init_from: ", it->string(), " does not fit this model (",
                  mismatch, "): use the model settings of the run that wrote it (its pipeline.yaml)");
      used.push_back(*it);
      if (average == 1) break;
      torch::NoGradGuard no_grad;
      for (const auto& [name, t] : tensors()) {
        if (!t.is_floating_point()) {
          if (!newest.count(name)) newest[name] = t.clone();
        } else if (!sum.count(name)) {
          sum[name] = t.to(torch::kDouble).clone();
        } else {
          sum[name] += t.to(torch::kDouble);
        }
      }
    }
    if (used.empty()) TT_FAIL_AS(ConfigError, "model.init_from: no readable checkpoint in ", from, ":", failures);
    TT_CHECK_AS(ConfigError, static_cast<int64_t>(used.size()) == average, "model.init_average: ", average,
                " checkpoints asked for, but ", from, " has ", used.size(), " readable ones",
                failures.empty() ? std::string() : ":" + failures,
                " (lower init_average, or keep more with trainer.keep_checkpoints when training it)");
    if (average == 1) {
      log().info("model weights from {}", used[0].string());
      return;
    }
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : tensors()) {
      if (t.is_floating_point()) t.copy_(sum.at(name) / static_cast<double>(average));
      else t.copy_(newest.at(name));
    }
    std::string names;
    for (const auto& u : used) names += (names.empty() ? "" : ", ") + u.filename().string();
    log().info("model weights: the mean of {} checkpoints of {} ({})", average, from, names);
  }

  void set_lr(double lr) {
    s.lr = lr;
    for (auto& g : s.optimizer->param_groups()) g.options().set_lr(lr);
  }

  // ---------------------------------------------------------------- checkpoints
  std::string plugin_list() const {
    std::string names;
    for (const auto& pl : plugins) names += (names.empty() ? "" : ",") + pl->name();
    return names;
  }

  // An optimizer that defers updates (FusedAdamW::defer_rows) brings every parameter up to
  // date before anything reads them whole: evaluation, checkpoints, outputs, epoch ends.
  void flush_optimizer() {
    if (auto* f = dynamic_cast<FusedAdamW*>(s.optimizer.get())) f->flush();
    if (dist && owned_rows) assemble_owned_rows();
  }

  // trainer.dist_rows: owned: each rank has trained the rows of its own documents (i % world
  // == rank); every rank gets every row from its owner before anything reads them whole.
  void assemble_owned_rows() {
    torch::NoGradGuard no_grad;
    const int64_t w = dist->world_size();
    for (size_t i : owned_row_params) {
      torch::Tensor& p = trainable[i];
      const int64_t n = p.size(0);
      torch::Tensor all = dist->all_gather(p.detach()).view({w, n, -1});
      torch::Tensor rows = torch::arange(n, torch::kLong);
      p.detach().view({n, -1}).copy_(all.index({rows.remainder(w), rows}));
    }
    dist->take_comm_seconds();
  }

  void save_checkpoint() {
    flush_optimizer();  // on every rank: the parameters stay equal across ranks
    if (!root) {
      if (!s.gradient_sync) {  // a sharded optimizer's save gathers every rank's state
        torch::serialize::OutputArchive unused;
        s.optimizer->save(unused);
      }
      last_checkpoint_step = s.step;
      return;
    }
    torch::serialize::OutputArchive ar;
    torch::serialize::OutputArchive model_ar, opt_ar;
    s.model->save(model_ar);
    ar.write("model", model_ar);
    s.optimizer->save(opt_ar);
    ar.write("optimizer", opt_ar);
    for (size_t i = 0; i < plugins.size(); ++i) {
      torch::serialize::OutputArchive pa;
      plugins[i]->save_state(pa);
      ar.write("plugin_" + std::to_string(i), pa);
    }
    ar.write("trainer/plugins", c10::IValue(plugin_list()));
    ar.write("trainer/rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
    ar.write("trainer/step", c10::IValue(s.step));
    ar.write("trainer/next_epoch", c10::IValue(s.epoch));
    ar.write("trainer/next_batch", c10::IValue(s.batch_in_epoch + 1));
    ar.write("trainer/skipped", c10::IValue(skipped));
    ar.write("trainer/lr", c10::IValue(s.lr));
    ar.write("trainer/epoch_loss_sum", c10::IValue(epoch_loss_sum));
    ar.write("trainer/epoch_batches", c10::IValue(epoch_batches));
    ar.write("trainer/micro_batch_size", c10::IValue(s.micro_batch_size));
    ar.write("trainer/world_size", c10::IValue(static_cast<int64_t>(s.world_size)));
    if (loader->streaming()) {  // where the text stream stands, so a resume continues it exactly
      const std::string& pos = loader->position();
      ar.write("trainer/data_position",
               torch::from_blob(const_cast<char*>(pos.data()), {static_cast<int64_t>(pos.size())}, torch::kUInt8).clone());
    }
    const fs::path dir = s.run_dir / "checkpoints";
    save_archive_atomic(ar, checkpoint_path(dir, s.step));
    prune_checkpoints(dir, static_cast<int>(p.trainer.get_int("keep_checkpoints")));
    last_checkpoint_step = s.step;
  }

  static int64_t read_int(torch::serialize::InputArchive& ar, const std::string& key) {
    c10::IValue v;
    ar.read(key, v);
    return v.toInt();
  }
  static double read_double(torch::serialize::InputArchive& ar, const std::string& key) {
    c10::IValue v;
    ar.read(key, v);
    return v.toDouble();
  }

  void load_checkpoint() {
    auto all = list_checkpoints(s.run_dir / "checkpoints");
    TT_CHECK(!all.empty(), s.run_dir.string(), ": no checkpoint to resume from (checkpoints/step-*.pt)");
    std::string failures;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      try {
        load_checkpoint_file(*it);
        resumed_from = it->string();
        return;
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        log().warn("checkpoint {} is unreadable ({}); trying the previous one", it->string(),
                   std::string(e.what()).substr(0, 200));
        failures += "\n  " + it->string() + ": " + std::string(e.what()).substr(0, 200);
      }
    }
    TT_FAIL("no readable checkpoint in ", (s.run_dir / "checkpoints").string(), ":", failures);
  }

  void load_checkpoint_file(const fs::path& file) {
    torch::serialize::InputArchive ar;
    ar.load_from(file.string());
    c10::IValue names;
    ar.read("trainer/plugins", names);
    TT_CHECK(names.toStringRef() == plugin_list(), file.string(), " was written with plugins [",
             names.toStringRef(), "] but the pipeline now has [", plugin_list(),
             "]: resume with the same plugins (their state is part of the checkpoint)");
    TT_CHECK_AS(ConfigError, !owned_rows, "trainer.dist_rows: owned cannot resume (", file.string(),
                " holds rank 0's optimizer moments only for the rows other ranks own); use dist_rows: all-reduce");
    {
      c10::IValue ws;
      const int64_t saved_world = ar.try_read("trainer/world_size", ws) ? ws.toInt() : 1;
      TT_CHECK_AS(ConfigError, saved_world == s.world_size, file.string(), " was written by a run of ", saved_world,
                  " process(es) but this one has ", s.world_size, ": resume with the same world size (tt-run --nproc ",
                  saved_world, "); the data order and sharded state depend on it");
    }
    torch::serialize::InputArchive model_ar, opt_ar;
    ar.read("model", model_ar);
    const std::string mismatch = load_model_checked(model_ar);
    TT_CHECK(mismatch.empty(), file.string(), " does not fit the model of this pipeline (", mismatch,
             "): resume with the pipeline the run was made with");
    int64_t before = live_fg();
    ar.read("optimizer", opt_ar);
    s.optimizer->load(opt_ar);
    mem.optimizer_state = std::max<int64_t>(0, live_fg() - before);
    optimizer_measured = true;
    for (size_t i = 0; i < plugins.size(); ++i) {
      torch::serialize::InputArchive pa;
      ar.read("plugin_" + std::to_string(i), pa);
      plugins[i]->load_state(pa);
    }
    at::Tensor rng;
    ar.read("trainer/rng_cpu", rng);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng);
    s.step = read_int(ar, "trainer/step");
    next_epoch = read_int(ar, "trainer/next_epoch");
    next_batch = read_int(ar, "trainer/next_batch");
    skipped = read_int(ar, "trainer/skipped");
    epoch_loss_sum = read_double(ar, "trainer/epoch_loss_sum");
    epoch_batches = read_int(ar, "trainer/epoch_batches");
    s.micro_batch_size = read_int(ar, "trainer/micro_batch_size");
    set_lr(read_double(ar, "trainer/lr"));
    if (loader->streaming()) {
      at::Tensor pos;
      TT_CHECK(ar.try_read("trainer/data_position", pos), file.string(),
               " has no stream position (it was written for a map-style dataset): resume with the pipeline it was made with");
      pos = pos.contiguous();
      loader->restore(next_epoch, next_batch, std::string(static_cast<const char*>(pos.data_ptr()), pos.numel()));
    }
    resumed = true;
  }

  // ---------------------------------------------------------------- data parallel
  // Every rank has run forward/backward on its part of the batch. One small all-reduce
  // agrees on the batch's loss, example count, a skip (NaN on any rank) and an interrupt;
  // then the gradients, weighted by the rank's share of the batch for mean-reduced losses,
  // are summed in flattened buckets, so that every rank steps with the whole batch's gradient
  // (bitwise the same on all ranks). Only trainable parameters take part (LoRA: the
  // adapters); sparse gradients are summed densely. Plugins see the synchronized gradients
  // at BEFORE_STEP (unscale, clip) and the optimizer steps on them (adam8bit, offload).
  bool sync_gradients(bool ok, json& line) {
    const size_t np = trainable.size();
    at::Tensor head = torch::zeros({static_cast<int64_t>(4 + np)}, torch::kDouble);
    auto h = head.accessor<double, 1>();
    const double n = static_cast<double>(s.batch.size);
    h[0] = ok ? s.batch_loss * (sum_reduced ? 1.0 : n) : 0.0;
    h[1] = n;
    h[2] = ok ? 0.0 : 1.0;
    h[3] = interrupt_requested() ? 1.0 : 0.0;
    for (size_t i = 0; i < np; ++i) h[4 + i] = ok && trainable[i].grad().defined() ? 1.0 : 0.0;
    dist->all_reduce_sum(head);
    h = head.accessor<double, 1>();
    dist_interrupt = h[3] > 0;
    global_examples = static_cast<int64_t>(h[1]);
    bool synced = h[2] == 0;
    if (synced) {
      s.batch_loss = sum_reduced ? h[0] : h[0] / h[1];
      const double share = sum_reduced ? 1.0 : n / h[1];
      std::vector<torch::Tensor> grads;
      std::vector<size_t> which;
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < np; ++i) {
        if (h[4 + i] == 0) continue;  // no rank has a gradient for it: it stays without one
        torch::Tensor g = trainable[i].grad();
        if (owned_rows && g.defined() && g.is_sparse()) {
          // rows of this rank's own documents: no other rank has gradient for them
          if (share != 1.0) trainable[i].mutable_grad() = g * share;
          owned_row_params.insert(i);
          continue;
        }
        if (!g.defined()) g = torch::zeros_like(trainable[i]);
        else if (g.is_sparse()) g = g.to_dense();
        else if (!g.is_contiguous()) g = g.contiguous();
        if (share != 1.0) g.mul_(share);
        grads.push_back(g);
        which.push_back(i);
      }
      if (s.gradient_sync) dist->all_reduce_sum_bucketed(grads, bucket_bytes);  // else the optimizer's (zero1)
      for (size_t j = 0; j < which.size(); ++j) trainable[which[j]].mutable_grad() = grads[j];
    } else {
      if (ok) log().warn("step {}: another rank dropped its part of the batch; every rank skips this step", s.step + 1);
      zero_grads();
    }
    const double comm = dist->take_comm_seconds();
    comm_times.push_back(comm);
    line["comm_seconds"] = comm;
    return synced;
  }

  // All ranks start from rank 0's parameters and buffers (after a resume, too).
  void broadcast_model() {
    std::vector<torch::Tensor> ts;
    for (const auto& t : s.model->parameters()) ts.push_back(t);
    for (const auto& t : s.model->buffers()) ts.push_back(t);
    dist->broadcast(ts, 0);
    dist->take_comm_seconds();
  }

  // ---------------------------------------------------------------- one batch
  void zero_grads() {
    for (auto& t : trainable)
      if (t.grad().defined()) t.mutable_grad() = torch::Tensor();
  }

  // Forward and backward over the micro-batches; returns false if the batch was dropped (NaN, skip).
  bool forward_backward() {
    zero_grads();
    const Batch& batch = s.batch;
    s.micro_count = (batch.size + s.micro_batch_size - 1) / s.micro_batch_size;
    s.batch_loss = 0;
    for (s.micro_index = 0; s.micro_index < s.micro_count; ++s.micro_index) {
      int64_t begin = s.micro_index * s.micro_batch_size, end = std::min(batch.size, begin + s.micro_batch_size);
      s.micro = s.micro_count == 1 ? batch : batch.slice(begin, end);
      fire(Event::BEFORE_FORWARD);
      const int64_t before = live_fg();
      {
        std::vector<std::unique_ptr<Scope>> scopes;
        for (auto& pl : plugins)
          if (auto sc = pl->forward_scope(s)) scopes.push_back(std::move(sc));
        s.output = with_context(detail::cat("model (", p.model.name, ") forward at step ", s.step + 1),
                                [&] { return s.model->forward_loss(s.micro); });
        while (!scopes.empty()) scopes.pop_back();  // exit in reverse order
      }
      fire(Event::AFTER_FORWARD);
      TT_CHECK(s.output.loss.defined() && s.output.loss.numel() == 1, "model (", p.model.name,
               ") returned no scalar loss");
      sum_reduced = s.output.reduction != Reduction::Mean;
      const double weight =
          s.output.reduction == Reduction::Mean ? static_cast<double>(s.micro.size) / static_cast<double>(batch.size) : 1.0;
      const double raw = s.output.loss.item<double>();
      if (!std::isfinite(raw)) {
        if (p.trainer.get_string("on_nan") == "skip") {
          log().warn("loss is {} at step {} (epoch {}, batch {}): batch dropped (trainer.on_nan=skip)", raw, s.step + 1,
                     s.epoch, s.batch_in_epoch);
          zero_grads();
          s.output = {};
          return false;
        }
        TT_FAIL_AS(NumericError, "loss is ", raw, " at step ", s.step + 1, " (epoch ", s.epoch, ", batch ",
                   s.batch_in_epoch, "). Lower optimizer.lr, set trainer.grad_clip, check the data for NaN/inf, or set "
                   "trainer.on_nan=skip to drop such batches. Last checkpoint: ",
                   last_checkpoint_step >= 0 ? checkpoint_path(s.run_dir / "checkpoints", last_checkpoint_step).string()
                                             : std::string("none"));
      }
      s.batch_loss += raw * weight;
      s.loss = weight == 1.0 ? s.output.loss : s.output.loss * weight;
      fire(Event::AFTER_LOSS);
      mem.activations = std::max(mem.activations, live_fg() - before);
      fire(Event::BEFORE_BACKWARD);
      with_context(detail::cat("backward at step ", s.step + 1), [&] {
        s.loss.backward();
        return 0;
      });
      s.loss = torch::Tensor();
      s.output = {};
      fire(Event::AFTER_BACKWARD);
    }
    s.micro = {};
    return true;
  }

  void run_batch(Batch batch, json& line) {
    s.batch = std::move(batch);
    s.skip_step = false;
    s.metrics.clear();
    fire(Event::BATCH_START);
    bool ok = false;
    // Where the random generator stood at the batch's start: a batch retried after an
    // out-of-memory error draws the same dropout masks as if it had fitted the first time.
    // Only where a retry can happen: a plugin to handle it, and an error to handle (the meter's
    // cap on CPU, the device's allocator on CUDA).
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    const bool may_retry = !plugins.empty() && (meter.cap() > 0 || s.device.is_cuda());
    const at::Tensor rng_at_start = may_retry ? gen.get_state() : at::Tensor();
    for (int attempt = 0;; ++attempt) {
      if (attempt > 0 && rng_at_start.defined()) gen.set_state(rng_at_start);
      try {
        ok = forward_backward();
        break;
      } catch (const c10::OutOfMemoryError& e) {
        std::string what = e.what();
        s.oom_message = what.substr(0, what.find('\n'));
        s.loss = torch::Tensor();
        s.output = {};
        s.micro = {};
        zero_grads();
        meter.release_cache();
        s.retry_batch = false;
        fire(Event::OOM);
        if (!s.retry_batch || attempt >= 16) {
          TT_FAIL_AS(OutOfMemory, "out of memory at step ", s.step + 1, " (epoch ", s.epoch, ", batch ",
                     s.batch_in_epoch, ", micro-batch ", s.micro_batch_size, "): ", s.oom_message,
                     ". Peak tensor bytes so far ", format_bytes(peak()),
                     ". Fixes: lower trainer.micro_batch_size (gradients accumulate to the same batch), "
                     "add plugins: [oom-guard] to do that automatically, or use [checkpoint] / [amp] to need less "
                     "activation memory.");
        }
        log().warn("out of memory at step {}; a plugin handled it, retrying the batch (micro-batch {})", s.step + 1,
                   s.micro_batch_size);
      }
    }
    if (dist) ok = sync_gradients(ok, line);
    if (!grads_measured && ok) {
      std::vector<torch::Tensor> grads;
      for (auto& t : trainable) grads.push_back(t.grad());
      mem.gradients = tensor_bytes(grads);
      grads_measured = true;
    }
    if (!ok) s.skip_step = true;
    fire(Event::BEFORE_STEP);
    if (!s.skip_step && p.trainer.is_set("grad_clip")) {
      double norm = torch::nn::utils::clip_grad_norm_(trainable, p.trainer.get_float("grad_clip"));
      line["grad_norm"] = norm;
    }
    const double lr_used = s.lr;
    if (!s.skip_step) {
      const int64_t before = live_fg();
      const auto t_opt = Clock::now();
      s.optimizer->step();
      const double opt_seconds = std::chrono::duration<double>(Clock::now() - t_opt).count();
      optimizer_times.push_back(opt_seconds);
      line["optimizer_seconds"] = opt_seconds;
      if (!optimizer_measured) {
        mem.optimizer_state = std::max<int64_t>(0, live_fg() - before);
        optimizer_measured = true;
      }
    } else {
      ++skipped;
    }
    ++s.step;
    const double epoch_pos = static_cast<double>(s.epoch) +
                             static_cast<double>(s.batch_in_epoch) / static_cast<double>(s.batches_per_epoch);
    set_lr(schedule->lr({s.step, s.total_steps, epoch_pos, base_lr}));
    fire(Event::AFTER_STEP);
    line["lr"] = lr_used;
    if (s.skip_step) line["skipped"] = true;
    fire(Event::BATCH_END);
  }

  void evaluate(json* into) {
    if (!data.validation) return;
    if (last_eval_step == s.step) {  // the final evaluation right after a periodic one at this step
      if (into)
        for (const auto& [k, v] : last_eval) (*into)[k] = v;
      return;
    }
    int64_t bs = p.trainer.is_set("eval_batch_size") ? p.trainer.get_int("eval_batch_size") : s.batch_size;
    flush_optimizer();
    auto m = s.model->evaluate(*data.validation, bs);
    json line{{"step", s.step}};
    for (const auto& [k, v] : m) {
      s.metrics[k] = v;
      line[k] = v;
      if (into) (*into)[k] = v;
    }
    last_eval_step = s.step;
    last_eval = m;
    fire(Event::EVAL);
    metrics.write(line.dump());
    std::string text;
    for (const auto& [k, v] : m) text += fmt::format(" {} {:.6g}", k, v);
    log().info("step {}:{}", s.step, text);
  }

  // What the breakdown should be from the parameters, the optimizer's kind and the model's
  // own activation estimate, before measuring: the measured figures are checked against it.
  json memory_estimate() const {
    int64_t trainable_bytes = 0;
    for (const auto& t : trainable) trainable_bytes += static_cast<int64_t>(t.nbytes());
    json e = {{"parameters_bytes", mem.parameters}, {"gradients_bytes", trainable_bytes}};
    const std::string& opt = p.optimizer.name;
    if (opt == "adam" || opt == "adamw") e["optimizer_state_bytes"] = 2 * trainable_bytes;  // two moments
    else if (opt == "sgd")
      e["optimizer_state_bytes"] = p.optimizer.options.get_float("momentum") != 0 ? trainable_bytes : 0;
    const int64_t act = s.model->estimate_activation_bytes(s.micro_batch_size);
    if (act >= 0) e["activations_bytes"] = act;
    return e;
  }

  // ---------------------------------------------------------------- fit
  void fit() {
    t_start = Clock::now();
    setup();
    if (cfg.resume) load_checkpoint();
    if (dist) broadcast_model();
    if (resumed && s.step >= s.total_steps) {  // e.g. tt-run --resume RUN --sample PROMPT on a finished run
      log().info("{}: the run in {} is complete at step {} (of {}); nothing to train, outputs kept as they are",
                 p.name, s.run_dir.string(), s.step, s.total_steps);
      return;
    }
    if (root) metrics.open(s.run_dir / "metrics.jsonl", resumed ? s.step : (cfg.resume ? 0 : -1));
    start_step = s.step;
    setup_seconds = seconds_since(t_start);
    log().info("{}: {} | data {} | {} optimizer, {} schedule | plugins [{}] | {} threads | run dir {}", p.name,
               s.model->describe(), data.train->describe(), p.optimizer.name, p.schedule.name, plugin_list(), threads,
               s.run_dir.string());
    if (resumed) log().info("resumed from {} at step {}", resumed_from, s.step);

    fire(Event::FIT_START);
    struct CapGuard {  // the cap never outlives the training loop, whatever ends it
      ~CapGuard() { Meter::global().set_cap(0); }
    } cap_guard;
    if (p.trainer.is_set("memory_cap")) {
      meter.set_cap(p.trainer.get_bytes("memory_cap"));
    } else if (p.trainer.is_set("memory_budget")) {  // tt-run plans a budget; a Trainer made directly only caps
      log().warn("trainer.memory_budget is planned by tt-run (tt-run --budget); here it only caps memory");
      meter.set_cap(parse_budget(p.trainer.get_string("memory_budget")));
    }
    meter.release_cache();    // temporaries of data generation and model set-up are not training's
    Meter::reset_rss_peak();  // so peak RSS is the training loop's high-water mark
    mem.rss_anon_start = Meter::rss_anon();
    reset_peak();
    const int64_t eval_every = p.trainer.is_set("eval_every") ? p.trainer.get_int("eval_every") : 0;
    const int64_t ckpt_every = p.trainer.is_set("checkpoint_every") ? p.trainer.get_int("checkpoint_every") : 0;
    const int64_t log_every = std::max<int64_t>(1, p.trainer.get_int("log_every"));
    const bool quiet = cfg.quiet;
    Progress progress(quiet ? Progress::Mode::Off : Progress::parse_mode(p.trainer.get_string("progress")),
                      s.total_steps, s.step);
    auto train_t0 = Clock::now();
    getrusage(RUSAGE_SELF, &usage0);
    s.epoch = next_epoch;
    bool done = s.step >= s.total_steps;
    try {
      train_loop(done, progress, eval_every, ckpt_every, log_every, next_batch);
    } catch (const c10::OutOfMemoryError& e) {
      progress.finish();
      meter.set_cap(0);
      std::string what = e.what();
      TT_FAIL_AS(OutOfMemory, "out of memory at step ", s.step + 1, " (epoch ", s.epoch, ", batch ", s.batch_in_epoch,
                 ", outside forward/backward: loading the batch or the optimizer step): ", what.substr(0, what.find('\n')),
                 ". Raise trainer.memory_cap or lower trainer.batch_size.");
    }
    progress.finish();
    meter.set_cap(0);
    const double train_seconds = seconds_since(train_t0);
    getrusage(RUSAGE_SELF, &usage1);
    mem.peak_tensor = peak();  // the training loop's; evaluation and outputs come after
    mem.peak_rss = Meter::rss_peak();
    mem.rss_anon_end = Meter::rss_anon();
    flush_optimizer();  // outputs read the parameters whole, even without evaluation or a checkpoint
    json val;
    evaluate(&val);
    if (last_checkpoint_step != s.step && s.step > start_step) save_checkpoint();
    if (dist) {  // the replicas must have stayed bitwise equal: their hashes go into the summary
      std::vector<torch::Tensor> ps;
      for (const auto& t : s.model->parameters()) ps.push_back(t);
      replica_hashes = dist->all_gather_strings(dist::hash_tensors(ps));
      for (const auto& h : replica_hashes)
        if (h != replica_hashes[0])
          log().warn("parameters differ across ranks at the end (hashes {} on rank 0, {} elsewhere)", replica_hashes[0], h);
    }
    fire(Event::FIT_END);
    s.metrics.clear();
    if (root)
      with_context("model (" + p.model.name + ") writing outputs", [&] {
        s.model->write_outputs(s.run_dir, s);
        return 0;
      });
    model_metrics = s.metrics;
    if (root) write_summary(train_seconds, val);
  }

  void train_loop(bool& done, Progress& progress, int64_t eval_every, int64_t ckpt_every, int64_t log_every,
                  int64_t start_batch) {
    while (!done) {
      if (start_batch == 0) {
        epoch_loss_sum = 0;
        epoch_batches = 0;
        fire(Event::EPOCH_START);
      }
      const auto epoch_t0 = Clock::now();
      for (int64_t b = start_batch; b < s.batches_per_epoch && !done; ++b) {
        s.batch_in_epoch = b;
        auto t0 = Clock::now();
        Batch batch = loader->get(s.epoch, b);
        if (!s.device.is_cpu()) batch = batch.to(s.device);
        int64_t examples = batch.size;
        json line;
        run_batch(std::move(batch), line);
        if (dist) examples = global_examples;  // throughput of the whole run, not of this rank
        const double dt = seconds_since(t0);
        step_times.push_back(dt);
        step_losses.push_back(s.batch_loss);
        epoch_loss_sum += s.batch_loss;
        ++epoch_batches;
        if (s.step % log_every == 0 || s.step == s.total_steps) {
          line["step"] = s.step;
          line["epoch"] = static_cast<double>(s.epoch) + static_cast<double>(b + 1) / s.batches_per_epoch;
          line["loss"] = s.batch_loss;
          line["step_seconds"] = dt;
          line["samples_per_s"] = dt > 0 ? examples / dt : 0.0;
          line["tensor_bytes"] = live();
          line["tensor_peak"] = peak();
          line["rss"] = Meter::rss();
          for (const auto& [k, v] : s.metrics) line[k] = v;
          metrics.write(line.dump());
        }
        progress.update(s.step, s.batch_loss, live(), Meter::rss());
        if (eval_every > 0 && s.step % eval_every == 0) evaluate(nullptr);
        done = s.step >= s.total_steps || s.stop;
        if (ckpt_every > 0 && s.step % ckpt_every == 0 && !done) save_checkpoint();
        if (dist ? dist_interrupt : interrupt_requested()) {
          progress.finish();
          save_checkpoint();
          throw Interrupted(detail::cat("interrupted at step ", s.step, "; checkpoint written. Continue with: tt-run --resume ",
                                        s.run_dir.string()));
        }
      }
      if (done && s.batch_in_epoch + 1 < s.batches_per_epoch) break;  // stopped mid-epoch
      const double epoch_loss = epoch_batches ? epoch_loss_sum / epoch_batches : 0;
      epoch_losses.push_back(epoch_loss);
      const double epoch_seconds = seconds_since(epoch_t0);
      epoch_times.push_back(epoch_seconds);
      metrics.write(json{{"step", s.step},
                         {"epoch_end", s.epoch + 1},
                         {"epoch_loss", epoch_loss},
                         {"epoch_seconds", epoch_seconds},
                         {"rss", Meter::rss()},
                         {"rss_anon", Meter::rss_anon()}}
                        .dump());
      flush_optimizer();
      fire(Event::EPOCH_END);
      ++s.epoch;
      start_batch = 0;
      s.batch_in_epoch = -1;
      if (max_epochs > 0 && s.epoch >= max_epochs) done = true;
    }
  }

  void write_plots() {
    if (!p.output.get_bool("plots") || step_losses.empty()) return;
    const fs::path data_file = s.run_dir / "loss.dat";
    {
      std::ofstream out(data_file);
      for (size_t i = 0; i < step_losses.size(); ++i) out << (start_step + static_cast<int64_t>(i) + 1) << ' ' << step_losses[i] << '\n';
    }
    bool logy = *std::min_element(step_losses.begin(), step_losses.end()) > 0;
    plot_png(data_file, s.run_dir / "loss.png", p.name + ": training loss", "step", "loss", "1:2", logy);
  }

  static int64_t count_elements(const std::vector<torch::Tensor>& ts) {
    int64_t n = 0;
    for (const auto& t : ts) n += t.numel();
    return n;
  }

  void write_summary(double train_seconds, const json& val) {
    const int64_t steps_here = s.step - start_step;
    summary = json{
        {"name", p.name},
        {"pipeline", p.file},
        {"run_dir", s.run_dir.string()},
        {"model", s.model->describe()},
        {"plugins", json::array()},
        {"steps", s.step},
        {"steps_this_run", steps_here},
        {"skipped_steps", skipped},
        {"epochs_completed", s.epoch},
        {"batch_size", s.batch_size},
        {"micro_batch_size", s.micro_batch_size},
        {"parameters", count_elements(s.model->parameters())},
        {"trainable_parameters", count_elements(trainable)},
        {"threads", threads},
        {"wall_seconds", seconds_since(t_start)},
        {"setup_seconds", setup_seconds},
        {"train_seconds", train_seconds},
        {"median_step_seconds", median(step_times)},
        {"median_optimizer_seconds", median(optimizer_times)},
        {"world_size", s.world_size},
        {"steps_per_second", train_seconds > 0 ? steps_here / train_seconds : 0.0},
        {"final_loss", step_losses.empty() ? 0.0 : step_losses.back()},
        {"memory",
         {{"peak_tensor_bytes", mem.peak_tensor},
          {"peak_rss_bytes", mem.peak_rss},
          {"rss_anon_start_bytes", mem.rss_anon_start},
          {"rss_anon_end_bytes", mem.rss_anon_end},
          {"parameters_bytes", mem.parameters},
          {"gradients_bytes", mem.gradients},
          {"optimizer_state_bytes", mem.optimizer_state},
          {"activations_bytes", mem.activations},
          {"allocation_cache", meter.caching()},
          {"measured_on", s.device.is_cuda() ? "cuda caching allocator" : "cpu tracking allocator"}}},
        {"outputs", json::array()},
    };
    for (const auto& pl : plugins) summary["plugins"].push_back(pl->name());
    summary["memory_estimate"] = memory_estimate();
    auto secs = [](const timeval& a, const timeval& b) { return (b.tv_sec - a.tv_sec) + 1e-6 * (b.tv_usec - a.tv_usec); };
    summary["process"] = {{"user_cpu_seconds", secs(usage0.ru_utime, usage1.ru_utime)},
                          {"system_cpu_seconds", secs(usage0.ru_stime, usage1.ru_stime)},
                          {"minor_page_faults", usage1.ru_minflt - usage0.ru_minflt},
                          {"major_page_faults", usage1.ru_majflt - usage0.ru_majflt}};
    if (!epoch_times.empty()) {
      summary["median_epoch_seconds"] = median(epoch_times.size() > 1
                                                   ? std::vector<double>(epoch_times.begin() + 1, epoch_times.end())
                                                   : epoch_times);
    }
    if (!epoch_losses.empty()) {
      summary["first_epoch_loss"] = epoch_losses.front();
      summary["final_epoch_loss"] = epoch_losses.back();
    }
    if (!val.empty()) summary["validation"] = val;
    if (dist) {
      summary["median_comm_seconds"] = median(comm_times);
      summary["replica_parameter_hashes"] = replica_hashes;
    }
    if (!model_metrics.empty()) summary["model_metrics"] = model_metrics;
    if (resumed) summary["resumed_from"] = resumed_from;
    if (meter.cap() > 0) summary["memory"]["cap_bytes"] = meter.cap();
    auto ckpts = list_checkpoints(s.run_dir / "checkpoints");
    if (!ckpts.empty()) summary["checkpoint"] = ckpts.back().string();
    write_plots();
    std::vector<std::string> files{"summary.json"};
    for (const auto& e : fs::directory_iterator(s.run_dir))
      if (e.is_regular_file() && e.path().extension() != ".dat" && e.path().filename() != "summary.json")
        files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    if (!ckpts.empty()) files.push_back("checkpoints/" + ckpts.back().filename().string());
    summary["outputs"] = files;
    std::ofstream(s.run_dir / "summary.json") << summary.dump(2) << "\n";
    if (!cfg.quiet) print_summary();
  }

  void print_summary() const {
    const auto& m = summary["memory"];
    std::string out;
    out += fmt::format("\n== {} finished in {:.1f} s  ({})\n", p.name, summary["wall_seconds"].get<double>(),
                       s.run_dir.string());
    out += fmt::format("  model      {}\n", s.model->describe());
    out += fmt::format("  plugins    [{}]\n", plugin_list());
    out += fmt::format("  steps      {} ({} batches of {} per epoch, {} epochs done), {:.1f} steps/s, median step {:.2f} ms\n",
                       s.step, s.batches_per_epoch, s.batch_size, s.epoch, summary["steps_per_second"].get<double>(),
                       1e3 * summary["median_step_seconds"].get<double>());
    if (epoch_losses.size() > 1)
      out += fmt::format("  loss       epoch 1: {:.6g}  ->  epoch {}: {:.6g}\n", summary["first_epoch_loss"].get<double>(),
                         s.epoch, summary["final_epoch_loss"].get<double>());
    else
      out += fmt::format("  loss       last step: {:.6g}\n", summary["final_loss"].get<double>());
    if (summary.contains("validation"))
      for (const auto& [k, v] : summary["validation"].items()) out += fmt::format("  {:<10} {:.6g}\n", k, v.get<double>());
    if (summary.contains("model_metrics"))
      for (const auto& [k, v] : summary["model_metrics"].items()) out += fmt::format("  {:<10} {:.6g}\n", k, v.get<double>());
    out += fmt::format("  memory     peak tensors {} = params {} + grads {} + optimizer {} + activations {} (+ rest); "
                       "peak RSS {}\n",
                       format_bytes(m["peak_tensor_bytes"]), format_bytes(m["parameters_bytes"]),
                       format_bytes(m["gradients_bytes"]), format_bytes(m["optimizer_state_bytes"]),
                       format_bytes(m["activations_bytes"]), format_bytes(m["peak_rss_bytes"]));
    std::string outputs;
    for (const auto& o : summary["outputs"]) outputs += (outputs.empty() ? "" : ", ") + o.get<std::string>();
    out += fmt::format("  outputs    {}\n", outputs);
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
  }
};

Trainer::Trainer(Pipeline pipeline, TrainerConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->p = std::move(pipeline);
  impl_->cfg = std::move(config);
}
Trainer::~Trainer() = default;
void Trainer::add_plugin(std::unique_ptr<Plugin> plugin) {
  if (plugin->name().empty()) plugin->set_name("embedded");
  impl_->extra_plugins.push_back(std::move(plugin));
}
void Trainer::fit() { impl_->fit(); }
State& Trainer::state() { return impl_->s; }
const Pipeline& Trainer::pipeline() const { return impl_->p; }
const fs::path& Trainer::run_dir() const { return impl_->s.run_dir; }
const std::vector<double>& Trainer::step_losses() const { return impl_->step_losses; }
const MemoryBreakdown& Trainer::memory() const { return impl_->mem; }

std::string Trainer::generate(const std::string& prompt, const GenerateOptions& options) {
  Model& model = *impl_->s.model;
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::string text = model.generate(prompt, options);
  model.train(was_training);
  std::ofstream out(impl_->s.run_dir / "samples.txt", std::ios::app);
  out << "--- prompt: " << prompt << " (tokens " << options.tokens << ", temperature " << options.temperature
      << ", top_k " << options.top_k << ", seed " << options.seed << ")\n"
      << text << "\n";
  return text;
}
std::string Trainer::summary_json() const { return impl_->summary.dump(2); }

Pipeline Trainer::pipeline_of_run(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  const fs::path file = run_dir / "pipeline.yaml";
  TT_CHECK_AS(ConfigError, fs::exists(file), run_dir.string(), " is not a tt run directory (no pipeline.yaml)");
  return load_pipeline(file.string(), overrides);
}

}  // namespace tt
