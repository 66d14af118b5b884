// The topic model in the trainer: tinytopics' LR schedule step by step, option errors,
// prefetching and the lazy option.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/npy.h"
#include "tt/plugin.h"
#include "tt/state.h"
#include "tt/trainer.h"

namespace {
tt::Pipeline pipe(const std::filesystem::path& out, const std::vector<std::string>& overrides) {
  return tt::parse_pipeline(tt::test::topic_yaml(out), "p.yaml", overrides);
}

std::vector<nlohmann::json> step_lines(const std::filesystem::path& metrics) {
  std::vector<nlohmann::json> out;
  for (const auto& line : tt::test::step_lines(metrics)) out.push_back(nlohmann::json::parse(line));
  return out;
}
}  // namespace

TEST(TopicTraining, LearningRateFollowsTinytopicsScheduleStepByStep) {
  auto out = tt::test::temp_dir("topic");
  // 64 docs / batch 16 = 4 batches per epoch; T_0 = 2 epochs, eta_min 0.01, lr 0.05
  tt::Trainer t(pipe(out, {"trainer.epochs=5"}), {out / "run", false, true});
  t.fit();
  auto lines = step_lines(out / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 20u);
  const int nb = 4;
  auto f = [](double e) {  // CosineAnnealingWarmRestarts(T_0=2, T_mult=1, eta_min=0.01) at epoch e
    double t_cur = std::fmod(e, 2.0);
    return 0.01 + (0.05 - 0.01) * (1 + std::cos(M_PI * t_cur / 2.0)) / 2;
  };
  for (int s = 0; s < 20; ++s) {
    // batch s used the rate set after batch s-1: scheduler.step(epoch + batch_i / num_batches)
    double expected = s == 0 ? 0.05 : f((s - 1) / nb + static_cast<double>((s - 1) % nb) / nb);
    EXPECT_NEAR(lines[s]["lr"].get<double>(), expected, 1e-12) << "step " << s + 1;
  }
}

TEST(TopicTraining, EpochLossIsTheMeanOfBatchSums) {
  auto out = tt::test::temp_dir("topic");
  tt::Trainer t(pipe(out, {"trainer.epochs=2"}), {out / "run", false, true});
  t.fit();
  const auto& losses = t.step_losses();
  double mean2 = (losses[4] + losses[5] + losses[6] + losses[7]) / 4;
  auto s = tt::test::summary_of(out / "run");
  EXPECT_DOUBLE_EQ(s["final_epoch_loss"].get<double>(), mean2);
}

// summary.json's median_epoch_seconds is the median of metrics.jsonl's epoch_seconds after the
// first epoch (its time holds the warm-up), or the one epoch's time in a run of one epoch.
TEST(TopicTraining, MedianEpochTimeLeavesOutTheFirstEpochWhereThereAreOthers) {
  for (const int epochs : {1, 2, 4, 5}) {  // medians of 1, 1, 3 and 4 epochs
    const auto out = tt::test::temp_dir("topic_epoch_time");
    tt::Trainer t(pipe(out, {"trainer.epochs=" + std::to_string(epochs)}), {out / "run", false, true});
    t.fit();
    std::vector<double> seconds;
    std::istringstream lines(tt::test::read_file(out / "run" / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("epoch_end")) seconds.push_back(j["epoch_seconds"].get<double>());
    }
    ASSERT_EQ(seconds.size(), static_cast<size_t>(epochs));
    if (epochs > 1) seconds.erase(seconds.begin());
    std::sort(seconds.begin(), seconds.end());
    const size_t n = seconds.size();
    const double want = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
    const auto s = tt::test::summary_of(out / "run");
    EXPECT_DOUBLE_EQ(s["median_epoch_seconds"].get<double>(), want) << epochs << " epochs";
  }
}

TEST(TopicTraining, FusedAndReferencePathsTrainAlike) {
  auto run = [](const std::string& fused) {
    auto out = tt::test::temp_dir("topic");
    tt::Trainer t(pipe(out, {"trainer.max_steps=12", "model.fused=" + fused}), {out / "run", false, true});
    t.fit();
    return t.step_losses();
  };
  auto a = run("true"), b = run("false");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::abs(b[i])) << "step " << i + 1;
}

TEST(TopicTraining, PrefetchDoesNotChangeResults) {
  auto run = [](const std::string& prefetch) {
    auto out = tt::test::temp_dir("topic");
    tt::Trainer t(pipe(out, {"trainer.max_steps=10", "trainer.prefetch=" + prefetch}), {out / "run", false, true});
    t.fit();
    return t.step_losses();
  };
  EXPECT_EQ(run("true"), run("false"));
}

TEST(TopicTraining, LazyUpdatesOnlyTheBatchRowsAndStillLearns) {
  // L (documents x topics) after steps 1 and 2 of one seed: lazily, step 2 changes only the rows
  // of its own batch (16 of the 64 documents); as a dense gradient (defer_updates: false, every
  // row every step) AdamW's momentum also moves step 1's rows, which are other documents.
  const auto L_after = [](const std::vector<std::string>& options, int steps) {
    auto out = tt::test::temp_dir("topic");
    std::vector<std::string> o = options;
    o.push_back("trainer.max_steps=" + std::to_string(steps));
    tt::Trainer t(pipe(out, o), {out / "run", false, true});
    t.fit();
    return t.state().model->named_parameters()["L_raw"].detach().clone();
  };
  const auto rows_changed = [&](const std::vector<std::string>& options) {
    const auto a = L_after(options, 1), b = L_after(options, 2);
    return (a != b).any(1).sum().item<int64_t>();
  };
  const int64_t lazy = rows_changed({"model.lazy=true"});
  EXPECT_GT(lazy, 0);
  EXPECT_LE(lazy, 16);
  EXPECT_GT(rows_changed({"model.defer_updates=false"}), 16);
  auto out = tt::test::temp_dir("topic");
  tt::Trainer t(pipe(out, {"trainer.epochs=3", "model.lazy=true"}), {out / "run", false, true});
  t.fit();
  auto s = tt::test::summary_of(out / "run");
  EXPECT_LT(s["final_epoch_loss"].get<double>(), s["first_epoch_loss"].get<double>());
}

TEST(TopicTraining, BadModelOptionsAreRefused) {
  auto error_of = [](const std::vector<std::string>& ov) -> std::string {
    auto out = tt::test::temp_dir("topic");
    try {
      tt::Trainer t(pipe(out, ov), {out / "run", false, true});
      t.fit();
    } catch (const tt::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of({"model.k=1"}).find("model (topic).k must be >= 2, got 1"), std::string::npos);
  EXPECT_NE(error_of({"model.init_scale=0"}).find("model (topic).init_scale must be > 0, got 0"), std::string::npos);
  EXPECT_NE(error_of({"model.k=51"}).find("must not exceed the number of terms (50)"), std::string::npos);
  EXPECT_NE(error_of({"model.lazy=true", "model.fused=false"}).find("needs fused: true"), std::string::npos);
}

TEST(TopicTraining, SparseBatchesAccumulateLikeFullBatches) {
  // A small text corpus read as sparse batches; micro-batches of 3 must give the loss and
  // update of whole batches of 8.
  auto dir = tt::test::temp_dir("topic");
  {
    std::ofstream corpus(dir / "docs.txt");
    const char* words[] = {"apple", "banana", "cherry", "dates", "elder", "figs", "grape", "honey", "icing", "jelly"};
    for (int d = 0; d < 24; ++d) {
      for (int w = 0; w < 12; ++w) corpus << words[(d * 7 + w * (d % 3 + 1)) % 10] << ' ';
      corpus << '\n';
    }
  }
  auto run = [&](const std::string& micro) {
    auto yaml = "data: {name: topic-text, path: " + (dir / "docs.txt").string() + "}\nmodel: {name: topic, k: 3}\n" +
                "trainer: {batch_size: 8, micro_batch_size: " + micro + ", max_steps: 6, threads: 1, progress: off}\n" +
                "output: {dir: " + dir.string() + ", plots: false}\n";
    tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {dir / ("run" + micro), false, true});
    t.fit();
    return t.step_losses();
  };
  auto whole = run("8"), micro = run("3");
  ASSERT_EQ(whole.size(), micro.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(micro[i], whole[i], 1e-5 * std::abs(whole[i])) << i;
}

// Without plugins, AdamW gets L's gradient as the batch's rows (FusedAdamW::dense_rows);
// with a plugin (which may read .grad) it is the dense n x k tensor. Same semantics, so the
// fitted parameters must be bitwise identical — and the row form must really be in use.
TEST(TopicTraining, RowGradientsTrainBitwiseLikeDenseGradients) {
  struct Observer : tt::Plugin {
    bool* saw_dense;
    explicit Observer(bool* d) : saw_dense(d) {}
    void on(tt::Event e, tt::State& s) override {
      if (e != tt::Event::BEFORE_STEP) return;
      for (const auto& p : s.model->parameters())
        if (p.grad().defined() && p.grad().is_sparse()) *saw_dense = false;
    }
  };
  auto run = [](bool with_plugin, bool* saw_dense) {
    auto out = tt::test::temp_dir("topic");
    tt::Trainer t(pipe(out, {"trainer.epochs=3", "model.defer_updates=false"}), {out / "run", false, true});
    if (with_plugin) t.add_plugin(std::make_unique<Observer>(saw_dense));
    t.fit();
    return std::make_pair(tt::read_npy(out / "run" / "L.npy"), tt::read_npy(out / "run" / "F.npy"));
  };
  bool dense_seen = true;
  auto rows = run(false, nullptr);
  auto dense = run(true, &dense_seen);
  EXPECT_TRUE(dense_seen) << "a plugin must see dense gradients";
  EXPECT_TRUE(torch::equal(rows.first, dense.first));
  EXPECT_TRUE(torch::equal(rows.second, dense.second));
  // and the row form is what the optimizer got without plugins (the model's fused step off):
  // its gradient bytes are B rows
  auto out = tt::test::temp_dir("topic");
  tt::Trainer t(pipe(out, {"trainer.max_steps=2", "model.fused_step=false"}), {out / "run", false, true});
  t.fit();
  auto s = tt::test::summary_of(out / "run");
  const int64_t grad_bytes = s["memory"]["gradients_bytes"].get<int64_t>();
  EXPECT_LT(grad_bytes, 64 * 4 * 4 + 4 * 50 * 4) << "L's gradient should be 16 rows, not 64";
}

// The model's fused step (the default without plugins) is the autograd path's arithmetic in the
// same order: the same parameters bitwise and the same step losses, with L's rows deferred or
// dense — and it is the path taken: no gradient tensors exist, where the autograd path has them.
TEST(TopicTraining, FusedStepTrainsBitwiseLikeAutogradAndTheOptimizer) {
  auto run = [](std::vector<std::string> sets) {
    auto out = tt::test::temp_dir("topic");
    sets.push_back("trainer.epochs=6");
    tt::Trainer t(pipe(out, sets), {out / "run", false, true});
    t.fit();
    auto s = tt::test::summary_of(out / "run");
    return std::make_tuple(tt::read_npy(out / "run" / "L.npy"), tt::read_npy(out / "run" / "F.npy"), t.step_losses(),
                           s["memory"]["gradients_bytes"].get<int64_t>());
  };
  for (const char* defer : {"true", "false"}) {
    const std::string d = std::string("model.defer_updates=") + defer;
    auto [L0, F0, loss0, grads0] = run({d, "model.fused_step=false"});
    auto [L1, F1, loss1, grads1] = run({d});
    EXPECT_GT(grads0, 0) << d;
    EXPECT_EQ(grads1, 0) << d << ": the fused step builds no gradient tensor";
    EXPECT_TRUE(torch::equal(L0, L1)) << d;
    EXPECT_TRUE(torch::equal(F0, F1)) << d;
    ASSERT_EQ(loss0.size(), loss1.size());
    EXPECT_EQ(loss0, loss1) << d;
    ASSERT_EQ(loss0.size(), 24u);  // 4 batches an epoch
    const double first = loss0[0] + loss0[1] + loss0[2] + loss0[3], last = loss0[20] + loss0[21] + loss0[22] + loss0[23];
    EXPECT_GT(first, last * 1.02) << d << ": the runs compared must have learned";
  }
  // a plugin (which may read gradients) or gradient clipping take the autograd path, whatever the option says
  auto [L2, F2, loss2, grads2] = run({"trainer.grad_clip=1.0e6"});
  EXPECT_GT(grads2, 0);
}

// The default defers the absent rows' zero-gradient updates (FusedAdamW::defer_rows): the
// same training to float rounding, checkpoints included (a resumed deferred run matches too).
TEST(TopicTraining, DeferredRowUpdatesTrainLikeDenseOnes) {
  auto run = [](std::vector<std::string> sets) {
    auto out = tt::test::temp_dir("topic");
    sets.push_back("trainer.epochs=4");
    tt::Trainer t(pipe(out, sets), {out / "run", false, true});
    t.fit();
    return std::make_tuple(tt::read_npy(out / "run" / "L.npy"), tt::read_npy(out / "run" / "F.npy"), t.step_losses());
  };
  auto [L0, F0, loss0] = run({"model.defer_updates=false"});
  auto [L1, F1, loss1] = run({});
  EXPECT_FALSE(torch::equal(L0, L1)) << "deferred updates should round differently somewhere";
  EXPECT_LT((L0 - L1).abs().max().item<double>(), 1e-5);
  EXPECT_LT((F0 - F1).abs().max().item<double>(), 1e-5);
  ASSERT_EQ(loss0.size(), loss1.size());
  for (size_t i = 0; i < loss0.size(); ++i) EXPECT_NEAR(loss1[i], loss0[i], 1e-5 * std::abs(loss0[i])) << i;
}

// The deferred path must not allocate AdamW's state in the model's forward (catching rows up
// before the first step), where the meter would count it as activations: the breakdown shows it
// as optimizer state, two moments per parameter, with or without deferral.
TEST(TopicTraining, DeferredRowUpdatesCountTheirStateAsOptimizerState) {
  auto memory = [](std::vector<std::string> sets) {
    auto out = tt::test::temp_dir("topic");
    sets.push_back("trainer.max_steps=3");
    tt::Trainer t(pipe(out, sets), {out / "run", false, true});
    t.fit();
    return tt::test::summary_of(out / "run")["memory"];
  };
  for (const char* defer : {"true", "false"}) {
    // 4000 documents: L (4000 x 8) is most of the parameters, the batch's tensors are small
    const auto m = memory({std::string("model.defer_updates=") + defer, "data.n_docs=4000", "model.k=8"});
    const int64_t params = m["parameters_bytes"].get<int64_t>();
    EXPECT_EQ(m["optimizer_state_bytes"].get<int64_t>(), 2 * params) << "defer_updates=" << defer;
    EXPECT_LT(m["activations_bytes"].get<int64_t>(), params / 4) << "defer_updates=" << defer;
  }
}

// A deferred run restarted from a mid-run checkpoint: the checkpoint holds the caught-up
// (dense) state, so the resumed run goes on from the same values as the uninterrupted one
// and ends equal to float rounding (bitwise resume needs model.defer_updates: false).
TEST(TopicTraining, DeferredRowUpdatesResumeToRounding) {
  auto out = tt::test::temp_dir("topic");
  const std::vector<std::string> sets{"trainer.max_steps=20", "trainer.checkpoint_every=6", "trainer.keep_checkpoints=10"};
  tt::Trainer straight(pipe(out, sets), {out / "straight", false, true});
  straight.fit();
  // crash after step 12: drop the newer checkpoints, resume from step 12
  for (const auto& c : tt::list_checkpoints(out / "straight" / "checkpoints"))
    if (c.filename().string() > "step-00000012.pt") std::filesystem::remove(c);
  std::filesystem::copy(out / "straight", out / "resumed", std::filesystem::copy_options::recursive);
  tt::Trainer resumed(tt::Trainer::pipeline_of_run(out / "resumed", {}), {out / "resumed", true, true});
  resumed.fit();
  const auto& a = straight.step_losses();
  const auto& b = resumed.step_losses();
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(b[i], a[12 + i], 1e-6 * std::abs(a[12 + i])) << "step " << 13 + i;
  auto La = tt::read_npy(out / "straight" / "L.npy"), Lb = tt::read_npy(out / "resumed" / "L.npy");
  EXPECT_LT((La - Lb).abs().max().item<double>(), 1e-6);
}

// trainer.grad_clip is torch's clip_grad_norm_ between BEFORE_STEP and the optimizer step:
// metrics.jsonl's grad_norm is the total 2-norm of the gradients before clipping (what
// clip_grad_norm_ returns); over the limit every gradient is scaled by max_norm / (norm + 1e-6),
// under it none changes; plain SGD then moves each parameter by -lr times the clipped gradient.
TEST(TopicTraining, GradClipScalesTheGradientsToTheLimitAndReportsTheirNorm) {
  struct Step {
    std::vector<torch::Tensor> params_before, grads_before, params_after, grads_after;
  };
  struct Capture : tt::Plugin {
    std::vector<Step>* steps;
    explicit Capture(std::vector<Step>* s) : steps(s) {}
    static std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& ts, bool grads) {
      std::vector<torch::Tensor> out;
      for (const auto& t : ts) out.push_back((grads ? t.grad() : t).detach().clone());
      return out;
    }
    void on(tt::Event e, tt::State& s) override {
      if (e == tt::Event::BEFORE_STEP) {
        steps->emplace_back();
        steps->back().params_before = clones(s.model->parameters(), false);
        steps->back().grads_before = clones(s.model->parameters(), true);
      } else if (e == tt::Event::AFTER_STEP) {
        steps->back().params_after = clones(s.model->parameters(), false);
        steps->back().grads_after = clones(s.model->parameters(), true);
      }
    }
  };
  auto run = [](const std::string& clip, std::vector<Step>* steps) {
    auto out = tt::test::temp_dir("topic");
    tt::Trainer t(pipe(out, {"trainer.max_steps=6", "trainer.grad_clip=" + clip, "optimizer.name=sgd", "optimizer.lr=0.05",
                               "optimizer.weight_decay=0"}),
                  {out / "run", false, true});
    t.add_plugin(std::make_unique<Capture>(steps));
    t.fit();
    return step_lines(out / "run" / "metrics.jsonl");
  };
  for (const double clip : {2.0, 1e9}) {
    std::vector<Step> steps;
    const auto lines = run(clip == 2.0 ? "2" : "1.0e9", &steps);
    ASSERT_EQ(lines.size(), 6u);
    ASSERT_EQ(steps.size(), 6u);
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      ASSERT_TRUE(lines[i].contains("grad_norm")) << lines[i].dump();
      double sq = 0;
      for (const auto& g : st.grads_before) {
        ASSERT_FALSE(g.is_sparse());
        sq += g.to(torch::kDouble).pow(2).sum().item<double>();
      }
      const double norm = std::sqrt(sq), reported = lines[i]["grad_norm"].get<double>();
      EXPECT_NEAR(reported, norm, 1e-5 * norm) << "clip " << clip << ", step " << i + 1;
      const double coef = clip / (norm + 1e-6);
      if (clip == 2.0) {
        ASSERT_GT(norm, 2 * clip) << "the limit should clip at step " << i + 1;
      }
      double sq_after = 0;
      const double lr = lines[i]["lr"].get<double>();
      for (size_t j = 0; j < st.grads_before.size(); ++j) {
        const torch::Tensor& g = st.grads_before[j];
        const torch::Tensor& clipped = st.grads_after[j];
        if (coef < 1) {
          const torch::Tensor expected = g.to(torch::kDouble) * coef;
          EXPECT_LT((clipped.to(torch::kDouble) - expected).abs().max().item<double>(),
                    1e-6 * expected.abs().max().item<double>() + 1e-12)
              << "parameter " << j << ", step " << i + 1;
        } else {
          EXPECT_TRUE(torch::equal(clipped, g)) << "under the limit: parameter " << j << ", step " << i + 1;
        }
        sq_after += clipped.to(torch::kDouble).pow(2).sum().item<double>();
        // SGD without momentum: p <- p - lr * clipped gradient
        EXPECT_TRUE(torch::equal(st.params_after[j], st.params_before[j].add(clipped, -lr)))
            << "parameter " << j << ", step " << i + 1;
      }
      EXPECT_NEAR(std::sqrt(sq_after), std::min(norm, clip), 1e-5 * std::min(norm, clip)) << "step " << i + 1;
    }
  }
}

// A text corpus names F's columns and L's rows: vocab.txt (one term a line, F's column order),
// F.csv under a header of those terms, and, for tsv, doc_ids.txt in L's row order.
TEST(TopicTraining, TextCorpusWritesTheVocabularyFsHeaderAndTheDocumentIds) {
  auto dir = tt::test::temp_dir("topic");
  {
    std::ofstream corpus(dir / "docs.tsv");
    const char* words[] = {"apple", "banana", "cherry", "dates", "elder", "figs"};
    for (int d = 0; d < 8; ++d) {
      corpus << "doc" << d << "\tlabel\t";
      for (int w = 0; w < 6; ++w) corpus << words[(d + w * (d % 2 + 1)) % 6] << ' ';
      corpus << '\n';
    }
  }
  auto yaml = "data: {name: topic-text, format: tsv, path: " + (dir / "docs.tsv").string() +
              "}\nmodel: {name: topic, k: 2}\ntrainer: {batch_size: 4, max_steps: 2, threads: 1, progress: off}\n" +
              "output: {dir: " + dir.string() + ", plots: false}\n";
  tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {dir / "run", false, true});
  t.fit();
  const auto run = dir / "run";
  EXPECT_EQ(tt::test::read_file(run / "vocab.txt"), "apple\nbanana\ncherry\ndates\nelder\nfigs\n");
  std::ifstream f_csv(run / "F.csv");
  std::vector<std::string> lines;
  for (std::string l; std::getline(f_csv, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);  // the header, then k rows
  EXPECT_EQ(lines[0], "apple,banana,cherry,dates,elder,figs");
  EXPECT_EQ(std::count(lines[1].begin(), lines[1].end(), ','), 5);
  EXPECT_EQ(tt::read_npy(run / "F.npy").size(1), 6);
  EXPECT_EQ(tt::test::read_file(run / "doc_ids.txt"), "doc0\ndoc1\ndoc2\ndoc3\ndoc4\ndoc5\ndoc6\ndoc7\n");
}
