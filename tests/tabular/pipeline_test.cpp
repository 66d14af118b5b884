// Through tt-run: pretraining a tiny in-context learner on the prior with the technique plugins,
// then the three tuning strategies on a generated CSV (model.init_from), and --predict.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tabular_test_util.h"
#include "test_support.h"
#include "tt/options.h"

using json = nlohmann::json;

namespace {
struct Tab {
  std::filesystem::path dir = tt::test::temp_dir("tabular_pipeline");
  std::string csv = (dir / "blobs.csv").string();
  Tab() {
    // Three Gaussian blobs in 4 features (well separated), 150 rows, label column "kind".
    std::mt19937 rng(0);
    std::normal_distribution<double> n(0, 1);
    std::ofstream f(csv);
    f << "a,b,kind,c,d\n";
    for (int i = 0; i < 150; ++i) {
      const int k = i % 3;
      f << 4 * k + n(rng) << "," << -3 * k + n(rng) << ",k" << k << "," << n(rng) << "," << 100 + 50 * k + 10 * n(rng) << "\n";
    }
  }
  tt::test::RunResult run(const std::string& tag, const std::string& body, const std::string& args = "") const {
    const auto yaml = dir / (tag + ".yaml");
    std::ofstream(yaml) << "name: " << tag << "\nseed: 0\n" << body << "output: {dir: " << dir.string() << "}\n";
    return tt::test::run(tt::test::tt_run_bin() + " " + yaml.string() + " -q --run-dir " + (dir / tag).string() + " " + args);
  }
  json summary(const std::string& tag) const { return tt::test::summary_of(dir / tag); }
};
}  // namespace

TEST(TabularPipeline, PretrainsWithPluginsThenInferenceFinetunePeftAndPredict) {
  Tab t;
  // Ordered-band classes only (argmax_share 0): the tables the loss figures below were measured on.
  const std::string prior = "data: {name: tabular-prior, rows: 96, max_features: 8, max_classes: 4, argmax_share: 0, validation_tables: 16}\n";
  const std::string opt = "optimizer: {name: adamw, lr: 3.0e-3}\n";
  // Pretraining with the technique plugins that act on the model's blocks.
  auto r = t.run("pretrain", prior + "model: " + kTinyModel + "}\n" + opt +
                             "plugins: [checkpoint, {name: attention, kernel: chunked, chunk_size: 32}, {name: amp, dtype: bf16}]\n"
                             "trainer: {max_steps: 1000, batch_size: 8, threads: 2, checkpoint_every: 1000, eval_every: 1000}\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto s = t.summary("pretrain");
  EXPECT_EQ(s["plugins"].size(), 3u);
  const double val = s["validation"]["val_loss"].get<double>();
  // The class frequencies of the support rows score ~1.05 on these tables; in-context learning
  // takes a few hundred steps to start (a plateau first), then falls to ~0.87 by step 1000.
  EXPECT_LT(val, 0.95) << "the prior's validation loss after 1000 steps";

  const std::string data = "data: {name: tabular-csv, path: " + t.csv + ", label: kind}\n";
  const std::string init = std::string("model: ") + kTinyModel + ", init_from: " + (t.dir / "pretrain").string() + "}\n";
  r = t.run("inference", data + init + "trainer: {max_steps: 0, threads: 2}\n",
            "--predict " + t.csv + " --predict-out " + (t.dir / "pred.csv").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  // Its set-up line names no optimizer or schedule: there is no training step to take.
  EXPECT_NE(r.output.find("| no training step (evaluation only) |"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" schedule |"), std::string::npos) << r.output;
  auto inf = t.summary("inference")["validation"];
  for (const char* k : {"val_accuracy", "val_roc_auc", "val_log_loss", "val_brier", "val_ece"}) EXPECT_TRUE(inf.contains(k)) << k;
  EXPECT_EQ(inf["val_loss"], inf["val_log_loss"]);  // every model's val_loss: here the log-loss
  EXPECT_EQ(inf["val_examples"].get<double>(), 45);
  // Three well-separated blobs; chance is 1/3. The tiny model after 1000 steps gets ~0.89.
  EXPECT_GT(inf["val_accuracy"].get<double>(), 0.8);
  // Fine-tuning must not be worse than inference, but for one test row of 45 (float rounding on
  // another CPU, e.g. without AMX's bf16, can move one borderline row).
  const double kOneRow = 1.0 / 45 + 1e-9;
  std::ifstream pred(t.dir / "pred.csv");
  std::string header, line;
  std::getline(pred, header);
  EXPECT_EQ(header, "p_k0,p_k1,p_k2,predicted");
  int rows = 0;
  while (std::getline(pred, line)) ++rows;
  EXPECT_EQ(rows, 150);
  // the inference and the prediction are metered (there is no training step to meter)
  const auto inf_summary = t.summary("inference");
  const int64_t params = inf_summary["memory"]["parameters_bytes"].get<int64_t>();
  EXPECT_GT(inf_summary["memory"]["evaluation_peak_tensor_bytes"].get<int64_t>(), params) << inf_summary.dump(1);
  const auto& predicted = inf_summary["prediction"];
  EXPECT_EQ(predicted["input"], t.csv);
  EXPECT_EQ(predicted["output"], (t.dir / "pred.csv").string());
  EXPECT_GT(predicted["peak_tensor_bytes"].get<int64_t>(), params) << predicted.dump();
  EXPECT_GT(predicted["seconds"].get<double>(), 0);

  const std::string episodes = "data: {name: tabular-csv, path: " + t.csv + ", label: kind, support_size: 48, query_size: 16, episodes: 8}\n";
  r = t.run("finetune", episodes + init + "optimizer: {name: adamw, lr: 1.0e-4}\ntrainer: {epochs: 2, batch_size: 4, threads: 2}\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto ft = t.summary("finetune");
  EXPECT_EQ(ft["steps"].get<int64_t>(), 4);
  // Well above chance, as inference is; the figure itself moves with the CPU that ran the bf16
  // pretraining: 42/45 on a 2-core Xeon without AMX, 40/45 on a GPU machine's 16-core Xeon.
  EXPECT_GT(ft["validation"]["val_accuracy"].get<double>(), 0.8);
  EXPECT_GE(ft["validation"]["val_accuracy"].get<double>(), inf["val_accuracy"].get<double>() - kOneRow);
  r = t.run("peft", episodes + init + "plugins: [{name: lora, targets: [qkv, proj, fc1, fc2], r: 4}]\n" +
                        "optimizer: {name: adamw, lr: 1.0e-3}\ntrainer: {epochs: 2, batch_size: 4, threads: 2}\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto pe = t.summary("peft");
  // LoRA on every qkv, proj, fc1 and fc2 of the 2 blocks: r x (in + out) each.
  const int64_t lora = 2 * 4 * ((32 + 96) + (32 + 32) + (32 + 64) + (64 + 32));
  EXPECT_EQ(pe["trainable_parameters"].get<int64_t>(), lora);
  EXPECT_GT(pe["validation"]["val_accuracy"].get<double>(), 0.8);
  EXPECT_GE(pe["validation"]["val_accuracy"].get<double>(), inf["val_accuracy"].get<double>() - kOneRow);

  // --predict with a model trained on the prior (no table to use as context): a clear error.
  r = t.run("noctx", prior + "model: " + kTinyModel + "}\ntrainer: {max_steps: 0}\n", "--predict " + t.csv);
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("needs a training table as context"), std::string::npos) << r.output;
}

// The printed breakdown adds up: its rest is the peak less the four parts, as summary.json has
// them. Each part is its own largest, so a peak before the gradients and the optimizer's state
// are all live (the fine-tuning's first step, on the shipped pipeline) has a negative rest, and
// the line after says why; it used to print "(+ rest)" after a sum larger than the peak.
TEST(TabularPipeline, ThePrintedMemoryBreakdownAddsUpToThePeak) {
  const fs::path data = fs::path(TT_SHARED_DIR) / "datasets" / "tabular";
  if (!fs::exists(data / "iris.csv")) GTEST_SKIP() << "the shared tables are not at " << data.string();
  const auto dir = tt::test::temp_dir("breakdown");
  const std::string note = "(rest < 0: each part is its own largest, and they were not all live at the peak";
  tt::test::write_text(dir / "topic.yaml", tt::test::topic_yaml(dir, "  max_steps: 3\n"));
  for (const auto& [name, pipeline] : {std::pair<std::string, std::string>{
                                           "tabular", "configs/tabular-finetune.yaml trainer.max_steps=1 data.path=" +
                                                          (data / "iris.csv").string()},
                                       std::pair<std::string, std::string>{"topic", (dir / "topic.yaml").string()}}) {
    const auto r = tt::test::run("cd " + tt::test::source_dir() + " && " + tt::test::tt_run_bin() + " " + pipeline +
                                 " --run-dir " + (dir / name).string());
    ASSERT_EQ(r.rc, 0) << r.output;
    const auto m = tt::test::summary_of(dir / name)["memory"];
    const int64_t rest = m["peak_tensor_bytes"].get<int64_t>() - m["parameters_bytes"].get<int64_t>() -
                         m["gradients_bytes"].get<int64_t>() - m["optimizer_state_bytes"].get<int64_t>() -
                         m["activations_bytes"].get<int64_t>();
    EXPECT_NE(r.output.find(" + activations " + tt::format_bytes(m["activations_bytes"].get<int64_t>()) + " + rest " +
                            tt::format_bytes(rest) + "; peak RSS"),
              std::string::npos)
        << r.output;
    if (name == "tabular") {
      EXPECT_LT(rest, 0);
      EXPECT_NE(r.output.find(note), std::string::npos) << r.output;
    } else {
      EXPECT_GT(rest, 0);
      EXPECT_EQ(r.output.find(note), std::string::npos) << r.output;
    }
  }
  fs::remove_all(dir);
}
