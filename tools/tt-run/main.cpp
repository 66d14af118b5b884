// tt-run: train a model from a YAML pipeline.
//
//   tt-run PIPELINE.yaml [key=value ...]   train (overrides like trainer.batch_size=64)
//   tt-run --dry-run PIPELINE.yaml         print the resolved pipeline and exit (a compare: section's
//                                          variants are validated too, each reported on stderr)
//   tt-run --resume RUN_DIR [key=value]    continue a run from its newest checkpoint
//   tt-run PIPELINE.yaml                   with a compare: section: compare its variants (compare.h)
//   tt-run --compare A.yaml B.yaml ...     compare pipelines (--steps, --warmup, --repeats)
//   tt-run --compare RUN_A RUN_B ...       the table of runs that exist (--warmup)
//   tt-run --profile-memory PIPELINE.yaml  breakdown, per-block table, tensor bytes over one step
//   tt-run --budget 1.5GiB PIPELINE.yaml   plan the fastest plugins/micro-batch that fit, then train (plan.h)
//   tt-run --recommend PIPELINE.yaml       the planned settings for budgets of 0.5 to 16 GiB (or --budgets)
//   tt-run --nproc N PIPELINE.yaml         N data-parallel workers on this machine (launch.h, tt/dist.h)
//   tt-run --export safetensors|pt RUN     the weights of a run or checkpoint for other tools (export.h)
//   tt-run --list                          models, datasets, plugins, optimizers, schedules
//   tt-run --version
//
// Exit codes: 0 done, 1 error, 2 bad pipeline or command line, 3 plugin/model library
// refused, 4 out of memory, 5 NaN/inf loss, 6 a file could not be written (disk full),
// 7 a comparison's variant did not run (its row says why), 8 a data-parallel rank was lost or
// not reached, 130 interrupted (checkpoint written).
#include <cstring>
#include <malloc.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "child.h"
#include "compare.h"
#include "export.h"
#include "launch.h"
#include "plan.h"
#include "profile.h"
#include "tt/cli.h"
#include "tt/compat.h"
#include "tt/dist.h"
#include "tt/error.h"
#include "tt/examples.h"
#include "tt/log.h"
#include "tt/text_file.h"
#include "tt/meter.h"
#include "tt/module.h"
#include "tt/module_loader.h"
#include "tt/options.h"
#include "tt/pipeline.h"
#include "tt/registry.h"
#include "tt/runtime.h"
#include "tt/trainer.h"

namespace {

// An option's doc and, when declared, what it allows: "learning rate [>= 0]", "... [error | skip]".
std::string with_allowed(const tt::OptionSpec& s) {
  const std::string allowed = s.allowed();
  return allowed.empty() ? s.doc : s.doc + " [" + allowed + "]";
}

void print_list() {
  auto refusals = tt::ModuleLoader::global().load_all();
  auto& reg = tt::Registry::global();
  for (auto kind : {tt::Kind::Model, tt::Kind::Dataset, tt::Kind::Plugin, tt::Kind::Optimizer, tt::Kind::Schedule}) {
    std::printf("%ss:\n", tt::kind_name(kind));
    auto entries = reg.entries(kind);
    if (entries.empty()) std::printf("  (none installed)\n");
    for (const auto& e : entries) {
      std::printf("  %-22s %s\n", e.name.c_str(), e.description.c_str());
      if (e.origin != "built-in") std::printf("  %-22s from %s\n", "", e.origin.c_str());
      const auto join = [](const std::vector<std::string>& v) {
        std::string out;
        for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
        return out.empty() ? std::string("none") : out;
      };
      // what the pipeline's check of a plugin against its model reads (tt/registry.h)
      if (kind == tt::Kind::Model) {
        const auto& m = reg.model(e.name);
        if (m.parts) std::printf("  %-22s parts: %s\n", "", join(*m.parts).c_str());
        if (m.abilities) std::printf("  %-22s abilities: %s\n", "", join(*m.abilities).c_str());
      }
      if (kind == tt::Kind::Plugin && !reg.plugin(e.name).needs.empty())
        std::printf("  %-22s acts on the model's: %s\n", "", join(reg.plugin(e.name).needs).c_str());
      for (const auto& s : e.schema->specs()) {
        std::string def = s.default_yaml == "~" ? "unset" : s.default_yaml;
        std::printf("      %-20s %-8s = %-10s %s\n", s.key.c_str(),
                    s.type == tt::Type::Bool     ? "bool"
                    : s.type == tt::Type::Int    ? "int"
                    : s.type == tt::Type::Float  ? "float"
                    : s.type == tt::Type::String ? "string"
                    : s.type == tt::Type::Bytes  ? "bytes"
                    : s.type == tt::Type::List   ? "list"
                                                 : "map",
                    def.c_str(), with_allowed(s).c_str());
      }
    }
    std::printf("\n");
  }
  const auto print_section = [](const char* title, const tt::Schema& schema) {
    std::printf("%s:\n", title);
    for (const auto& s : schema.specs())
      std::printf("      %-20s = %-10s %s\n", s.key.c_str(), s.default_yaml == "~" ? "unset" : s.default_yaml.c_str(),
                  with_allowed(s).c_str());
  };
  print_section("trainer options", tt::trainer_schema());
  std::printf("\n");
  print_section("output options", tt::output_schema());
  std::printf("\npipeline keys:\n"
              "      %-20s = %-10s %s\n      %-20s = %-10s %s\n      %-20s = %-10s %s\n"
              "      %-20s   %-10s %s\n",
              "name", "file stem", "the run's name: its directory is <output.dir>/<name>-<timestamp>", "seed", "0",
              "seeds the data, the model's initialization and the batches [>= 0]", "compare", "unset",
              "compare variants: {variants: {NAME: {plugins: [...], set: {KEY: VALUE}}}, baseline: NAME, steps: 20, "
              "warmup_steps: 3, repeats: 1}",
              "model, data, ...", "", "the sections above: optimizer, schedule, plugins, trainer, output");
  std::printf("\nmodule search path: %s\n", tt::ModuleLoader::global().describe_search_path().c_str());
  for (const auto& r : refusals) std::printf("refused: %s\n", r.c_str());
}

// A file tt-run writes after training, checked before it: its directory made (as tt-data's tools
// make theirs) and writable, the path not a directory.
void check_writable_file(const char* option, const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TT_CHECK_AS(ConfigError, !fs::is_directory(file, ec), option, " ", file, " is a directory: name the file to write");
  const fs::path dir = fs::absolute(file).parent_path();
  fs::create_directories(dir, ec);
  TT_CHECK_AS(WriteError, !ec && ::access(dir.c_str(), W_OK) == 0, option, " ", file, ": its directory ", dir.string(),
              " cannot be ", ec ? "made (" + ec.message() + ")" : "written to (" + std::string(std::strerror(errno)) + ")");
}

// --predict-out must not overwrite what the run reads or writes: a file the pipeline's data or
// model.init_from names (the training table), or a file of the run directory's own (one it
// writes, or any there but a .csv: an earlier prediction may be written again).
void check_predict_output(const std::string& out, const std::string& resolved_yaml, std::filesystem::path run_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const YAML::Node root = YAML::Load(resolved_yaml);
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n, const std::string& key) {
    if (n.IsScalar()) {
      TT_CHECK_AS(ConfigError, !(fs::is_regular_file(n.Scalar(), ec) && tt::same_file(out, n.Scalar())), "--predict-out ",
                  out, " is the file ", key, " names (", n.Scalar(), "), which it would overwrite; name another file");
    } else if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i) walk(n[i], key + "." + std::to_string(i));
    } else if (n.IsMap()) {
      for (const auto& kv : n) walk(kv.second, key + "." + kv.first.as<std::string>());
    }
  };
  walk(root["data"], "data");
  walk(root["model"]["init_from"], "model.init_from");
  if (run_dir.empty() && root["output"]["run_name"].IsScalar())  // output.dir/run_name, a name of the user's
    run_dir = fs::path(root["output"]["dir"].Scalar()) / root["output"]["run_name"].Scalar();
  if (run_dir.empty()) return;  // a new directory named by the time: nothing of the run's own is there yet
  const fs::path at = fs::weakly_canonical(fs::absolute(out), ec), dir = fs::weakly_canonical(fs::absolute(run_dir), ec);
  const auto inside = std::mismatch(dir.begin(), dir.end(), at.begin(), at.end());
  if (inside.first != dir.end()) return;
  static const std::set<std::string> written = {"pipeline.yaml", "summary.json", "log.txt",     "metrics.jsonl",
                                                "loss.dat",      "loss.png",     "samples.txt", "gnuplot.log"};
  const bool own = inside.second == at.end() || *inside.second == "checkpoints" || written.count(at.filename().string()) > 0 ||
                   (fs::exists(at, ec) && at.extension() != ".csv");
  TT_CHECK_AS(ConfigError, !own, "--predict-out ", out, " is a file of the run's own (", run_dir.string(),
              "), which it would overwrite; name another file (the default is ", (run_dir / "predictions.csv").string(),
              ")");
}

// The error that ends tt-run. A stop signal after it (tt-run --nproc stops the other workers
// when one fails) is answered without the "stopping ... writing a checkpoint" line: nothing
// trains any more.
int fail(const char* where, const char* what, int code) {
  tt::install_interrupt_handlers("", "tt-run");
  std::fprintf(stderr, "tt-run: error%s: %s\n", where, what);
  return code;
}
}  // namespace

namespace {
int tt_run(int argc, char** argv) {
  tt::install_crash_report("tt-run");
  {
    // One malloc arena. Tensors of 64 KiB and more live in the meter's page pool (tt/meter.h);
    // what is left to malloc is small, and an arena per thread (the loader's, OpenMP's) only
    // keeps each one's free fragments resident apart: about 10 MiB of RSS on the LM. A user's
    // MALLOC_ARENA_MAX or glibc.malloc.arena_max tunable is left to decide.
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    if (!std::getenv("MALLOC_ARENA_MAX") && !(tunables && std::strstr(tunables, "arena_max"))) mallopt(M_ARENA_MAX, 1);
  }
  // tt-run --nproc N ...: this process checks the rest of the command line and the pipeline
  // once, as a worker would, then starts N workers of it (launch.h) where a worker would train.
  // Errors, --help, --version, --list and --dry-run are answered here, once.
  std::optional<int> nproc;
  const std::vector<std::string> command(argv, argv + argc);  // summary.json's, as typed
  std::vector<std::string> worker_args(argv + 1, argv + argc);
  std::vector<char*> args_without_nproc{argv[0]};
  try {
    nproc = tt::launch::take_nproc(worker_args);
    TT_CHECK_AS(ConfigError, !nproc || *nproc >= 1, "--nproc ", nproc.value_or(0),
                ": the number of worker processes must be at least 1");
  } catch (const tt::Error& e) {
    std::fprintf(stderr, "tt-run: error: %s\n", e.what());
    return e.exit_code();
  }
  if (nproc) {
    for (auto& a : worker_args) args_without_nproc.push_back(a.data());
    argc = static_cast<int>(args_without_nproc.size());
    argv = args_without_nproc.data();
    // The launcher gives each worker its own torchrun variables; a cluster shell's are not this run's.
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      unsetenv(v);
  }
  CLI::App app{"tt-run: train a model from a YAML pipeline, with memory techniques as plugins"};
  std::string pipeline_file, resume_dir, run_dir;
  bool overwrite = false;
  std::vector<std::string> overrides;
  bool dry_run = false, list = false, version = false, quiet = false, compare = false, profile = false;
  int cmp_steps = -1, cmp_warmup = -1, cmp_repeats = -1;
  std::string budget_text, budgets_text;
  bool recommend = false;
  tt::plan::RunOptions plan_opts;
  std::optional<std::string> sample_prompt;
  tt::GenerateOptions gen;
  std::string predict_input, predict_output;
  std::string export_format, export_out;
  app.add_option("pipeline", pipeline_file, "pipeline YAML file (e.g. configs/quickstart.yaml)");
  app.add_option("overrides", overrides, "key=value overrides, e.g. trainer.batch_size=64 plugins.0.dtype=bf16");
  app.add_flag("--dry-run", dry_run, "check the pipeline as written (options, device and batch values, the modules it names; not the data files or the "
               "machine's GPU, which a run checks as it sets up), print it with every default filled in and exit; a comparison's "
               "variants are each checked too (exit 2 if any is refused)");
  int nproc_for_help = 0;  // taken off the command line before this parser sees it (launch.h)
  app.add_option("--nproc", nproc_for_help,
                 "train data-parallel in N worker processes on this machine, as torchrun does (Gloo; NCCL on CUDA); "
                 "the rest of the command line is each worker's");
  app.add_option("--resume", resume_dir, "continue the run in RUN_DIR from its newest checkpoint");
  app.add_option("--run-dir", run_dir, "write the run here instead of <output.dir>/<name>-<timestamp>");
  app.add_flag("--overwrite", overwrite, "the run directory holds a run: empty it and start again");
  app.add_flag("--list", list, "list models, datasets, plugins, optimizers and schedules with their options");
  app.add_flag("--compare", compare,
               "compare pipelines: tt-run --compare A.yaml B.yaml ... (each a variant, run in its own process); a "
               "pipeline with a compare: section is compared without this flag; tt-run --compare RUN_DIR RUN_DIR ... "
               "tabulates runs that exist");
  app.add_flag("--profile-memory", profile,
               "train 3 steps and profile the third with tt's meter: breakdown, per-block activation bytes and "
               "forward/backward time, live tensor bytes over the step (memory_profile.json, memory_timeline.png)");
  app.add_option("--steps", cmp_steps, "compare: measured steps per variant (default 20, or the section's)");
  app.add_option("--warmup", cmp_warmup, "compare: warm-up steps left out of the timing (default 3)");
  app.add_option("--repeats", cmp_repeats, "compare: runs per variant (default 1)");
  app.add_option("--budget", budget_text,
                 "plan for this much tensor memory (e.g. 1.5GiB; as trainer.memory_budget): probe runs pick the fastest "
                 "plugins and micro-batch that fit, then train under that cap with oom-guard");
  app.add_flag("--recommend", recommend,
               "print the planned settings for budgets of 0.5, 1, 2, 4, 8 and 16 GiB, or --budgets (probe runs; no "
               "training)");
  app.add_option("--budgets", budgets_text, "--recommend's budgets, comma-separated, e.g. 4MiB,8MiB,16MiB");
  app.add_flag("--plan-estimates", plan_opts.estimates_only,
               "the budget planner's reference probe runs only, then every configuration's estimated peak and "
               "step time (a table, and estimates.json; tools/bench-planner-estimates.sh measures them)");
  app.add_option("--probe-steps", plan_opts.probe_steps, "budget: measured steps per probe run")->capture_default_str();
  app.add_option("--max-probes", plan_opts.max_probes, "budget: probe runs per budget beyond the reference ones")
      ->capture_default_str();
  app.add_option("--margin", plan_opts.margin, "budget: the chosen peak stays under budget x (1 - margin)")
      ->capture_default_str();
  app.add_flag("--quiet,-q", quiet,
               "no progress display and no summary (still written to the run dir); the log's lines stay "
               "(TT_LOG_LEVEL=warn keeps only warnings and errors)");
  app.add_flag("--version", version, "print versions and exit");
  app.add_option("--sample", sample_prompt,
                 "after training (or, with --resume of a finished run, at once) continue PROMPT with the model");
  app.add_option("--predict", predict_input,
                 "after training (or, with --resume of a finished run, at once) predict for the examples in FILE "
                 "(tabular-icl: a CSV) and write class probabilities to --predict-out");
  app.add_option("--predict-out", predict_output, "where --predict writes (default RUN_DIR/predictions.csv)");
  app.add_option("--export", export_format,
                 "write the model weights of RUN_DIR (its newest readable checkpoint) or of a checkpoint file for other "
                 "tools: safetensors or pt (a state dict Python's torch.load reads); tt-run --export FORMAT RUN_DIR");
  app.add_option("--out", export_out,
                 "where --export writes (default RUN_DIR/model.safetensors or RUN_DIR/model_state_dict.pt; for a "
                 "checkpoint file, beside it)");
  app.add_option("--tokens", gen.tokens, "tokens to generate with --sample")->capture_default_str();
  app.add_option("--temperature", gen.temperature, "sampling temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", gen.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--seed", gen.seed, "random seed of the sampling")->capture_default_str();
  app.footer(
      "Exit codes: 0 done, 1 error, 2 bad pipeline or command line, 3 plugin/model library refused, "
      "4 out of memory, 5 NaN/inf loss, 6 a file could not be written (disk full), 7 a comparison ran but one of "
      "its variants did not (its row says why), 8 a data-parallel rank was lost or not reached, 130 interrupted "
      "(checkpoint written; resume with --resume).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tt::cli_exit(app, e, "tt-run");
  }
  // a negative count was taken for "not given" and silently ignored
  for (const auto& [option, value, least] : {std::tuple<const char*, int, int>{"--steps", cmp_steps, 1},
                                             {"--warmup", cmp_warmup, 0}, {"--repeats", cmp_repeats, 1}})
    if (app.count(option) && value < least) {
      std::fprintf(stderr, "tt-run: %s must be at least %d, got %d\n", option, least, value);
      return 2;
    }
  if (overwrite && !resume_dir.empty()) {
    std::fprintf(stderr, "tt-run: --overwrite starts the run again and --resume continues it: give one of them\n");
    return 2;
  }
  // A positional "key=value" right after --resume DIR belongs to the overrides.
  if (!resume_dir.empty() && !pipeline_file.empty()) {
    if (pipeline_file.find('=') == std::string::npos) {
      std::fprintf(stderr, "tt-run: --resume takes the pipeline from %s/pipeline.yaml; do not name a pipeline file too\n",
                   resume_dir.c_str());
      return 2;
    }
    overrides.insert(overrides.begin(), pipeline_file);
    pipeline_file.clear();
  }

  if (sample_prompt && (gen.tokens < 1 || gen.temperature < 0 || gen.top_k < 0)) {
    std::fprintf(stderr, "tt-run: --tokens must be positive, --temperature and --top-k not negative\n");
    return 2;
  }

  try {
    if (version) {
      std::printf("tt-run %s\nLibTorch %s (%s)\nmodule API %u, C++ ABI %d, _GLIBCXX_USE_CXX11_ABI=%d\ncompiler %s\n",
                  tt::tt_version(), TT_TORCH_VERSION_STRING, TT_WITH_CUDA ? "CUDA" : "CPU-only", TT_API_VERSION,
                  __GXX_ABI_VERSION, _GLIBCXX_USE_CXX11_ABI, TT_COMPILER_STRING);
      return 0;
    }
    if (list) {
      print_list();
      return 0;
    }
    if (!export_format.empty()) {
      TT_CHECK_AS(ConfigError,
                  resume_dir.empty() && run_dir.empty() && overrides.empty() && !dry_run && !compare && !profile &&
                      !recommend && budget_text.empty() && !sample_prompt && predict_input.empty(),
                  "--export reads a run directory or a checkpoint and writes one file (--out): it takes no pipeline, "
                  "overrides, --resume, --run-dir or other modes");
      return tt::export_weights::run({export_format, pipeline_file, export_out, quiet});
    }
    TT_CHECK_AS(ConfigError, export_out.empty(), "--out names the file --export writes; give --export FORMAT too");
    // An option that would do nothing is refused rather than ignored.
    for (const char* o : {"--tokens", "--temperature", "--top-k"})
      TT_CHECK_AS(ConfigError, sample_prompt || app.count(o) == 0, o, " sets how --sample PROMPT generates; give "
                  "--sample too");
    TT_CHECK_AS(ConfigError, sample_prompt || app.count("--seed") == 0, "--seed seeds the sampling of --sample PROMPT; "
                "give --sample too (a run's own seed is the pipeline's seed: key, e.g. the override seed=3)");
    TT_CHECK_AS(ConfigError, predict_output.empty() || !predict_input.empty(),
                "--predict-out names the file --predict FILE writes; give --predict too");
    TT_CHECK_AS(ConfigError, run_dir.empty() || resume_dir.empty(), "--resume continues the run in its own directory ",
                resume_dir, "; --run-dir names a new run's: give one of them");
    TT_CHECK_AS(ConfigError, app.count("--run-dir") == 0 || !run_dir.empty(),
                "--run-dir is empty: name the run's directory, or leave the option out (the run then goes to "
                "<output.dir>/<name>-<timestamp>)");
    TT_CHECK_AS(ConfigError, app.count("--resume") == 0 || !resume_dir.empty(),
                "--resume is empty: name the run directory to continue");
    TT_CHECK_AS(ConfigError, !profile || (!sample_prompt && predict_input.empty()),
                "--profile-memory trains 3 steps to profile them and keeps no model to use: leave out --sample and "
                "--predict");
    // before training, not after it
    TT_CHECK_AS(ConfigError, predict_input.empty() || (std::filesystem::exists(predict_input) &&
                                                       !std::filesystem::is_directory(predict_input)), "--predict ",
                tt::describe_path(predict_input), " does not exist or is not a file: give the CSV of the rows to predict "
                "for");
    TT_CHECK_AS(ConfigError, predict_output.empty() || predict_input.empty() || !tt::same_file(predict_output, predict_input),
                "--predict-out ", predict_output, " is the --predict file itself; name another file (the rows to "
                "predict for would be overwritten)");
    if (!predict_output.empty()) check_writable_file("--predict-out", predict_output);
    if (pipeline_file.empty() && resume_dir.empty()) {
      std::fprintf(stderr, "tt-run: name a pipeline, e.g. tt-run %s/quickstart.yaml (tt-run --help for more)\n",
                   tt::examples_dir().c_str());
      return 2;
    }
    tt::Meter::global().install();  // before any tensor exists, so every byte is counted
    auto run_compare = [&](std::vector<std::string> files, std::vector<std::string> ovs) {
      tt::compare::Options co;
      co.tt_run = std::filesystem::read_symlink("/proc/self/exe").string();
      co.files = std::move(files);
      co.overrides = std::move(ovs);
      co.out_dir = run_dir;
      co.steps = cmp_steps;
      co.warmup = cmp_warmup;
      co.repeats = cmp_repeats;
      co.quiet = quiet;
      co.dry_run = dry_run;
      return tt::compare::run(co);
    };
    const bool planning = recommend || plan_opts.estimates_only || !budget_text.empty();
    TT_CHECK_AS(ConfigError, budgets_text.empty() || recommend, "--budgets lists --recommend's budgets: add "
                "--recommend (or plan for one budget with --budget)");
    if (!budgets_text.empty()) {
      std::istringstream items(budgets_text);
      for (std::string item; std::getline(items, item, ',');) {
        try {
          plan_opts.recommend_budgets.emplace_back(tt::parse_budget(item), item);
        } catch (const tt::ConfigError& e) {
          TT_FAIL_AS(ConfigError, "--budgets '", budgets_text, "': ", e.what(), " (the budgets are comma-separated)");
        }
      }
      std::sort(plan_opts.recommend_budgets.begin(), plan_opts.recommend_budgets.end());
    }
    if (!budget_text.empty()) {
      try {
        plan_opts.budget = tt::parse_budget(budget_text);
      } catch (const tt::ConfigError& e) {
        TT_FAIL_AS(ConfigError, "--budget ", e.what());
      }
    }
    // Compare and the planner pass an interrupt on to the tt-run they are running; a training
    // run stops after its batch (installed again below with that message).
    tt::install_interrupt_handlers("\ntt-run: stopping (Ctrl-C again to abort)\n", "tt-run");
    // The options among `options` on the command line: "--resume and --dry-run".
    const auto given = [&](std::initializer_list<const char*> options) {
      std::vector<std::string> on;
      for (const char* o : options)
        if (app.count(o) > 0) on.emplace_back(o);
      std::string text;
      for (size_t i = 0; i < on.size(); ++i) text += (i == 0 ? "" : i + 1 == on.size() ? " and " : ", ") + on[i];
      return text;
    };
    // A data-parallel worker (tt-run --nproc, torchrun) trains its part of one pipeline; the
    // modes that start tt-run processes of their own run once, on their own.
    tt::dist::Env dist_env;
    if (nproc) dist_env.world_size = *nproc;  // the launcher checks as its workers will
    else dist_env = tt::dist::env_from_environment();
    const bool data_parallel = dist_env.world_size > 1;
    if (data_parallel) {
      const std::string with = given({"--compare", "--profile-memory", "--budget", "--recommend"});
      TT_CHECK_AS(ConfigError, with.empty(), with, " runs tt-run processes of its own, one after another: run it "
                  "without --nproc (or torchrun)");
    }
    if (profile) {
      const std::string with = given({"--resume", "--dry-run", "--compare", "--budget", "--recommend"});
      TT_CHECK_AS(ConfigError, with.empty(), "--profile-memory trains and profiles one pipeline as written: it does "
                  "not go with ", with);
      tt::profile::Options po;
      po.file = pipeline_file;
      po.overrides = overrides;
      po.run_dir = run_dir;
      po.overwrite = overwrite;
      return tt::profile::run(po);
    }
    if (planning) {
      const std::string with = given({"--resume", "--dry-run", "--compare"});
      TT_CHECK_AS(ConfigError, with.empty(), "--budget and --recommend plan a new run of one pipeline: they do not go "
                  "with ", with);
    }
    TT_CHECK_AS(ConfigError, !(recommend && !budget_text.empty()),
                "--recommend plans for its own budgets (0.5 to 16 GiB, or --budgets); leave out --budget");
    TT_CHECK_AS(ConfigError, !(plan_opts.estimates_only && (recommend || !budget_text.empty())),
                "--plan-estimates only estimates, for no budget: leave out --budget and --recommend");
    const char* one_model_options =
        "--sample and --predict use one trained model, and a comparison trains one model per variant (and keeps "
        "no weights): give them to a run of the variant's pipeline (its pipeline.yaml in the comparison's folder)";
    TT_CHECK_AS(ConfigError, !compare || (!sample_prompt && predict_input.empty()), one_model_options);
    if (compare) {
      TT_CHECK_AS(ConfigError, resume_dir.empty(), "--compare does not go with --resume");
      std::vector<std::string> files{pipeline_file}, ovs;
      for (const auto& ov : overrides) (ov.find('=') == std::string::npos ? files : ovs).push_back(ov);
      return run_compare(files, ovs);
    }
    tt::Pipeline pipeline = resume_dir.empty() ? tt::load_pipeline(pipeline_file, overrides)
                                               : tt::Trainer::pipeline_of_run(resume_dir, overrides);
    TT_CHECK_AS(ConfigError, (pipeline.has_compare && resume_dir.empty()) ||
                                 app.count("--steps") + app.count("--warmup") + app.count("--repeats") == 0,
                "--steps, --warmup and --repeats set a comparison (a pipeline's compare: section, or tt-run --compare "
                "A.yaml B.yaml) and this one has none: trainer.max_steps=N trains N steps");
    TT_CHECK_AS(ConfigError, !(pipeline.has_compare && resume_dir.empty()) || (!sample_prompt && predict_input.empty()),
                one_model_options);
    {  // what the model does beyond training, before it trains
      const std::string& name = pipeline.model.name;
      const tt::ModelComponent& model = tt::Registry::global().model(name);
      TT_CHECK_AS(ConfigError, !sample_prompt || tt::may_have_ability(model, "generate"), "--sample: model '", name,
                  "' does not generate text; --sample needs a language model such as model: {name: transformer}");
      TT_CHECK_AS(ConfigError, predict_input.empty() || tt::may_have_ability(model, "predict"), "--predict: model '",
                  name, "' does not predict from files; --predict needs a model that does, such as model: {name: "
                  "tabular-icl}");
    }
    const bool plans = !budget_text.empty() ||
                       (pipeline.trainer.is_set("memory_budget") && resume_dir.empty() && !dry_run) || recommend ||
                       plan_opts.estimates_only;
    for (const char* o : {"--probe-steps", "--max-probes", "--margin"})
      TT_CHECK_AS(ConfigError, plans || app.count(o) == 0, o, " sets the budget planner, which runs for --budget "
                  "SIZE, --recommend or a pipeline's trainer.memory_budget; give one of them");
    if (pipeline.has_compare && resume_dir.empty()) {
      TT_CHECK_AS(ConfigError, !planning, pipeline_file, " compares variants (its compare: section) and ",
                  given({"--budget", "--recommend", "--plan-estimates"}),
                  " plans one pipeline: add the override 'compare=~' (quoted: the shell expands ~) to plan it without "
                  "the section");
      TT_CHECK_AS(ConfigError, !data_parallel || dry_run, pipeline_file, " compares variants (its compare: section), "
                  "each in a tt-run process of its own, one after another: run it without --nproc (or torchrun), or "
                  "add the override 'compare=~' (quoted) to train it data-parallel without the section");
    }
    if (plans && resume_dir.empty()) {  // the probes train steps: an evaluation-only run's were nothing it runs
      const std::string by = planning ? given({"--budget", "--recommend", "--plan-estimates"}) : "trainer.memory_budget";
      TT_CHECK_AS(ConfigError, !pipeline.trainer.is_set("max_steps") || pipeline.trainer.get_int("max_steps") > 0,
                  tt::child::trains_no_steps(pipeline_file), " and ", by, " plans training steps (the plugins and micro-batch they fit with); to plan "
                  "fine-tuning it, give the override trainer.max_steps=N (its evaluation's peak is summary.json's "
                  "evaluation_peak_tensor_bytes)");
    }
    if (pipeline.has_compare && !dry_run && resume_dir.empty() && !planning) return run_compare({pipeline_file}, overrides);
    if (plans && !nproc) {  // under --nproc each worker plans (a budget is per process)
      plan_opts.tt_run = std::filesystem::read_symlink("/proc/self/exe").string();
      plan_opts.file = pipeline_file;
      plan_opts.overrides = overrides;
      plan_opts.recommend = recommend;
      if (!run_dir.empty()) plan_opts.out_dir = run_dir + "-plan";  // beside the run
      plan_opts.quiet = quiet;
      if (!recommend && !plan_opts.estimates_only && budget_text.empty()) plan_opts.budget = tt::parse_budget(pipeline.trainer.get_string("memory_budget"));
      const auto outcome = tt::plan::run(plan_opts);
      if (outcome.exit_code != 0 || recommend || plan_opts.estimates_only) return outcome.exit_code;
      pipeline = tt::load_pipeline(outcome.planned_yaml);
    }
    if (dry_run) {
      std::fputs(pipeline.resolved_yaml().c_str(), stdout);
      std::fflush(stdout);
      if (nproc)
        std::fprintf(stderr, "tt-run --nproc %d: %d workers would each train this pipeline (trainer.batch_size "
                     "per worker)\n", *nproc, *nproc);
      // a comparison: every variant's pipeline built and validated as compare would run it
      if (pipeline.has_compare && resume_dir.empty()) return run_compare({pipeline_file}, overrides);
      return 0;
    }
    tt::install_interrupt_handlers("\ntt-run: stopping (training: after this batch, writing a checkpoint); Ctrl-C "
                                   "again to abort\n",
                                   "tt-run", "training");
    tt::TrainerConfig cfg;
    cfg.quiet = quiet;
    cfg.overwrite = overwrite;
    if (!resume_dir.empty()) {
      cfg.run_dir = resume_dir;
      cfg.resume = true;
    } else if (!run_dir.empty()) {
      cfg.run_dir = run_dir;
    }
    if (!predict_output.empty()) check_predict_output(predict_output, pipeline.resolved_yaml(), cfg.run_dir);
    if (nproc) {
      tt::dist::check_device_for_workers(pipeline.trainer, *nproc);
      if (tt::interrupt_requested()) throw tt::Interrupted("interrupted before the workers started");
      tt::launch::Options lo;
      lo.nproc = *nproc;
      lo.tt_run = std::filesystem::read_symlink("/proc/self/exe").string();
      lo.args = worker_args;
      return tt::launch::run(lo);
    }
    tt::Trainer trainer(std::move(pipeline), cfg);
    trainer.set_command(command);
    if (!predict_input.empty()) trainer.will_predict(predict_input);  // the model checks it before training
    trainer.fit();
    if (dist_env.rank != 0) return 0;  // rank 0 samples and predicts, once, as it writes the run's files
    if (sample_prompt) {
      const std::string text = trainer.generate(*sample_prompt, gen);  // a terminal gets no escape sequences
      std::printf("%s%s\n", quiet ? "" : "\nsample:\n", (isatty(1) ? tt::printable_text(text) : text).c_str());
    }
    if (!predict_input.empty()) {
      const std::filesystem::path out = predict_output.empty() ? trainer.run_dir() / "predictions.csv" : std::filesystem::path(predict_output);
      const auto p = trainer.predict(predict_input, out);
      if (!quiet)
        std::printf("predictions: %s (%.2f s; peak tensors %s, peak RSS %s: tt's meter)\n", out.string().c_str(),
                    p.seconds, tt::format_bytes(p.peak_tensor_bytes).c_str(), tt::format_bytes(p.peak_rss_bytes).c_str());
    }
    return 0;
  } catch (const tt::Interrupted& e) {
    std::fprintf(stderr, "tt-run: %s\n", e.what());
    return e.exit_code();
  } catch (const tt::Error& e) {
    return fail("", e.what(), e.exit_code());
  } catch (const c10::Error& e) {
    return fail(" in LibTorch", e.what_without_backtrace(), 1);
  } catch (const std::exception& e) {
    return fail("", e.what(), 1);
  }
}
}  // namespace

// The process ends once everything tt-run made is gone (the trainer, its plugins, the run's files
// closed) but without the libraries' static teardown: that touches pages of LibTorch's code that
// trainer.release_library_pages gave back before training, about 30 MiB read back after
// summary.json recorded the process's peak RSS (process_peak_rss_bytes), which /usr/bin/time and
// a container's limit then saw exceeded. Nothing of tt's is left for that teardown to do. A
// data-parallel worker ends its context first: rank 0 serves the store the others may still read
// from (a refusal's reason, the last gathers) and waits until they are done with it.
int main(int argc, char** argv) {
  const int rc = tt_run(argc, argv);
  tt::dist::shutdown();
  tt::log().flush();
  std::fflush(nullptr);
  std::_Exit(rc);
}
