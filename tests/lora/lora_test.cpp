#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint_reader.h"
#include "lora.h"
#include "test_support.h"
#include "tt/error.h"
#include "tt/nn.h"

namespace {
using tt::lora::Config;
using tt::lora::Lora;
using nlohmann::json;
using tt::test::config_error;

// Two blocks of an attention-and-MLP shape, plus a head: a stand-in for a model of core's blocks.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    qkv = register_module("qkv", tt::nn::Linear(16, 48));
    proj = register_module("proj", tt::nn::Linear(16, 16));
    fc1 = register_module("fc1", tt::nn::Linear(16, 32));
    fc2 = register_module("fc2", tt::nn::Linear(32, 16));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = x + proj(qkv(x).narrow(-1, 0, 16).tanh());
    return h + fc2(torch::gelu(fc1(h)));
  }
  tt::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  NetImpl() {
    b0 = register_module("b0", Block());
    b1 = register_module("b1", Block());
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})));
    head = register_module("head", tt::nn::Linear(16, 5));
  }
  at::Tensor forward(const at::Tensor& x) { return head(norm(b1(b0(x)))); }
  Block b0{nullptr}, b1{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  tt::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

Config config(std::vector<std::string> targets, int64_t r = 4, double alpha = 8) {
  Config c;
  c.targets = std::move(targets);
  c.r = r;
  c.alpha = alpha;
  return c;
}

int64_t trainable(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters())
    if (p.requires_grad()) n += p.numel();
  return n;
}

// Random B (they start at zero), so that the adapters change the output.
void randomize(Lora& lora, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard g;
  for (auto& l : lora.layers()) l.adapter->B.normal_(0, 0.1);
}
}  // namespace

TEST(Lora, TrainsROfInPlusOutPerAdaptedLayerAndNothingElse) {
  torch::manual_seed(0);
  Net net;
  const auto x = torch::randn({3, 7, 16});
  const auto before = net->forward(x);
  Lora lora(*net, config({"qkv", "fc1", "fc2"}, 4));
  ASSERT_EQ(lora.layers().size(), 6u);
  // qkv 16->48, fc1 16->32, fc2 32->16, twice: r * (in + out) each
  const int64_t expected = 2 * 4 * ((16 + 48) + (16 + 32) + (32 + 16));
  EXPECT_EQ(lora.adapter_parameters(), expected);
  EXPECT_EQ(trainable(*net), expected);
  for (const auto& item : net->named_parameters())
    EXPECT_EQ(item.value().requires_grad(), item.key().find("adapter_lora") != std::string::npos) << item.key();
  // B = 0: the outputs are exactly the base model's; A is Kaiming-uniform within 1/sqrt(in)
  EXPECT_TRUE(torch::equal(net->forward(x), before));
  for (const auto& l : lora.layers()) {
    EXPECT_EQ(l.adapter->B.abs().max().item<float>(), 0.f);
    const double bound = 1.0 / std::sqrt(static_cast<double>(l.linear->in_features));
    EXPECT_LE(l.adapter->A.abs().max().item<double>(), bound);
    EXPECT_GT(l.adapter->A.abs().max().item<double>(), 0.5 * bound);
  }
  // Backward: gradients reach the adapters only (B's first; A's is zero while B is).
  net->forward(x).square().sum().backward();
  for (const auto& item : net->named_parameters()) {
    if (item.key().find("adapter_lora") == std::string::npos) {
      EXPECT_FALSE(item.value().grad().defined()) << item.key();
    } else if (item.key().back() == 'B') {
      EXPECT_GT(item.value().grad().abs().max().item<float>(), 0.f) << item.key();
    }
  }
}

TEST(Lora, AllLinearTrainPatternsAndBadTargets) {
  Net net;
  Config c = config({"all-linear"}, 2);
  c.train = {"norm"};
  Lora lora(*net, c);
  EXPECT_EQ(lora.layers().size(), 9u);  // 4 per block and the head
  EXPECT_EQ(trainable(*net), lora.adapter_parameters() + 2 * 16);

  Net other;
  const std::string e = config_error([&] { Lora bad(*other, config({"qkv", "attn_out"})); });
  EXPECT_HAS(e, "'attn_out' matches no Linear layer");
  EXPECT_HAS(e, "b0.qkv");
  EXPECT_HAS(config_error([&] { Lora bad(*other, config({"fc1"}, 32)); }), "exceeds the smaller side");
  // all-linear leaves out a layer narrower than r (the 5-output head at r 8), as PEFT's leaves out
  // the output layer; where every layer is, it is refused
  Net wide;
  Lora eight(*wide, config({"all-linear"}, 8));
  EXPECT_EQ(eight.layers().size(), 8u);
  for (const auto& l : eight.layers()) EXPECT_NE(l.name, "head");
  Net narrow;
  EXPECT_HAS(config_error([&] { Lora bad(*narrow, config({"all-linear"}, 64)); }),
             "every Linear layer of the model is narrower than r = 64");
  torch::nn::Sequential plain(torch::nn::Linear(4, 4));
  EXPECT_HAS(config_error([&] { Lora bad(*plain, config({"all-linear"})); }), "no tt::nn::Linear");
}

TEST(Lora, MergedOutputsEqualUnmergedAndUnmergeRestores) {
  torch::manual_seed(1);
  Net net;
  Lora lora(*net, config({"all-linear"}, 4, 16));
  randomize(lora, 2);
  const auto x = torch::randn({4, 9, 16});
  torch::NoGradGuard g;
  const auto unmerged = net->forward(x);
  const auto w0 = lora.layers()[0].linear->weight.clone();
  lora.merge();
  EXPECT_TRUE(lora.merged());
  EXPECT_FALSE(lora.layers()[0].adapter->active());
  const auto merged = net->forward(x);
  EXPECT_LE((merged - unmerged).abs().max().item<double>(), 1e-5);
  EXPECT_GT((lora.layers()[0].linear->weight - w0).abs().max().item<double>(), 1e-3) << "merge moved the weight";
  lora.unmerge();
  EXPECT_LE((lora.layers()[0].linear->weight - w0).abs().max().item<double>(), 1e-6);
  EXPECT_LE((net->forward(x) - unmerged).abs().max().item<double>(), 1e-5);
}

TEST(Lora, AdaptersFileAndMergedExportApplyToTheBaseModel) {
  const auto dir = tt::test::temp_dir("lora_files");
  torch::manual_seed(3);
  Net base;
  torch::serialize::OutputArchive base_ar;
  base->save(base_ar);
  base_ar.save_to((dir / "base.pt").string());

  Lora lora(*base, config({"qkv", "proj"}, 2, 4));
  randomize(lora, 4);
  const auto x = torch::randn({2, 5, 16});
  torch::NoGradGuard g;
  const auto adapted = base->forward(x);
  lora.save(dir / "adapters.pt");
  EXPECT_LT(std::filesystem::file_size(dir / "adapters.pt"), 16 * 1024u);
  std::vector<at::Tensor> weights;
  for (const auto& p : base->parameters()) weights.push_back(p.clone());
  lora.export_merged(*base, dir / "merged.pt");
  {
    size_t i = 0;
    for (const auto& p : base->parameters()) EXPECT_TRUE(torch::equal(p, weights[i++])) << "export left the model as it was";
  }

  // A fresh model with the base weights plus the adapters file = the adapted model, exactly.
  Net fresh;
  torch::serialize::InputArchive in;
  in.load_from((dir / "base.pt").string());
  fresh->load(in);
  Lora again(*fresh, config({"qkv", "proj"}, 2, 4));
  again.load(dir / "adapters.pt");
  EXPECT_TRUE(torch::equal(fresh->forward(x), adapted));

  // The merged export holds no adapter and loads into a plain model: outputs within 1e-5.
  Net plain;
  torch::serialize::InputArchive m, model_ar;
  m.load_from((dir / "merged.pt").string());
  m.read("model", model_ar);
  plain->load(model_ar);
  EXPECT_LE((plain->forward(x) - adapted).abs().max().item<double>(), 1e-5);

  // Mismatches are clear errors.
  Net n1, n2, n3;
  EXPECT_HAS(config_error([&] { Lora(*n1, config({"qkv", "proj"}, 4, 4)).load(dir / "adapters.pt"); }), "r = 2");
  EXPECT_HAS(config_error([&] { Lora(*n2, config({"qkv"}, 2, 4)).load(dir / "adapters.pt"); }), "which the targets here");
  EXPECT_HAS(config_error([&] { Lora(*n3, config({"qkv", "proj"}, 2, 4)).load(dir / "base.pt"); }), "not a LoRA adapter file");
}

// ---------------------------------------------------------------- through tt-run

namespace {
struct Finetune : tt::test::TinyLm {
  std::string base_data, held_out;
  Finetune() : TinyLm("lora_run") {
    model = "{name: transformer, d_model: 64, n_layers: 2, n_heads: 4, sample_tokens: 0}";
    seq_len = 64;
    // Held-out text of another kind: the pretrained model has never seen it.
    std::ofstream t(dir / "new_train.txt"), v(dir / "new_val.txt");
    for (int i = 0; i < 300; ++i) t << "pack my box with five dozen liquor jugs, said " << i << " wizards\n";
    for (int i = 300; i < 360; ++i) v << "pack my box with five dozen liquor jugs, said " << i << " wizards\n";
    base_data = "{name: text, train: " + (dir / "train.txt").string() + ", seq_len: 64}";
    held_out = "{name: text, train: " + (dir / "new_train.txt").string() +
               ", validation: " + (dir / "new_val.txt").string() + ", seq_len: 64}";
  }
  tt::test::RunResult tune(const std::string& tag, const std::string& plugins, const std::string& init,
                           const std::string& lr, int steps) {
    data = held_out;
    model = "{name: transformer, d_model: 64, n_layers: 2, n_heads: 4, sample_tokens: 0, init_from: " + init + "}";
    return run(tag, plugins, "batch_size: 8, threads: 2, max_steps: " + std::to_string(steps),
               "optimizer: {name: adamw, lr: " + lr + "}\n");
  }
  double val(const std::string& tag) const { return summary(tag)["validation"]["val_loss"].get<double>(); }
};
}  // namespace

TEST(LoraPlugin, FineTunesAPretrainedLmOnHeldOutTextWithAFractionOfTheState) {
  Finetune f;
  f.data = f.base_data;
  auto base = f.run("base", "[]", "batch_size: 8, threads: 2, max_steps: 40, checkpoint_every: 40",
                    "optimizer: {name: adamw, lr: 0.003}\n");
  ASSERT_EQ(base.rc, 0) << base.output;
  const std::string base_dir = (f.dir / "base").string();
  const std::string lora = "[{name: lora, r: 2, alpha: 4, export_merged: true}]";

  // Learning rate 0: the pretrained model's loss on the held-out text (the step changes nothing).
  auto before = f.tune("before", lora, base_dir, "0", 1);
  ASSERT_EQ(before.rc, 0) << before.output;
  auto tuned = f.tune("tuned", lora, base_dir, "0.01", 30);
  ASSERT_EQ(tuned.rc, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("model weights from"), std::string::npos) << tuned.output;
  auto full = f.tune("full", "[]", base_dir, "0.003", 30);
  ASSERT_EQ(full.rc, 0) << full.output;
  EXPECT_LT(f.val("tuned"), 0.9 * f.val("before")) << "before " << f.val("before") << ", tuned " << f.val("tuned");

  const json st = f.summary("tuned"), sf = f.summary("full");
  const int64_t adapter_params = st["trainable_parameters"].get<int64_t>();
  // per block: qkv 64->192, proj 64->64, fc1 64->256, fc2 256->64, each r * (in + out)
  EXPECT_EQ(adapter_params, 2 * 2 * ((64 + 192) + (64 + 64) + (64 + 256) + (256 + 64)));
  EXPECT_EQ(st["parameters"].get<int64_t>(), sf["parameters"].get<int64_t>() + adapter_params);
  auto state = [](const json& s) {
    return s["memory"]["gradients_bytes"].get<double>() + s["memory"]["optimizer_state_bytes"].get<double>();
  };
  EXPECT_GT(state(sf), 0);
  EXPECT_LE(state(st), 0.05 * state(sf)) << "lora " << state(st) << " B, full " << state(sf) << " B";

  // The adapters file on the base checkpoint, and the merged export alone, give the tuned model.
  auto applied = f.tune("applied", "[{name: lora, r: 2, alpha: 4, load: " + (f.dir / "tuned" / "adapters.pt").string() + "}]",
                        base_dir, "0", 1);
  ASSERT_EQ(applied.rc, 0) << applied.output;
  EXPECT_NEAR(f.val("applied"), f.val("tuned"), 1e-6);
  auto merged = f.tune("merged", "[]", (f.dir / "tuned" / "merged.pt").string(), "0", 1);
  ASSERT_EQ(merged.rc, 0) << merged.output;
  EXPECT_NEAR(f.val("merged"), f.val("tuned"), 1e-4);
  // The tuned run itself, which holds the adapters beside the base: refused, naming these two ways
  auto whole = f.tune("whole", "[]", (f.dir / "tuned").string(), "0", 1);
  EXPECT_EQ(whole.rc, 2) << whole.output;
  EXPECT_HAS(whole.output, "its adapters are a plugin's: use its merged weights (lora's export_merged: true writes "
                           "RUN/merged.pt) or give the plugin again with its adapters");
}

TEST(LoraPlugin, InitFromAndBadOptionsAreClearErrors) {
  Finetune f;
  struct Case {
    std::string plugins, init, expect;
    int rc;
  };
  const std::string nowhere = (f.dir / "no-such-run").string();
  for (const Case& c : std::vector<Case>{
           {"[]", nowhere, "does not exist", 2},
           {"[{name: lora, targets: [nope]}]", "~", "'nope' matches no Linear layer", 2},
           {"[{name: lora, targets: [q_proj, v_proj]}]", "~",
            "'q_proj' matches no Linear layer of the model (some of its layers: blocks.0.attn.qkv", 2},
           {"[{name: lora, targets: [v_proj]}]", "~", "one Linear here, attn.qkv: targets: [qkv]", 2},
           {"[{name: lora, r: 0}]", "~", "(lora).r must be >= 1, got 0", 2},
           {"[{name: lora, load: " + nowhere + "}]", "~", "does not exist", 2},
       }) {
    auto r = f.tune("bad", c.plugins, c.init, "0.01", 1);
    EXPECT_EQ(r.rc, c.rc) << c.plugins << " " << c.init << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.plugins << "\n" << r.output;
    std::filesystem::remove_all(f.dir / "bad");
  }
  // A checkpoint of another model shape.
  f.data = f.base_data;
  f.model = "{name: transformer, d_model: 64, n_layers: 2, n_heads: 4, sample_tokens: 0}";
  auto small = f.run("small", "[]", "batch_size: 8, max_steps: 1, checkpoint_every: 1");
  ASSERT_EQ(small.rc, 0) << small.output;
  f.model = "{name: transformer, d_model: 32, n_layers: 2, n_heads: 4, sample_tokens: 0, init_from: " +
            (f.dir / "small").string() + "}";
  auto r = f.run("mismatch", "[]", "batch_size: 8, max_steps: 1");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("does not fit this model"), std::string::npos) << r.output;
}

// model.init_average: the weights are the elementwise mean of the newest N checkpoints of
// init_from's run (a step at learning rate 0 then saves them unchanged); asking for more
// checkpoints than the run kept, or averaging without init_from, are clear errors.
TEST(InitFrom, AverageIsTheMeanOfTheNewestCheckpoints) {
  Finetune f;
  f.data = f.base_data;
  f.model = "{name: transformer, d_model: 32, n_layers: 2, n_heads: 4, sample_tokens: 0}";
  auto base = f.run("base", "[]", "batch_size: 8, threads: 2, max_steps: 3, checkpoint_every: 1, keep_checkpoints: 0",
                    "optimizer: {name: adamw, lr: 0.01}\n");
  ASSERT_EQ(base.rc, 0) << base.output;
  const auto dir = f.dir / "base" / "checkpoints";
  f.model = "{name: transformer, d_model: 32, n_layers: 2, n_heads: 4, sample_tokens: 0, init_from: " +
            (f.dir / "base").string() + ", init_average: 2}";
  auto avg = f.run("avg", "[]", "batch_size: 8, threads: 2, max_steps: 1, checkpoint_every: 1",
                   "optimizer: {name: adamw, lr: 0, weight_decay: 0}\n");
  ASSERT_EQ(avg.rc, 0) << avg.output;
  EXPECT_NE(avg.output.find("the mean of 2 checkpoints"), std::string::npos) << avg.output;
  const auto s2 = tt::test::checkpoint_params(dir / "step-00000002.pt");
  const auto s3 = tt::test::checkpoint_params(dir / "step-00000003.pt");
  const auto got = tt::test::checkpoint_params(f.dir / "avg" / "checkpoints" / "step-00000001.pt");
  ASSERT_EQ(got.size(), s3.size());
  double moved = 0;
  for (const auto& [name, t] : got) {
    ASSERT_TRUE(s2.count(name) && s3.count(name)) << name;
    if (!t.is_floating_point()) continue;
    EXPECT_TRUE(torch::allclose(t, (s2.at(name) + s3.at(name)) / 2, 1e-6, 1e-7)) << name;
    moved = std::max(moved, (s2.at(name) - s3.at(name)).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-4) << "the two checkpoints should differ for the mean to mean anything";

  f.model = "{name: transformer, d_model: 32, n_layers: 2, n_heads: 4, sample_tokens: 0, init_from: " +
            (f.dir / "base").string() + ", init_average: 4}";
  auto r = f.run("too-many", "[]", "batch_size: 8, max_steps: 1");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("4 checkpoints asked for, but " + (f.dir / "base").string() + " has 3"), std::string::npos)
      << r.output;
  f.model = "{name: transformer, d_model: 32, n_layers: 2, n_heads: 4, sample_tokens: 0, init_average: 2}";
  r = f.run("no-init", "[]", "batch_size: 8, max_steps: 1");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("(transformer).init_average averages the checkpoints of init_from, which is not set"), std::string::npos) << r.output;
}
