// The plugin host and the built-in callbacks: evaluation and checkpoint events, metrics from
// plugins' evaluation handlers, failures attributed to their plugin, declared ordering.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/plugin.h"
#include "tt/state.h"
#include "tt/trainer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using tt::Event;
using tt::test::OnEvent;

namespace {



std::vector<json> lines_of(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST(Host, EvaluationEventsWrapTheEvaluationAndPluginMetricsReachTheFiles) {
  auto out = tt::test::temp_dir("host");
  tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 4\n  eval_every: 2\n"), {out / "run", false, true});
  std::vector<std::string> seen;
  auto record = [&](Event e) {
    t.add_plugin(std::make_unique<OnEvent>(e, [&seen, e](tt::State& s) {
      seen.push_back(std::string(tt::to_string(e)) + "@" + std::to_string(s.step));
    }));
  };
  for (Event e : {Event::BATCH_END, Event::BEFORE_EVAL, Event::EVAL, Event::AFTER_EVAL}) record(e);
  // An EMA-like plugin: sees the model's metrics on EVAL and adds its own.
  double model_loss_seen = -1;
  t.add_plugin(std::make_unique<OnEvent>(Event::EVAL, [&](tt::State& s) {
    model_loss_seen = s.metrics.at("val_loss");
    s.metrics["ema_loss"] = 0.25 * s.step;
  }));
  t.fit();
  const std::vector<std::string> expected = {"BATCH_END@1", "BATCH_END@2",  "BEFORE_EVAL@2", "EVAL@2",
                                             "AFTER_EVAL@2", "BATCH_END@3", "BATCH_END@4",   "BEFORE_EVAL@4",
                                             "EVAL@4",       "AFTER_EVAL@4"};
  EXPECT_EQ(seen, expected);  // the final evaluation at step 4 is the periodic one, not run twice
  std::vector<json> evals;
  for (const auto& l : lines_of(out / "run" / "metrics.jsonl"))
    if (l.contains("ema_loss")) evals.push_back(l);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0]["step"], 2);
  EXPECT_DOUBLE_EQ(evals[0]["ema_loss"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(evals[1]["ema_loss"].get<double>(), 1.0);
  EXPECT_TRUE(evals[1].contains("val_loss"));  // the model's validation loss on the same line
  EXPECT_DOUBLE_EQ(evals[1]["val_loss"].get<double>(), model_loss_seen);
  const json summary = tt::test::summary_of(out / "run");
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_DOUBLE_EQ(summary["validation"]["ema_loss"].get<double>(), 1.0);
}

TEST(Host, CheckpointEventComesBeforeTheCheckpointIsWritten) {
  auto out = tt::test::temp_dir("host");
  tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 5\n  checkpoint_every: 2\n  keep_checkpoints: 0\n"),
                {out / "run", false, true});
  std::vector<std::pair<int64_t, bool>> at;  // step, whether its file existed when the event fired
  t.add_plugin(std::make_unique<OnEvent>(Event::CHECKPOINT, [&](tt::State& s) {
    at.emplace_back(s.step, fs::exists(tt::checkpoint_path(s.run_dir / "checkpoints", s.step)));
  }));
  t.fit();
  // every 2 steps, and the final step 5
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[0], std::make_pair(int64_t{2}, false));
  EXPECT_EQ(at[1], std::make_pair(int64_t{4}, false));
  EXPECT_EQ(at[2], std::make_pair(int64_t{5}, false));
  for (int step : {2, 4, 5}) EXPECT_TRUE(fs::exists(tt::checkpoint_path(out / "run" / "checkpoints", step)));
}

TEST(Host, PluginFailureNamesPluginEventAndStepInTheErrorTheLogAndTheSummary) {
  struct Case {
    Event event;
    std::function<void()> fail;
    std::string expect_start, expect_cause;
    int exit_code;
  };
  const std::vector<Case> cases = {
      {Event::AFTER_STEP, [] { throw std::runtime_error("a std error"); },
       "plugin 'boom' failed in AFTER_STEP at step 2: ", "a std error", 1},
      {Event::BEFORE_STEP,
       [] { (void)torch::mm(torch::ones({2, 3}), torch::ones({2, 3})); },  // a c10::Error from LibTorch
       "plugin 'boom' failed in BEFORE_STEP at step 2: ", "mat1 and mat2 shapes cannot be multiplied", 1},
      {Event::BATCH_END, [] { TT_FAIL_AS(ConfigError, "plugins.boom: bad option"); },
       "plugin 'boom' failed in BATCH_END at step 2: ", "plugins.boom: bad option", 2},
  };
  for (const auto& c : cases) {
    auto out = tt::test::temp_dir("host");
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 4\n"), {out / "run", false, true});
    auto boom = std::make_unique<OnEvent>(c.event, [&](tt::State& s) {
      if (s.step + (c.event == Event::BEFORE_STEP ? 1 : 0) == 2) c.fail();
    });
    boom->set_name("boom");
    t.add_plugin(std::move(boom));
    std::string message;
    int code = 0;
    try {
      t.fit();
    } catch (const tt::Error& e) {
      message = e.what();
      code = e.exit_code();
    }
    EXPECT_EQ(message.rfind(c.expect_start, 0), 0u) << message;
    EXPECT_NE(message.find(c.expect_cause), std::string::npos) << message;
    EXPECT_EQ(code, c.exit_code) << message;
    EXPECT_NE(tt::test::read_file(out / "run" / "log.txt").find(c.expect_start), std::string::npos);
    const json summary = tt::test::summary_of(out / "run");
    EXPECT_EQ(summary["status"], "failed");
    EXPECT_EQ(summary["exit_code"], c.exit_code);
    EXPECT_EQ(summary["error"].get<std::string>().rfind(c.expect_start, 0), 0u);
    EXPECT_EQ(summary["steps"], c.event == Event::BEFORE_STEP ? 1 : 2);
  }
}

namespace {
class After : public tt::Plugin {
 public:
  After(std::string me, std::string other) {
    set_name(std::move(me));
    must_come_after(std::move(other), "it needs the other's work");
  }
};
class Wrapper : public tt::Plugin {
 public:
  Wrapper() {
    set_name("wrapper");
    must_wrap_the_final_optimizer("it wraps the optimizer it is given");
  }
  void on(Event e, tt::State& s) override {
    if (e == Event::OPTIMIZER) wrapped = s.optimizer.get();
  }
  const void* wrapped = nullptr;
};
class Replacer : public tt::Plugin {
 public:
  Replacer() { set_name("replacer"); }
  void on(Event e, tt::State& s) override {
    if (e != Event::OPTIMIZER) return;
    std::vector<torch::Tensor> params;
    for (auto& g : s.optimizer->param_groups())
      for (auto& p : g.params()) params.push_back(p);
    s.optimizer = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
    made = s.optimizer.get();
  }
  const void* made = nullptr;  // the optimizer it put in place
};
// A replacer that declares it (as adam8bit does), so the order is checked when the pipeline is read.
class DeclaredReplacer : public Replacer {
 public:
  explicit DeclaredReplacer(const std::string& name) {
    set_name(name);
    replaces_the_optimizer();
  }
};
std::string fit_error(tt::Trainer& t) {
  return tt::test::refusal_of([&] { t.fit(); });
}
}  // namespace

namespace {
// A plugin that runs on one kind of device only.
class OnlyOn : public tt::Plugin {
 public:
  explicit OnlyOn(const std::string& device) {
    set_name("only-" + device);
    runs_only_on(device, "it needs one");
  }
};
}  // namespace

// runs_only_on is checked against trainer.device before INIT, and takes only "cpu" or "cuda".
TEST(Host, APluginThatRunsOnlyOnOneKindOfDeviceIsRefusedOnTheOther) {
  auto out = tt::test::temp_dir("host-device");
  {
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "a", false, true});
    t.add_plugin(std::make_unique<OnlyOn>("cuda"));
    EXPECT_EQ(fit_error(t), "plugins: 'only-cuda' runs only on CUDA (it needs one), and trainer.device is cpu: set "
                            "trainer.device: cuda, or change or remove 'only-cuda'");
    EXPECT_EQ(t.state().step, 0);
  }
  {  // the other kind trains
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "b", false, true});
    t.add_plugin(std::make_unique<OnlyOn>("cpu"));
    EXPECT_EQ(fit_error(t), "");
    EXPECT_EQ(t.state().step, 1);
  }
  std::string bad;
  try {
    OnlyOn("gpu");
  } catch (const tt::Error& e) {
    bad = e.what();
  }
  EXPECT_EQ(bad, "plugin 'only-gpu': runs_only_on takes \"cpu\" or \"cuda\", got 'gpu'");
}

TEST(Host, DeclaredOrderingIsCheckedWithOneMessageFormat) {
  auto out = tt::test::temp_dir("host");
  {
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "a", false, true});
    t.add_plugin(std::make_unique<After>("late", "early"));
    t.add_plugin(std::make_unique<After>("early", "nobody"));
    EXPECT_EQ(fit_error(t), "plugins: 'late' must be listed after 'early' (it needs the other's work), but the list is "
                            "[late, early]");
  }
  {  // the right order trains
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "b", false, true});
    t.add_plugin(std::make_unique<After>("early", "nobody"));
    t.add_plugin(std::make_unique<After>("late", "early"));
    EXPECT_EQ(fit_error(t), "");
    EXPECT_EQ(t.state().step, 1);
  }
  {  // two plugins that each declare an optimizer of their own: the later would discard the earlier's
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "two", false, true});
    t.add_plugin(std::make_unique<DeclaredReplacer>("in-backward"));
    t.add_plugin(std::make_unique<Wrapper>());
    t.add_plugin(std::make_unique<DeclaredReplacer>("eight-bit"));
    EXPECT_EQ(fit_error(t), "plugins: 'in-backward' and 'eight-bit' both replace the optimizer with one of their own, "
                            "and the later would discard the earlier's: list one of them, but the list is "
                            "[in-backward, wrapper, eight-bit]");
  }
  // two that each wrap the final optimizer (zero1 and offload) cannot both come after the other:
  // one refusal in either order, where each order's message used to ask for the other order
  for (const bool swapped : {false, true}) {
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / (swapped ? "w2" : "w1"), false, true});
    auto second = std::make_unique<Wrapper>();
    second->set_name("second");
    if (swapped) t.add_plugin(std::move(second));
    t.add_plugin(std::make_unique<Wrapper>());
    if (!swapped) t.add_plugin(std::move(second));
    EXPECT_EQ(fit_error(t), swapped ? "plugins: 'second' and 'wrapper' both wrap the final optimizer (it wraps the "
                                      "optimizer it is given; it wraps the optimizer it is given), and neither wraps "
                                      "the other's: they cannot be combined, list one of them (the list is "
                                      "[second, wrapper])"
                                    : "plugins: 'wrapper' and 'second' both wrap the final optimizer (it wraps the "
                                      "optimizer it is given; it wraps the optimizer it is given), and neither wraps "
                                      "the other's: they cannot be combined, list one of them (the list is "
                                      "[wrapper, second])");
  }
  {  // a wrapper listed before a plugin that replaces the optimizer
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "c", false, true});
    t.add_plugin(std::make_unique<Wrapper>());
    t.add_plugin(std::make_unique<Replacer>());
    EXPECT_EQ(fit_error(t), "plugins: 'wrapper' must be listed after 'replacer' (it wraps the optimizer it is given; "
                            "'replacer' replaces the optimizer), but the list is [wrapper, replacer]");
  }
  {  // after it, the wrapper gets the replaced optimizer
    tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 1\n"), {out / "d", false, true});
    auto rp = std::make_unique<Replacer>();
    const Replacer* replacer = rp.get();
    t.add_plugin(std::move(rp));
    auto w = std::make_unique<Wrapper>();
    const Wrapper* wrapper = w.get();
    t.add_plugin(std::move(w));
    EXPECT_EQ(fit_error(t), "");
    ASSERT_NE(replacer->made, nullptr);
    EXPECT_EQ(replacer->made, static_cast<const void*>(t.state().optimizer.get()));
    EXPECT_EQ(wrapper->wrapped, replacer->made);
    // the run says whose optimizer it trained with, and estimates no state for the pipeline's
    EXPECT_HAS(tt::test::read_file(out / "d" / "log.txt"), "sgd optimizer as replaced or wrapped by replacer,");
    const json summary = tt::test::summary_of(out / "d");
    EXPECT_FALSE(summary["memory_estimate"].contains("optimizer_state_bytes")) << summary["memory_estimate"];
    EXPECT_EQ(summary["memory_estimate"]["plugins_not_counted"], json::parse(R"(["replacer", "wrapper"])"));
    // the whole process's peak RSS beside the training loop's, never below it
    EXPECT_GE(summary["memory"]["process_peak_rss_bytes"].get<int64_t>(),
              summary["memory"]["peak_rss_bytes"].get<int64_t>());
  }
}
