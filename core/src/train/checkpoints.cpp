#include "train/checkpoints.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>
#include <set>
#include <sstream>

#include "train/grad_sync.h"
#include "train/run_dir.h"
#include "train/run.h"
#include "train/step.h"
#include "tt/checkpoint.h"
#include "tt/data_loader.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/schedule.h"
#include "tt/weights.h"

namespace fs = std::filesystem;

namespace tt {

namespace {
int64_t read_int(torch::serialize::InputArchive& ar, const std::string& key) {
  c10::IValue v;
  ar.read(key, v);
  return v.toInt();
}
double read_double(torch::serialize::InputArchive& ar, const std::string& key) {
  c10::IValue v;
  ar.read(key, v);
  return v.toDouble();
}

// Whether a plugin added on resume can start without state from the checkpoint: it keeps none
// (save_state writes nothing) and leaves the optimizer, whose state the checkpoint holds, alone.
// Else why not.
std::string why_not_added(const Plugin& p) {
  if (p.assigns_the_optimizer()) return "it replaces or wraps the optimizer, whose state the checkpoint holds";
  if (!p.step_in_backward().empty()) return "it takes the optimizer step in backward";
  torch::serialize::OutputArchive out;
  p.save_state(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  std::istringstream in_bytes(bytes.str());
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  return in.keys().empty() ? "" : "it keeps state of its own in checkpoints, which this one does not have";
}

// The checkpoint's plugin archive each of the pipeline's plugins reads (-1: none, a plugin added
// on resume that keeps no state). The plugins the checkpoint was written with must all be there,
// in the same order; others may be added where they keep no state (activation checkpointing
// switched on after an out-of-memory). A name listed twice (a plugin twice, Trainer::add_plugin's
// "embedded") cannot tell whose state is whose: the lists must then be the same.
std::vector<int> plugin_archives(const Run& run, const std::string& saved_list, const fs::path& file) {
  std::vector<std::string> saved;
  for (size_t a = 0; !saved_list.empty() && a <= saved_list.size();) {
    const size_t b = std::min(saved_list.find(',', a), saved_list.size());
    saved.push_back(saved_list.substr(a, b - a));
    a = b + 1;
  }
  const auto& plugins = run.host.plugins();
  std::vector<int> from(plugins.size(), -1);
  std::vector<std::string> now;
  for (const auto& p : plugins) now.push_back(p->name());
  const auto repeats = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) != v.end();
  };
  const bool repeated = repeats(saved) || repeats(now);
  size_t next = 0;  // the saved plugins in their order
  for (size_t i = 0; i < plugins.size(); ++i)
    if (next < saved.size() && plugins[i]->name() == saved[next]) from[i] = static_cast<int>(next++);
  const std::string refused = detail::cat(file.string(), " was written with plugins [", saved_list,
                                          "] but the pipeline now has [", run.host.names(), "]: ");
  TT_CHECK_AS(ConfigError, next == saved.size() && (!repeated || saved.size() == plugins.size()), refused,
              "resume with the same plugins in the same order (their state is part of the checkpoint); a plugin "
              "that keeps no state, such as checkpoint or attention, may be added");
  for (size_t i = 0; i < plugins.size(); ++i) {
    if (from[i] >= 0) continue;
    const std::string why = why_not_added(*plugins[i]);
    TT_CHECK_AS(ConfigError, why.empty(), refused, "'", plugins[i]->name(), "' cannot be added on resume (", why,
                "); resume with the plugins it was written with, or start a new run from its weights: "
                "model.init_from=", run.state.run_dir.string());
  }
  return from;
}

// True where run resumes a completed run to use it as it is, in one process: summary.json says
// it completed at step `step`, and the pipeline asks for the training length the run had (its
// pipeline.yaml's trainer.max_steps and trainer.epochs), not more.
bool used_as_finished(const Run& run, int64_t step) {
  if (run.state.world_size != 1) return false;
  const nlohmann::json summary = read_summary(run.state.run_dir / "summary.json");
  const auto steps = summary.find("steps");
  if (summary_status(summary) != "completed" || steps == summary.end() || !steps->is_number_integer() ||
      steps->get<int64_t>() != step)
    return false;
  try {
    const YAML::Node had = YAML::LoadFile((run.state.run_dir / "pipeline.yaml").string())["trainer"];
    const Options& T = run.pipeline.trainer;
    for (const char* key : {"max_steps", "epochs"}) {
      const YAML::Node v = had ? had[key] : YAML::Node();
      const bool set = v && !v.IsNull();
      if (set != T.is_set(key) || (set && v.as<int64_t>() != T.get_int(key))) return false;
    }
    return true;
  } catch (const YAML::Exception&) {
    return false;  // a pipeline.yaml not as tt-run writes it: the usual resume says what is wrong
  }
}

void load_checkpoint_file(Run& run, const fs::path& file) {
  State& s = run.state;
  if (const std::string damage = archive_damage(file); !damage.empty())
    throw std::runtime_error("damaged: " + damage);  // load_checkpoint tries the one before
  torch::serialize::InputArchive ar;
  ar.load_from(file.string());
  c10::IValue names;
  ar.read("trainer/plugins", names);
  const std::vector<int> archive_of = plugin_archives(run, names.toStringRef(), file);
  std::string added;  // plugins added on resume
  for (size_t i = 0; i < archive_of.size(); ++i)
    if (archive_of[i] < 0) added += (added.empty() ? "" : ", ") + run.host.plugins()[i]->name();
  TT_CHECK_AS(ConfigError, !(run.sync && run.sync->owned_rows()), "trainer.dist_rows: owned cannot resume (",
              file.string(), " holds rank 0's optimizer moments only for the rows other ranks own); use dist_rows: all-reduce");
  c10::IValue ws;
  const int64_t saved_world = ar.try_read("trainer/world_size", ws) ? ws.toInt() : 1;
  // A finished run used as it is (tt-run --resume RUN --sample/--predict) reads its model only
  // (every rank held it whole): in one process whatever world size trained it, and whatever
  // became of its data since (a text grown, so that an epoch would now be longer). Another world
  // size is refused otherwise.
  const int64_t saved_step = read_int(ar, "trainer/step");
  const bool model_only = used_as_finished(run, saved_step);
  TT_CHECK_AS(ConfigError, saved_world == s.world_size || model_only, file.string(), " was written by a run of ",
              saved_world, " process(es) but this one has ", s.world_size,
              ": resume with the same world size (tt-run --nproc ", saved_world,
              "); the data order and sharded state depend on it (a --sample or --predict of a completed run, with "
              "no trainer.max_steps or trainer.epochs given, runs in one process). To go on with another world "
              "size, start a new run from its weights: model.init_from=", s.run_dir.string());
  torch::serialize::InputArchive model_ar, opt_ar;
  ar.read("model", model_ar);
  std::string mismatch;
  try {  // the archive is whole (checked above): a tensor the model has not, or lacks, is a mismatch
    mismatch = load_model_checked(run, model_ar);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    mismatch = first_line(what);
  }
  TT_CHECK_AS(ConfigError, mismatch.empty(), file.string(), " does not fit the model of this pipeline (", mismatch,
              ")", added.empty() ? ": resume with the pipeline the run was made with"
              : "; plugins added on resume: [" + added + "], and a plugin that changes the model's parameters (as "
                "lora adds adapters) cannot be: resume without it, or start a new run from its weights: "
                "model.init_from=" + s.run_dir.string());
  if (!model_only) {  // a sharded optimizer's state fits its world size only
    ar.read("optimizer", opt_ar);
    s.optimizer->load(opt_ar);
  }
  if (!added.empty()) log().info("resuming with plugins added: [{}] (they keep no state)", added);
  const auto& plugins = run.host.plugins();
  for (size_t i = 0; i < plugins.size(); ++i) {
    if (archive_of[i] < 0) continue;  // added on resume, keeping no state
    torch::serialize::InputArchive pa;
    ar.read("plugin_" + std::to_string(archive_of[i]), pa);
    // The file is whole (checked above): what load_state throws is the plugin's, not damage, and
    // stops the resume naming it (an older checkpoint would fail alike, or lose the steps since).
    // A LibTorch error here is most often a key the plugin's version reads that the one which
    // wrote the checkpoint did not write.
    try {
      plugins[i]->load_state(pa);
    } catch (const Error&) {
      PluginHost::rethrow_attributed(*plugins[i], "load_state (" + file.string() + ")", s);
    } catch (const std::exception& e) {
      std::string what = e.what();  // LibTorch appends its C++ stack after the first line
      what = first_line(what);
      TT_FAIL_AS(ConfigError, "plugin '", plugins[i]->name(), "' failed in load_state (", file.string(), "): ", what,
                 " (its state in the checkpoint is not what this version of the plugin reads: resume with the "
                 "version that wrote it, or have load_state read the older state)");
    }
  }
  at::Tensor rng;
  ar.read("trainer/rng_cpu", rng);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng);
  s.step = saved_step;
  if (model_only) {  // nothing is trained: the data's and the optimizer's state stay unread
    if (saved_world != s.world_size)
      log().info("{} was trained by {} processes; its model is read for use in this one, nothing is trained",
                 s.run_dir.string(), saved_world);
    s.total_steps = s.step;
    run.resumed = true;
    return;
  }
  run.next_epoch = read_int(ar, "trainer/next_epoch");
  run.next_batch = read_int(ar, "trainer/next_batch");
  s.skipped_steps = read_int(ar, "trainer/skipped");
  run.epoch_loss_sum = read_double(ar, "trainer/epoch_loss_sum");
  run.epoch_batches = read_int(ar, "trainer/epoch_batches");
  // The losses of the epochs before it (absent from checkpoints older than this key), so the
  // summary of a resumed run starts at epoch 1.
  if (at::Tensor losses; ar.try_read("trainer/epoch_losses", losses)) {
    TT_CHECK(losses.dim() == 1 && losses.scalar_type() == at::kDouble && losses.numel() <= run.next_epoch + 1,
             file.string(), ": trainer/epoch_losses is not the run's list of epoch losses (the file is damaged: ",
             "move it out of checkpoints/ to resume from the one before)");
    losses = losses.contiguous();  // a strided tensor from the file is copied first; p points into it
    const double* p = losses.data_ptr<double>();
    run.record.epoch_losses.assign(p, p + losses.numel());
  }
  s.micro_batch_size = read_int(ar, "trainer/micro_batch_size");
  // The next step's learning rate, from the schedule as this resume's pipeline has it (an
  // optimizer.lr or schedule given to the resume applies from its first step); the same rate as
  // the checkpoint's where nothing changed. A checkpoint without the epoch position it was set
  // for (older than this key) gives its own.
  if (c10::IValue pos; ar.try_read("trainer/lr_epoch_pos", pos)) {
    run.lr_epoch_pos = pos.toDouble();
    run.set_lr(run.schedule->lr({s.step, s.total_steps, run.lr_epoch_pos, run.base_lr}));
  } else {
    run.set_lr(read_double(ar, "trainer/lr"));
  }
  if (run.loader->streaming()) {
    at::Tensor pos;
    TT_CHECK(ar.try_read("trainer/data_position", pos), file.string(),
             " has no stream position (it was written for a map-style dataset): resume with the pipeline it was made with");
    run.loader->restore(run.next_epoch, run.next_batch, tensor_to_bytes(pos));
  }
  run.resumed = true;
}
}  // namespace

void save_checkpoint(Run& run) {
  State& s = run.state;
  // Every step since the previous checkpoint (or this process's start) dropped for a loss not
  // finite (on_nan: skip): nothing was learned since, and weights that no longer give a finite
  // loss would push good checkpoints out (keep_checkpoints). Not written before the end (the
  // end's is: a completed run's checkpoint is at its last step); the previous one stays the newest.
  if (const int64_t since = std::max(run.last_checkpoint_step, run.start_step);
      run.dropped_in_a_row > 0 && run.dropped_in_a_row >= s.step - since && !run.done()) {
    log().warn("the checkpoint of step {} is not written: every step since {} had a loss that is not finite and was "
               "dropped (trainer.on_nan=skip), so the newest checkpoint stays the one before", s.step,
               since > 0 ? "step " + std::to_string(since) : std::string("the start"));
    return;
  }
  run.flush_optimizer();  // on every rank: the parameters stay equal across ranks
  if (!run.root) {
    if (!s.gradient_sync) {  // a sharded optimizer's save gathers every rank's state
      torch::serialize::OutputArchive unused;
      s.optimizer->save(unused);
    }
    run.last_checkpoint_step = s.step;
    return;
  }
  torch::serialize::OutputArchive ar;
  torch::serialize::OutputArchive model_ar, opt_ar;
  s.model->save(model_ar);
  ar.write("model", model_ar);
  record_model(ar, s);
  s.optimizer->save(opt_ar);
  ar.write("optimizer", opt_ar);
  const auto& plugins = run.host.plugins();
  for (size_t i = 0; i < plugins.size(); ++i) {
    torch::serialize::OutputArchive pa;
    run.host.run_as(*plugins[i], "save_state (the checkpoint of step " + std::to_string(s.step) + ")", s,
                    [&] { plugins[i]->save_state(pa); });
    ar.write("plugin_" + std::to_string(i), pa);
  }
  ar.write("trainer/plugins", c10::IValue(run.host.names()));
  ar.write("trainer/rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
  ar.write("trainer/step", c10::IValue(s.step));
  ar.write("trainer/next_epoch", c10::IValue(s.epoch));
  ar.write("trainer/next_batch", c10::IValue(s.batch_in_epoch + 1));
  ar.write("trainer/skipped", c10::IValue(s.skipped_steps));
  ar.write("trainer/lr", c10::IValue(s.lr));
  ar.write("trainer/lr_epoch_pos", c10::IValue(run.lr_epoch_pos));
  ar.write("trainer/epoch_loss_sum", c10::IValue(run.epoch_loss_sum));
  ar.write("trainer/epoch_batches", c10::IValue(run.epoch_batches));
  ar.write("trainer/epoch_losses", torch::tensor(run.record.epoch_losses, torch::kDouble));
  ar.write("trainer/micro_batch_size", c10::IValue(s.micro_batch_size));
  ar.write("trainer/world_size", c10::IValue(static_cast<int64_t>(s.world_size)));
  if (run.loader->streaming()) {  // where the text stream stands, so a resume continues it exactly
    ar.write("trainer/data_position", bytes_to_tensor(run.loader->position()));
  }
  const fs::path dir = s.run_dir / "checkpoints";
  save_archive_atomic(ar, checkpoint_path(dir, s.step));
  prune_checkpoints(dir, static_cast<int>(run.pipeline.trainer.get_int("keep_checkpoints")));
  run.last_checkpoint_step = s.step;
}

void load_checkpoint(Run& run) {
  const fs::path dir = run.state.run_dir / "checkpoints";
  auto all = list_checkpoints(dir);
  TT_CHECK(!all.empty(), run.state.run_dir.string(), ": no checkpoint to resume from (checkpoints/step-*.pt)");
  std::string failures;
  // The optimizer's state is counted from the state itself, as a new run's first step counts it;
  // where tt does not know its tensors (a wrapping optimizer's), it is what the load left live:
  // the archive's tensors are read with the file, so only its end tells what stays.
  const int64_t before = run.live();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      load_checkpoint_file(run, *it);
      run.resumed_from = it->string();
      const int64_t counted = optimizer_state_bytes(*run.state.optimizer);
      run.state.memory.optimizer_state =
          counted >= 0 ? counted : std::max<int64_t>(0, run.live() - before);
      run.optimizer_measured = true;
      return;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::string what = e.what();  // LibTorch appends its C++ stack after the first line
      what = first_line(what, 200);
      if (what.find("expected ident") != std::string::npos || what.find("module metadata") != std::string::npos)
        what += " (an archive name TorchScript reserves, such as 'in' or 'None' as a plugin's save_state key, is "
                "written but cannot be read back: rename it)";
      log().warn("checkpoint {} is unreadable ({}); trying the previous one", it->string(), what);
      failures += "\n  " + it->string() + ": " + what;
    }
  }
  TT_FAIL_AS(ConfigError, "no readable checkpoint in ", dir.string(), " (none of them could be read, so the run "
             "cannot continue; start it again with ", launch_command(run), " PIPELINE --run-dir ",
             run.state.run_dir.string(), " --overwrite",
             launched_as_before(run, "--run-dir " + run.state.run_dir.string() + " --overwrite"), "):", failures);
}

void check_archive_names(const torch::nn::Module& model, const std::string& model_name) {
  // The names TorchScript's parser reserves: an archive holding one is written but not read back
  // ("expected ident"). The same set on LibTorch 1.13 and 2.6 (each name tried through an
  // OutputArchive and an InputArchive); Python's other keywords (lambda, try, yield, ...) load.
  static const std::set<std::string> reserved = {
      "False", "None",  "True",   "and",    "as",  "assert", "break", "class",  "continue", "def",
      "del",   "elif",  "else",   "for",    "global", "if",  "import", "in",    "is",       "not",
      "or",    "pass",  "raise",  "return", "while", "with", "__annotations__"};
  const auto check = [&](const std::string& dotted, const char* what) {
    size_t start = 0;
    while (start <= dotted.size()) {
      const size_t end = std::min(dotted.find('.', start), dotted.size());
      const std::string part = dotted.substr(start, end - start);
      if (reserved.count(part))
        TT_FAIL("model (", model_name, "): the ", what, " '", dotted, "' has a part named '", part,
                "', a word TorchScript reserves: LibTorch writes it into checkpoints but cannot read it back (no "
                "resume, model.init_from or --export would work), so name that submodule or tensor otherwise (e.g. '",
                part, "_') where it is registered");
      start = end + 1;
    }
  };
  for (const auto& item : model.named_parameters(true)) check(item.key(), "parameter");
  for (const auto& item : model.named_buffers(true)) check(item.key(), "buffer");
  for (const auto& item : model.named_modules("", false)) check(item.key(), "submodule");
}

namespace {
// The first tensor of a module archive (by its dotted name) that the model has no parameter or
// buffer for, or "": loading reads only what the model has, so a larger model's checkpoint (more
// layers, a bias) would otherwise load into a smaller one without a word.
std::string tensor_the_model_lacks(torch::serialize::InputArchive& ar, const std::string& prefix,
                                   const std::map<std::string, std::vector<int64_t>>& shapes) {
  for (const auto& key : ar.keys()) {
    at::Tensor t;
    if (ar.try_read(key, t)) {
      if (!shapes.count(prefix + key)) return prefix + key;
      continue;
    }
    torch::serialize::InputArchive sub;
    if (ar.try_read(key, sub))
      if (std::string extra = tensor_the_model_lacks(sub, prefix + key + ".", shapes); !extra.empty()) return extra;
  }
  return "";
}
}  // namespace

std::string load_model_checked(Run& run, torch::serialize::InputArchive& model_ar) {
  Model& model = *run.state.model;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : model.named_parameters()) shapes[t.key()] = t.value().sizes().vec();
  for (const auto& t : model.named_buffers()) shapes[t.key()] = t.value().sizes().vec();
  {
    torch::NoGradGuard no_grad;
    model.load(model_ar);
  }
  auto check = [&](const std::string& name, const at::Tensor& t) -> std::string {
    const auto& want = shapes[name];
    if (t.sizes().vec() == want) return {};
    return detail::cat(name, " is ", t.sizes(), " there but ", c10::IntArrayRef(want), " here");
  };
  for (const auto& t : model.named_parameters())
    if (auto m = check(t.key(), t.value()); !m.empty()) return m;
  for (const auto& t : model.named_buffers())
    if (auto m = check(t.key(), t.value()); !m.empty()) return m;
  if (const std::string extra = tensor_the_model_lacks(model_ar, "", shapes); !extra.empty())
    return extra + " is there but not in this model";
  return {};
}

}  // namespace tt
