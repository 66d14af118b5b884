#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "adam8bit.h"
#include "disk_offload.h"
#include "host_offload.h"
#include "test_support.h"
#include "tt/error.h"
#include "tt/fused_adamw.h"
#include "tt/meter.h"

namespace {
using tt::offload::DiskOffload;
using nlohmann::json;
namespace fs = std::filesystem;

std::vector<torch::Tensor> make_params() {
  torch::manual_seed(0);
  return {torch::randn({120000}).requires_grad_(), torch::randn({300}).requires_grad_(),
          torch::randn({64, 90}).requires_grad_()};
}

using Factory = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

std::vector<std::pair<std::string, Factory>> optimizers() {
  return {
      {"torch Adam",
       [](std::vector<torch::Tensor> p) {
         return std::make_shared<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-2).weight_decay(0.01));
       }},
      {"torch AdamW amsgrad",
       [](std::vector<torch::Tensor> p) {
         return std::make_shared<torch::optim::AdamW>(p, torch::optim::AdamWOptions(1e-2).amsgrad(true));
       }},
      {"FusedAdamW",
       [](std::vector<torch::Tensor> p) {
         return std::make_shared<tt::FusedAdamW>(p, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
       }},
      {"adam8bit",
       [](std::vector<torch::Tensor> p) {
         tt::adam8bit::Config c;
         c.lr = 1e-2;
         c.min_8bit_size = 4096;
         std::vector<torch::optim::OptimizerParamGroup> groups{torch::optim::OptimizerParamGroup(p)};
         return std::make_shared<tt::adam8bit::Adam8bit>(std::move(groups), c);
       }},
  };
}

// Steps [from, to) of a run whose gradients come from a fixed seed (steps before `from` draw
// their gradients without applying them); a learning rate that changes each step.
void train_range(torch::optim::Optimizer& opt, std::vector<torch::Tensor>& params, int from, int to, uint64_t seed) {
  torch::manual_seed(seed);
  for (int s = 0; s < to; ++s) {
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(torch::randn_like(p) * (1 + s % 3));
    if (s < from) continue;
    for (auto& g : opt.param_groups()) g.options().set_lr(1e-2 / (1 + 0.1 * s));
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i];
    opt.step();
  }
}
void train(torch::optim::Optimizer& opt, std::vector<torch::Tensor>& params, int steps, uint64_t seed) {
  train_range(opt, params, 0, steps, seed);
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}
}  // namespace

TEST(OffloadDisk, ParametersEqualTheWrappedOptimizersWithTheStateInTheFile) {
  const auto dir = tt::test::temp_dir("offload_unit");
  tt::Meter::global().install();
  for (const auto& [name, make] : optimizers()) {
    auto plain = make_params(), off = make_params();
    auto a = make(plain);
    train(*a, plain, 15, 7);
    auto inner = make(off);
    DiskOffload d(inner, dir / "state.bin", /*keep_file=*/false);
    // Adam's and AdamW's state is made in the file before the first step, so that step peaks as
    // every later one does; adam8bit's is made in memory by its first step, then moved and freed
    for (auto& p : off) p.mutable_grad() = torch::zeros_like(p);
    const int64_t before = tt::Meter::global().current();
    for (auto& g : d.param_groups()) g.options().set_lr(0.0);
    tt::Meter::global().reset_peak();
    d.step();
    const int64_t first_peak = tt::Meter::global().peak() - before;
    EXPECT_LE(tt::Meter::global().current() - before, 0) << name << ": state left in tensor memory";
    EXPECT_GT(d.state_bytes(), 0) << name;
    tt::Meter::global().reset_peak();
    d.step();
    const int64_t later_peak = tt::Meter::global().peak() - before;
    if (name != "adam8bit") {
      EXPECT_LE(first_peak, later_peak) << name << ": the first step made the state in tensor memory";
    }
    // (two zero steps: the plain run below takes two too)
    for (auto& p : off) p.mutable_grad() = torch::Tensor();
    // ...then train as the plain one did (the zero step above moved nothing: lr 0; but Adam's
    // step count advanced, so compare against a plain run with the same extra step).
    auto plain2 = make_params();
    auto b = make(plain2);
    for (auto& p : plain2) p.mutable_grad() = torch::zeros_like(p);
    for (auto& g : b->param_groups()) g.options().set_lr(0.0);
    b->step();
    b->step();
    train(*b, plain2, 15, 7);
    train(d, off, 15, 7);
    EXPECT_LE(max_diff(plain2, off), 1e-7) << name;
    // Between steps the state file is not resident in this process: it was paged in parameter
    // by parameter and dropped after each. (The kernel maps up to 64 KiB of already cached
    // neighbouring pages on a fault, "fault-around": that much may stay mapped.)
    EXPECT_LE(tt::test::mapped_rss_kb(dir / "state.bin"), 96) << name << ": " << d.state_bytes() / 1024 << " KiB of state";
    EXPECT_GT(d.state_bytes(), 250 * 1024) << name;
    EXPECT_GT(max_diff(plain, make_params()), 1e-3) << name << ": training moved the parameters";
  }
  EXPECT_FALSE(fs::exists(dir / "state.bin")) << "the state file is removed unless keep_file";
}

TEST(OffloadDisk, StateRoundTripsThroughAnArchiveAndTheFileIsKeptWhenAsked) {
  const auto dir = tt::test::temp_dir("offload_archive");
  for (const auto& [name, make] : optimizers()) {
    auto pa = make_params();
    DiskOffload a(make(pa), dir / "a.bin", /*keep_file=*/true);
    train(a, pa, 6, 1);
    std::stringstream buf;
    {
      torch::serialize::OutputArchive ar;
      a.save(ar);
      ar.save_to(buf);
    }
    std::vector<torch::Tensor> pb;
    for (const auto& p : pa) pb.push_back(p.detach().clone().requires_grad_());
    DiskOffload b(make(pb), dir / "b.bin", false);
    torch::serialize::InputArchive in;
    in.load_from(buf);
    b.load(in);
    EXPECT_GT(b.state_bytes(), 0) << name << ": loaded state goes to the file";
    train(a, pa, 5, 2);
    train(b, pb, 5, 2);
    EXPECT_EQ(max_diff(pa, pb), 0.0) << name;
  }
  EXPECT_TRUE(fs::exists(dir / "a.bin"));
  EXPECT_FALSE(fs::exists(dir / "b.bin"));
}

TEST(OffloadDisk, RefusesOptimizersWhoseStateItCannotMove) {
  const auto dir = tt::test::temp_dir("offload_refuse");
  auto p = make_params();
  auto sgd = std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_HAS(tt::test::config_error([&] { DiskOffload d(sgd, dir / "s.bin", false); }), "adam, adamw or adam8bit");
  EXPECT_HAS(tt::test::config_error([&] {
               DiskOffload d(std::make_shared<torch::optim::Adam>(p), "/proc/no-such/dir/s.bin", false);
             }),
             "plugins.offload.path");
}

// target host's mechanics with the CPU standing in for the device: the wrapped optimizer works
// on host copies, gradients are copied in and parameters copied back; the arithmetic is equal.
TEST(OffloadHost, StepsHostCopiesAndWritesTheDeviceParametersBack) {
  for (const auto& [name, make] : optimizers()) {
    auto plain = make_params(), dev = make_params();
    auto a = make(plain);
    train(*a, plain, 12, 3);
    auto inner = make(dev);
    tt::offload::HostOffload h(inner);
    EXPECT_EQ(h.host_bytes(), 2 * 4 * (120000 + 300 + 64 * 90)) << name;
    for (auto& g : inner->param_groups())
      for (size_t i = 0; i < g.params().size(); ++i)
        EXPECT_NE(g.params()[i].data_ptr(), dev[i].data_ptr()) << name << ": the wrapped optimizer holds host copies";
    train_range(h, dev, 0, 6, 3);
    // a checkpoint in the middle, loaded into a fresh wrapper around copies of the parameters
    torch::serialize::OutputArchive ar;
    h.save(ar);
    std::stringstream buf;
    ar.save_to(buf);
    std::vector<torch::Tensor> dev2;
    for (const auto& p : dev) dev2.push_back(p.detach().clone().requires_grad_());
    tt::offload::HostOffload h2(make(dev2));
    torch::serialize::InputArchive in;
    in.load_from(buf);
    h2.load(in);
    train_range(h, dev, 6, 12, 3);
    train_range(h2, dev2, 6, 12, 3);
    EXPECT_LE(max_diff(plain, dev), 1e-7) << name;
    EXPECT_EQ(max_diff(dev, dev2), 0.0) << name << ": resumed from the archive";
  }
}

// ---------------------------------------------------------------- through tt-run

namespace {
struct Lm : tt::test::TinyLm {
  Lm() : TinyLm("offload_run") {
    model = "{name: transformer, d_model: 64, n_layers: 2, n_heads: 4, sample_tokens: 0}";
    seq_len = 64;
  }
  tt::test::RunResult run(const std::string& tag, const std::string& plugins, const std::string& trainer) const {
    return TinyLm::run(tag, plugins, "batch_size: 8, threads: 2, " + trainer, "optimizer: {name: adamw, lr: 0.003}\n");
  }
};
}  // namespace

TEST(OffloadPlugin, SameLossesWithTheStateOutOfTensorMemory) {
  Lm lm;
  auto plain = lm.run("plain", "[]", "max_steps: 8");
  ASSERT_EQ(plain.rc, 0) << plain.output;
  auto off = lm.run("off", "[offload]", "max_steps: 8");
  ASSERT_EQ(off.rc, 0) << off.output;
  EXPECT_NE(off.output.find("of optimizer state in"), std::string::npos) << off.output;
  const json a = lm.summary("plain"), b = lm.summary("off");
  EXPECT_EQ(b["final_loss"], a["final_loss"]);
  const int64_t state = a["memory"]["optimizer_state_bytes"].get<int64_t>();
  EXPECT_GT(state, 0);
  EXPECT_LT(b["memory"]["optimizer_state_bytes"].get<int64_t>(), state / 20);
  EXPECT_LE(b["memory"]["peak_tensor_bytes"].get<int64_t>(), a["memory"]["peak_tensor_bytes"].get<int64_t>() - state * 9 / 10);
  // where it went, named (tt::report_held): the file, outside the tensor peak
  ASSERT_TRUE(b["memory"].contains("held")) << b["memory"].dump();
  ASSERT_EQ(b["memory"]["held"].size(), 1u);
  const json& held = b["memory"]["held"][0];
  EXPECT_EQ(held["plugin"], "offload");
  EXPECT_EQ(held["what"], "optimizer state");
  EXPECT_EQ(held["where"], "file");
  EXPECT_GE(held["bytes"].get<int64_t>(), state);
  EXPECT_EQ(b["memory"]["held_bytes"], 0) << "none of it in tensors";
  // and in the printed summary (the runs above are quiet)
  auto shown = tt::test::run(tt::test::tt_run_bin() + " " + (lm.dir / "off.yaml").string() + " --run-dir " +
                             (lm.dir / "off-shown").string());
  ASSERT_EQ(shown.rc, 0) << shown.output;
  EXPECT_HAS(shown.output, "held       offload: optimizer state ");
  EXPECT_HAS(shown.output, " in a memory-mapped file (outside the tensor peak)");
  EXPECT_FALSE(fs::exists(lm.dir / "off" / "optimizer-state.bin")) << "removed at exit by default";
  for (const auto& f : b["outputs"]) EXPECT_TRUE(fs::exists(lm.dir / "off" / f.get<std::string>())) << f << " is listed but gone";

  auto a8 = lm.run("a8", "[adam8bit]", "max_steps: 8");
  ASSERT_EQ(a8.rc, 0) << a8.output;
  auto a8off = lm.run("a8off", "[adam8bit, {name: offload, keep_file: true}]", "max_steps: 8");
  ASSERT_EQ(a8off.rc, 0) << a8off.output;
  EXPECT_EQ(lm.summary("a8off")["final_loss"], lm.summary("a8")["final_loss"]);
  EXPECT_TRUE(fs::exists(lm.dir / "a8off" / "optimizer-state.bin"));
  EXPECT_HAS(lm.summary("a8off")["outputs"].dump(), "optimizer-state.bin");  // kept: one of the outputs
}

TEST(OffloadPlugin, ARunKilledMidwayResumesFromItsCheckpoint) {
  Lm lm;
  const std::string trainer = "max_steps: 40, checkpoint_every: 4, keep_checkpoints: 3";
  auto straight = lm.run("straight", "[offload]", trainer);
  ASSERT_EQ(straight.rc, 0) << straight.output;

  // The same run, killed with SIGKILL in step 10, after the checkpoints of steps 4 and 8: the
  // test plugin test-stall holds the end of step 10 until the file `go` exists (it changes
  // nothing the run computes), so the kill comes mid-run however fast the steps are.
  std::string yaml_text = tt::test::read_file(lm.dir / "straight.yaml");
  const std::string gate = "plugins: [offload, {name: test-stall, event: gate, from_step: 10, seconds: 120, marker: " +
                           (lm.dir / "held").string() + ", release: " + (lm.dir / "go").string() + "}]";
  const std::string plain = "plugins: [offload]";
  const size_t at = yaml_text.find(plain);
  ASSERT_NE(at, std::string::npos) << yaml_text;
  yaml_text.replace(at, plain.size(), gate);
  std::ofstream(lm.dir / "killed.yaml") << yaml_text;
  const fs::path run_dir = lm.dir / "killed";
  // (everything the child needs is made before the fork: it only opens a file and execs)
  const std::string bin = tt::test::tt_run_bin(), yaml = (lm.dir / "killed.yaml").string(), rd = run_dir.string();
  const std::string log = (lm.dir / "killed.out").string();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execl("/usr/bin/env", "env", "TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR, bin.c_str(), yaml.c_str(), "-q", "--run-dir",
          rd.c_str(), (char*)nullptr);
    _exit(127);
  }
  bool held = false;
  for (int i = 0; i < 12000 && !held; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    held = fs::exists(lm.dir / "held");
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(held) << "the run did not reach step 10 within 120 s:\n" << tt::test::read_file(lm.dir / "killed.out");
  ASSERT_TRUE(WIFSIGNALED(status)) << tt::test::read_file(lm.dir / "killed.out");
  EXPECT_FALSE(fs::exists(run_dir / "summary.json"));
  std::ofstream(lm.dir / "go") << "\n";  // the resumed run is not held
  int last = 0;  // the latest checkpoint the killed run left whole
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints"))
    if (e.path().extension() == ".pt" && e.path().stem().string().rfind("step-", 0) == 0) last = std::max(last, std::stoi(e.path().stem().string().substr(5)));
  EXPECT_EQ(last, 8);
  auto resumed = tt::test::run("TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt::test::tt_run_bin() + " --resume " +
                               run_dir.string() + " -q");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  EXPECT_EQ(lm.summary("killed")["final_loss"], lm.summary("straight")["final_loss"]);
  EXPECT_EQ(lm.summary("killed")["steps"], 40);
  EXPECT_EQ(lm.summary("killed")["steps_this_run"], 40 - last);  // from its checkpoint, not from step 0
}

TEST(OffloadPlugin, BadOptionsAreClearErrors) {
  Lm lm;
  struct Case {
    std::string plugins, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"[{name: offload, target: host}]", "use target: disk"},
           {"[{name: offload, target: nvme}]", "(offload).target must be one of disk | host, got 'nvme'"},
           {"[offload, adam8bit]", "'offload' must be listed after 'adam8bit'"},
       }) {
    auto r = lm.run("bad", c.plugins, "max_steps: 1");
    EXPECT_EQ(r.rc, 2) << c.plugins << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.plugins << "\n" << r.output;
    fs::remove_all(lm.dir / "bad");
  }
}
