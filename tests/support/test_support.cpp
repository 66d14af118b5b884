#include "test_support.h"

#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "tt/model.h"
#include "tt/registry.h"
#include "tt/trainer.h"

namespace fs = std::filesystem;

namespace tt::test {

namespace {

// The directories temp_dir made: those of the running test, and those made outside any test (a
// suite's set-up), which live until the program ends.
struct MadeDirs {
  std::mutex mutex;
  std::vector<fs::path> of_test, of_program;
};
MadeDirs& made_dirs() {
  static MadeDirs dirs;
  return dirs;
}

// Removes `dirs` when `passed` (and TT_KEEP_TEST_DIRS is unset); otherwise names them on stderr,
// kept to look into.
void remove_or_keep(std::vector<fs::path> dirs, bool passed) {
  const bool keep = !passed || std::getenv("TT_KEEP_TEST_DIRS") != nullptr;
  for (const auto& d : dirs) {
    std::error_code ec;
    if (keep) {
      if (fs::exists(d, ec)) std::fprintf(stderr, "tt-test: kept %s\n", d.c_str());
    } else {
      fs::remove_all(d, ec);
    }
  }
}

class TempDirCleanup : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    std::vector<fs::path> dirs;
    {
      std::lock_guard<std::mutex> lock(made_dirs().mutex);
      dirs.swap(made_dirs().of_test);
    }
    remove_or_keep(std::move(dirs), !info.result()->Failed());
  }
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
    std::vector<fs::path> dirs;
    {
      std::lock_guard<std::mutex> lock(made_dirs().mutex);
      dirs.swap(made_dirs().of_program);
    }
    remove_or_keep(std::move(dirs), unit.Passed());
  }
};

}  // namespace

fs::path temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  fs::path d = fs::temp_directory_path() /
               ("tt-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(d);
  fs::create_directories(d);
  std::lock_guard<std::mutex> lock(made_dirs().mutex);
  const bool in_test = ::testing::UnitTest::GetInstance()->current_test_info() != nullptr;
  (in_test ? made_dirs().of_test : made_dirs().of_program).push_back(d);
  return d;
}

void install_temp_dir_cleanup() {
  ::testing::UnitTest::GetInstance()->listeners().Append(new TempDirCleanup);  // gtest owns it
}

std::string source_dir() { return TT_SOURCE_DIR; }
std::string tt_run_bin() { return TT_RUN_BIN; }
std::string tt_data_bin() { return TT_DATA_BIN; }

std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::vector<at::Tensor> params_of(Trainer& t) {
  std::vector<at::Tensor> out;
  for (const auto& p : t.state().model->parameters()) out.push_back(p.detach().clone());
  return out;
}

std::string topic_yaml(const fs::path& out_dir, const std::string& trainer_extra, const std::string& top_extra) {
  std::ostringstream y;
  y << "name: tiny\nseed: 3\n"
    << "data: {name: topic-synthetic, n_docs: 64, n_terms: 50, k: 4, avg_doc_length: 40}\n"
    << "model: {name: topic, k: 4}\n"
    << "optimizer: {name: adamw, lr: 0.05, weight_decay: 1.0e-5}\n"
    << "schedule: {name: cosine_warm_restarts, t0_epochs: 2, eta_min: 0.01}\n"
    << "trainer:\n  batch_size: 16\n  threads: 1\n  progress: off\n";
  if (!trainer_extra.empty()) y << trainer_extra;
  y << "output:\n  dir: " << out_dir.string() << "\n  plots: false\n";
  y << top_extra;
  return y.str();
}

RunResult run(const std::string& command) {
  RunResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(p.string() + " is not JSON: " + e.what());
  }
}

nlohmann::json summary_of(const fs::path& run_dir) { return read_json(run_dir / "summary.json"); }

int64_t mapped_rss_kb(const fs::path& file) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  int64_t kb = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < 16) {
      inside = line.size() >= file.string().size() &&
               line.compare(line.size() - file.string().size(), std::string::npos, file.string()) == 0;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      kb += std::stoll(line.substr(4));
    }
  }
  return kb;
}

std::string python_with(const std::string& module) {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (run(std::string(py) + " -c 'import " + module + "' 2>/dev/null").rc == 0) return py;
  return "";
}

namespace {

class RegressionData : public Dataset {
 public:
  RegressionData(int64_t n, int64_t d, int64_t nan_at, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    x_ = at::randn({n, d}, gen, torch::kFloat);
    auto w = at::randn({d, 1}, gen, torch::kFloat);
    y_ = x_.mm(w) + 0.1 * at::randn({n, 1}, gen, torch::kFloat);
    if (nan_at >= 0) x_[nan_at][0] = NAN;
  }
  int64_t size() const override { return x_.size(0); }
  Batch get(const at::Tensor& idx) override {
    Batch b;
    b.set("x", x_.index_select(0, idx));
    b.set("y", y_.index_select(0, idx));
    return b;
  }
  std::map<std::string, int64_t> info() const override { return {{"features", x_.size(1)}}; }

 private:
  torch::Tensor x_, y_;
};

class Regression : public Model {
 public:
  explicit Regression(int64_t d) { lin_ = register_module("lin", torch::nn::Linear(d, 1)); }
  ModelOutput forward_loss(const Batch& b) override {
    ModelOutput o;
    o.loss = torch::mse_loss(lin_->forward(b.at("x")), b.at("y"));
    o.reduction = Reduction::Mean;
    o.items = b.size;
    return o;
  }

 private:
  torch::nn::Linear lin_{nullptr};
};

// Regression whose evaluate() reports the mode it was called in (a model's own evaluate that
// sets neither eval mode nor no-grad itself, as a user's may not).
class ModeReporting : public Regression {
 public:
  using Regression::Regression;
  std::map<std::string, double> evaluate(Dataset&, int64_t) override {
    return {{"val_loss", 1.0}, {"in_training_mode", is_training() ? 1.0 : 0.0},
            {"grad_enabled", torch::GradMode::is_enabled() ? 1.0 : 0.0}};
  }
};

// Regression whose evaluate() holds `bytes` of tensors at once (an evaluation larger than a
// training step).
class BigEvaluation : public Regression {
 public:
  BigEvaluation(int64_t d, int64_t bytes) : Regression(d), bytes_(bytes) {}
  std::map<std::string, double> evaluate(Dataset&, int64_t) override {
    const at::Tensor held = torch::ones({bytes_ / 4});
    return {{"val_loss", held.sum().item<double>() / static_cast<double>(held.numel())}};
  }

 private:
  int64_t bytes_;
};

// Regression whose loss is wrong as `how` says: "vector" (per example, not reduced) or
// "detached" (no graph).
class BadLoss : public Regression {
 public:
  BadLoss(int64_t d, std::string how) : Regression(d), how_(std::move(how)) {}
  ModelOutput forward_loss(const Batch& b) override {
    ModelOutput o = Regression::forward_loss(b);
    o.loss = how_ == "vector" ? o.loss.expand({b.size}) : o.loss.detach();
    return o;
  }

 private:
  std::string how_;
};

}  // namespace

void register_test_components() {
  static bool done = false;
  if (done) return;
  done = true;
  auto& r = Registry::global();
  r.add_dataset("test-regression-data", "random linear regression data",
                Schema()
                    .add("n", Type::Int, "64", "examples")
                    .add("features", Type::Int, "8", "features")
                    .add("nan_at", Type::Int, "-1", "make example i NaN"),
                [](const Options& o, uint64_t seed) {
                  Datasets d;
                  d.train = std::make_shared<RegressionData>(o.get_int("n"), o.get_int("features"),
                                                             o.get_int("nan_at"), seed);
                  d.validation = std::make_shared<RegressionData>(32, o.get_int("features"), -1, seed + 1);
                  return d;
                });
  r.add_model("test-regression", "linear regression, mean squared error", Schema(),
              [](const Options&, const Datasets& d) {
                return std::make_shared<Regression>(d.train->info().at("features"));
              });
  r.add_model("test-bad-loss", "linear regression returning a wrong loss",
              Schema().add("how", Type::String, "vector", "vector or detached").choices({"vector", "detached"}),
              [](const Options& o, const Datasets& d) {
                return std::make_shared<BadLoss>(d.train->info().at("features"), o.get_string("how"));
              });
  r.add_model("test-big-eval", "linear regression whose evaluate() holds eval_bytes of tensors",
              Schema().add("eval_bytes", Type::Int, "4194304", "bytes of tensors evaluate() holds"),
              [](const Options& o, const Datasets& d) {
                return std::make_shared<BigEvaluation>(d.train->info().at("features"), o.get_int("eval_bytes"));
              });
  r.add_model("test-eval-mode", "linear regression whose evaluate() reports its mode", Schema(),
              [](const Options&, const Datasets& d) {
                return std::make_shared<ModeReporting>(d.train->info().at("features"));
              });
}

Pipeline regression_pipeline(const fs::path& out, const std::string& trainer_extra) {
  register_test_components();
  const std::string yaml = "name: reg\nseed: 1\ndata: {name: test-regression-data}\nmodel: {name: test-regression}\n"
                           "optimizer: {name: sgd, lr: 0.05}\ntrainer:\n  batch_size: 16\n  threads: 1\n"
                           "  progress: off\n" +
                           trainer_extra + "output:\n  dir: " + out.string() + "\n  plots: false\n";
  return parse_pipeline(yaml, "reg.yaml");
}

std::vector<std::string> step_lines(const fs::path& metrics_jsonl) {
  std::vector<std::string> out;
  std::ifstream in(metrics_jsonl);
  std::string line;
  while (std::getline(in, line))
    if (line.find("\"loss\":") != std::string::npos) out.push_back(line);
  return out;
}

nlohmann::json TinyLm::summary(const std::string& tag) const { return summary_of(dir / tag); }

TinyLm::TinyLm(const std::string& tag) : dir(temp_dir(tag)) {
  std::ofstream out(dir / "train.txt");
  for (int i = 0; i < 400; ++i) out << "the quick brown fox jumps over the lazy dog " << i << "\n";
}

RunResult TinyLm::run(const std::string& tag, const std::string& plugins, const std::string& trainer,
                      const std::string& extra_top) const {
  const std::string data_line =
      !data.empty() ? data
                    : "{name: text, train: " + (dir / "train.txt").string() + ", seq_len: " + std::to_string(seq_len) + "}";
  std::ofstream(dir / (tag + ".yaml")) << "name: tiny-lm\nseed: 0\n"
                                       << "data: " << data_line << "\n"
                                       << "model: " << model << "\n"
                                       << "plugins: " << plugins << "\n"
                                       << "trainer: {progress: off, " << trainer << "}\n"
                                       << "output: {dir: " << dir.string() << ", plots: false}\n"
                                       << extra_top;
  return tt::test::run(tt_run_bin() + " " + (dir / (tag + ".yaml")).string() + " -q --run-dir " + (dir / tag).string());
}

RunResult TinyLm::resume_copy(const std::string& from, const std::string& to, int step) const {
  namespace fs = std::filesystem;
  fs::copy(dir / from, dir / to, fs::copy_options::recursive);
  char keep[32];
  std::snprintf(keep, sizeof keep, "step-%08d.pt", step);
  for (const auto& e : fs::directory_iterator(dir / to / "checkpoints"))
    if (e.path().filename().string() > keep) fs::remove(e.path());
  fs::remove(dir / to / "summary.json");
  return tt::test::run(tt_run_bin() + " --resume " + (dir / to).string() + " -q");
}

std::vector<std::map<std::string, std::string>> csv_rows(const std::filesystem::path& file) {
  auto split = [](const std::string& line) {
    std::vector<std::string> out(1);
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char ch = line[i];
      if (ch == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (ch == '"') {
        quoted = !quoted;
      } else if (ch == ',' && !quoted) {
        out.emplace_back();
      } else {
        out.back() += ch;
      }
    }
    return out;
  };
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  const auto header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const auto f = split(line);
    EXPECT_EQ(f.size(), header.size()) << line;
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < std::min(f.size(), header.size()); ++i) row[header[i]] = f[i];
    rows.push_back(row);
  }
  return rows;
}

}  // namespace tt::test
