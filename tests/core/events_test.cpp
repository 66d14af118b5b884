// Event order (YAML order; AFTER_* and *_END first-in-last-out) and what plugins may do.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_support.h"
#include "tt/error.h"
#include "tt/meter.h"
#include "tt/plugin.h"
#include "tt/state.h"
#include "tt/trainer.h"

using tt::Event;
using tt::test::OnEvent;

namespace {

using Log = std::vector<std::string>;

class Recorder : public tt::Plugin {
 public:
  Recorder(std::string tag, Log* log) : tag_(std::move(tag)), log_(log) {}
  void on(Event e, tt::State&) override { log_->push_back(tag_ + ":" + tt::to_string(e)); }
  std::unique_ptr<tt::Scope> forward_scope(tt::State&) override {
    struct S : tt::Scope {
      S(std::string t, Log* l) : t_(std::move(t)), l_(l) { l_->push_back(t_ + ":enter"); }
      ~S() override { l_->push_back(t_ + ":exit"); }
      std::string t_;
      Log* l_;
    };
    return std::make_unique<S>(tag_, log_);
  }

 private:
  std::string tag_;
  Log* log_;
};


tt::Pipeline tiny(const std::filesystem::path& out, const std::string& trainer_extra,
                  const std::vector<std::string>& overrides = {}) {
  return tt::parse_pipeline(tt::test::topic_yaml(out, trainer_extra), "p.yaml", overrides);
}

}  // namespace

TEST(Events, OrderIsYamlOrderAndAfterEventsReverse) {
  auto out = tt::test::temp_dir("events");
  Log log;
  tt::Trainer t(tiny(out, "  max_steps: 1\n  micro_batch_size: 8\n"), {out / "run", false, true});
  t.add_plugin(std::make_unique<Recorder>("A", &log));
  t.add_plugin(std::make_unique<Recorder>("B", &log));
  t.fit();
  const Log micro = {"A:BEFORE_FORWARD", "B:BEFORE_FORWARD", "A:enter",  "B:enter",           "B:exit",           "A:exit",
                     "B:AFTER_FORWARD",  "A:AFTER_FORWARD", "B:AFTER_LOSS", "A:AFTER_LOSS",  "A:BEFORE_BACKWARD",
                     "B:BEFORE_BACKWARD", "B:AFTER_BACKWARD", "A:AFTER_BACKWARD"};
  Log expected = {"A:INIT", "B:INIT", "A:OPTIMIZER", "B:OPTIMIZER", "A:FIT_START", "B:FIT_START",
                  "A:EPOCH_START", "B:EPOCH_START", "A:BATCH_START", "B:BATCH_START"};
  for (int i = 0; i < 2; ++i) expected.insert(expected.end(), micro.begin(), micro.end());  // 2 micro-batches
  // The final checkpoint (CHECKPOINT, in list order), then FIT_END.
  for (const char* e : {"A:BEFORE_STEP", "B:BEFORE_STEP", "B:AFTER_STEP", "A:AFTER_STEP", "B:BATCH_END",
                        "A:BATCH_END", "A:CHECKPOINT", "B:CHECKPOINT", "B:FIT_END", "A:FIT_END"})
    expected.push_back(e);
  EXPECT_EQ(log, expected);
}

TEST(Events, EpochEventsWrapBatches) {
  auto out = tt::test::temp_dir("events");
  Log log;
  tt::Trainer t(tiny(out, "  epochs: 2\n"), {out / "run", false, true});
  t.add_plugin(std::make_unique<Recorder>("A", &log));
  t.fit();
  Log epochs;  // the epochs' events and each batch's start, in order
  for (const auto& l : log)
    if (l.find("EPOCH") != std::string::npos || l == "A:BATCH_START") epochs.push_back(l);
  Log expected;
  for (int e = 0; e < 2; ++e) {
    expected.push_back("A:EPOCH_START");
    for (int b = 0; b < 4; ++b) expected.push_back("A:BATCH_START");
    expected.push_back("A:EPOCH_END");
  }
  EXPECT_EQ(epochs, expected);
  EXPECT_EQ(t.state().step, 8);  // 64 docs / 16 = 4 batches x 2 epochs
}

TEST(Events, VetoedStepsLeaveParametersUnchanged) {
  auto out = tt::test::temp_dir("events");
  tt::Trainer t(tiny(out, "  max_steps: 3\n"), {out / "run", false, true});
  std::vector<torch::Tensor> before;
  t.add_plugin(std::make_unique<OnEvent>(Event::FIT_START, [&](tt::State& s) {
    for (const auto& p : s.model->parameters()) before.push_back(p.detach().clone());
  }));
  t.add_plugin(std::make_unique<OnEvent>(Event::BEFORE_STEP, [](tt::State& s) { s.skip_step = true; }));
  t.fit();
  auto after = tt::test::params_of(t);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i]));
  EXPECT_NE(tt::test::read_file(out / "run" / "summary.json").find("\"skipped_steps\": 3"), std::string::npos);
}

TEST(Events, LossTransformReachesTheGradients) {
  // Doubling the loss at AFTER_LOSS doubles every gradient.
  auto grads_with = [](double factor) {
    auto out = tt::test::temp_dir("events");
    tt::Trainer t(tiny(out, "  max_steps: 1\n"), {out / "run", false, true});
    std::vector<torch::Tensor> g;
    t.add_plugin(std::make_unique<OnEvent>(Event::AFTER_LOSS, [factor](tt::State& s) { s.loss = s.loss * factor; }));
    t.add_plugin(std::make_unique<OnEvent>(Event::BEFORE_STEP, [&g](tt::State& s) {
      for (const auto& p : s.model->parameters()) g.push_back(p.grad().clone());
    }));
    t.fit();
    return g;
  };
  auto g1 = grads_with(1.0), g2 = grads_with(2.0);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_TRUE(torch::allclose(g2[i], 2 * g1[i], 1e-6, 0));
}

TEST(Events, PluginCanReplaceTheOptimizer) {
  auto run = [](bool replace) {
    auto out = tt::test::temp_dir("events");
    std::vector<std::string> ov;
    if (!replace) ov = {"optimizer={name: sgd, lr: 0.1}"};
    tt::Trainer t(tiny(out, "  max_steps: 2\n", ov), {out / "run", false, true});
    if (replace)
      t.add_plugin(std::make_unique<OnEvent>(Event::OPTIMIZER, [](tt::State& s) {
        std::vector<torch::Tensor> params;
        for (auto& g : s.optimizer->param_groups())
          for (auto& p : g.params()) params.push_back(p);
        s.optimizer = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
      }));
    t.fit();
    return tt::test::params_of(t);
  };
  auto a = run(true), b = run(false);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
}

TEST(Events, OomHandlerCanShrinkTheMicroBatchAndRetry) {
  tt::test::register_test_components();
  auto out = tt::test::temp_dir("events");
  // Wide documents so that activations dominate: a 16-row micro-batch needs far more than a 4-row one.
  // The reference (dense autograd) loss keeps b x m activations, so memory grows with the micro-batch.
  // No prefetching: the next batch would be resident (or not) depending on thread timing.
  const std::vector<std::string> wide = {"data.n_terms=20000", "trainer.max_steps=2", "model.fused=false",
                                         "model.corpus_loss=false", "trainer.prefetch=false"};
  auto peak_with = [&](int micro) {
    auto o = tt::test::temp_dir("events");
    auto ov = wide;
    ov.push_back("trainer.micro_batch_size=" + std::to_string(micro));
    tt::Trainer t(tiny(o, "", ov), {o / "run", false, true});
    t.fit();
    return std::make_pair(t.memory().peak_tensor, t.step_losses());
  };
  auto [peak16, losses16] = peak_with(16);
  auto [peak4, losses4] = peak_with(4);
  ASSERT_GT(peak16, peak4 + (1 << 20));
  const int64_t cap = (peak16 + peak4) / 2;
  auto ov = wide;
  ov.push_back("trainer.memory_cap=" + std::to_string(cap));
  {  // without a handler: a clear out-of-memory error
    tt::Trainer t(tiny(out, "", ov), {out / "run1", false, true});
    try {
      t.fit();
      FAIL() << "expected out of memory";
    } catch (const tt::OutOfMemory& e) {
      EXPECT_NE(std::string(e.what()).find("out of memory at step 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("oom-guard"), std::string::npos);
    }
  }
  int ooms = 0;
  tt::Trainer t(tiny(out, "", ov), {out / "run2", false, true});
  t.add_plugin(std::make_unique<OnEvent>(Event::OOM, [&](tt::State& s) {
    ++ooms;
    s.micro_batch_size = std::max<int64_t>(1, s.micro_batch_size / 2);
    s.retry_batch = true;
  }));
  t.fit();
  tt::Meter::global().set_cap(0);
  EXPECT_GE(ooms, 1);
  EXPECT_LT(t.state().micro_batch_size, 16);
  ASSERT_EQ(t.step_losses().size(), losses16.size());
  for (size_t i = 0; i < losses16.size(); ++i) EXPECT_NEAR(t.step_losses()[i], losses16[i], 1e-5 * losses16[i]);
  EXPECT_LE(t.memory().peak_tensor, cap);
}
