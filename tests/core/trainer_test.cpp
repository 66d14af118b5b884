// Gradient accumulation, bitwise resume, atomic checkpoints, NaN handling, outputs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/extension.h"
#include "tt/plugin.h"
#include "tt/report.h"
#include "tt/runtime.h"
#include "tt/state.h"
#include "tt/trainer.h"

namespace fs = std::filesystem;
using tt::Event;

namespace {

class GradCapture : public tt::Plugin {
 public:
  explicit GradCapture(std::vector<torch::Tensor>* out) : out_(out) {}
  void on(Event e, tt::State& s) override {
    if (e != Event::BEFORE_STEP || !out_->empty()) return;
    for (const auto& p : s.model->parameters()) out_->push_back(p.grad().clone());
  }

 private:
  std::vector<torch::Tensor>* out_;
};

class StopAt : public tt::Plugin {
 public:
  explicit StopAt(int64_t step) : step_(step) {}
  void on(Event e, tt::State& s) override {
    if (e == Event::AFTER_STEP && s.step == step_) tt::request_interrupt();
  }

 private:
  int64_t step_;
};

// Fails the run (a tt::Error) after step `step`.
class FailAt : public tt::Plugin {
 public:
  explicit FailAt(int64_t step) : step_(step) {}
  void on(Event e, tt::State& s) override {
    if (e == Event::AFTER_STEP && s.step == step_) TT_FAIL("a failure at step ", s.step, " (test)");
  }

 private:
  int64_t step_;
};

// Requests an interrupt when the run sets up (INIT): as a Ctrl-C during set-up.
class InterruptInSetup : public tt::Plugin {
 public:
  void on(Event e, tt::State&) override {
    if (e == Event::INIT) tt::request_interrupt();
  }
};

std::vector<torch::Tensor> first_step_grads(const std::string& yaml, const std::vector<std::string>& overrides) {
  auto out = tt::test::temp_dir("accum");
  auto p = tt::parse_pipeline(yaml, "p.yaml", overrides);
  tt::Trainer t(p, {out / "run", false, true});
  std::vector<torch::Tensor> g;
  t.add_plugin(std::make_unique<GradCapture>(&g));
  t.fit();
  return g;
}

double max_rel_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double scale = std::max(1e-12, a[i].abs().max().item<double>());
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

}  // namespace

TEST(Trainer, AccumulatedGradientEqualsFullBatchGradient_SumLoss) {
  const std::string yaml = tt::test::topic_yaml(tt::test::temp_dir("accum"), "  max_steps: 1\n");
  auto full = first_step_grads(yaml, {});
  for (const char* micro : {"1", "4", "5"}) {  // 5 leaves a remainder micro-batch of 1
    auto acc = first_step_grads(yaml, {std::string("trainer.micro_batch_size=") + micro});
    ASSERT_EQ(acc.size(), full.size());
    EXPECT_LE(max_rel_diff(full, acc), 1e-6) << "micro_batch_size " << micro;
  }
}

TEST(Trainer, AccumulatedGradientEqualsFullBatchGradient_MeanLoss) {
  tt::test::register_test_components();
  const std::string yaml =
      "model: test-regression\ndata: {name: test-regression-data, n: 64}\noptimizer: sgd\n"
      "trainer: {batch_size: 24, max_steps: 1, threads: 1, progress: off}\noutput: {plots: false}\n";
  auto full = first_step_grads(yaml, {});
  auto acc = first_step_grads(yaml, {"trainer.micro_batch_size=7"});  // 7+7+7+3
  EXPECT_LE(max_rel_diff(full, acc), 1e-6);
}

TEST(Trainer, ResumeIsBitwiseIdentical) {
  auto out = tt::test::temp_dir("resume");
  // 10 steps over 4-batch epochs; the interrupted run stops at step 6, in the middle of epoch 2.
  // (the topic model's deferred row updates resume to float rounding, not bitwise: off here;
  // TopicTraining.DeferredRowUpdatesResumeToRounding covers them)
  std::string yaml = tt::test::topic_yaml(out, "  max_steps: 10\n");
  yaml.replace(yaml.find("k: 4}"), 5, "k: 4, defer_updates: false}");
  yaml.replace(yaml.find("plots: false"), 12, "plots: true");
  tt::Trainer straight(tt::parse_pipeline(yaml, "p.yaml"), {out / "straight", false, true});
  straight.fit();

  tt::Trainer first(tt::parse_pipeline(yaml, "p.yaml"), {out / "split", false, true});
  first.add_plugin(std::make_unique<StopAt>(6));
  EXPECT_THROW(first.fit(), tt::Interrupted);
  tt::clear_interrupt();
  auto ckpts = tt::list_checkpoints(out / "split" / "checkpoints");
  ASSERT_EQ(ckpts.size(), 1u);
  EXPECT_EQ(ckpts[0].filename(), "step-00000006.pt");

  tt::Trainer resumed(tt::Trainer::pipeline_of_run(out / "split", {}), {out / "split", true, true});
  resumed.add_plugin(std::make_unique<StopAt>(-1));  // same plugin list as the interrupted run
  resumed.fit();
  std::vector<double> joined = first.step_losses();
  joined.insert(joined.end(), resumed.step_losses().begin(), resumed.step_losses().end());
  ASSERT_EQ(joined.size(), straight.step_losses().size());
  for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], straight.step_losses()[i]) << "step " << i + 1;
  auto a = tt::test::params_of(straight), b = tt::test::params_of(resumed);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  EXPECT_EQ(resumed.state().lr, straight.state().lr);
  // metrics.jsonl has each step once, and a line where the resume began
  std::string metrics = tt::test::read_file(out / "split" / "metrics.jsonl");
  EXPECT_EQ(metrics.find("\"step\":7,"), metrics.rfind("\"step\":7,"));
  int resumes = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("resumed")) continue;
    ++resumes;
    EXPECT_EQ(j["step"], 6) << line;
    EXPECT_LT(metrics.find(line), metrics.find("\"step\":7,")) << "the resume's line is not before its first step's";
  }
  EXPECT_EQ(resumes, 1) << metrics;
  // resumed again from the same checkpoint: the new resume's line takes the place of the first's
  const fs::path again = out / "again.jsonl";
  tt::write_file_atomic(again, metrics);
  {
    tt::MetricsFile f;
    f.open(again, 6);
    f.write("{\"resumed\":true,\"step\":6,\"time\":2}");
  }
  const std::string twice = tt::test::read_file(again);
  EXPECT_EQ(twice.find("\"resumed\""), twice.rfind("\"resumed\"")) << twice;
  EXPECT_HAS(twice, "\"time\":2}");
  EXPECT_EQ(twice.find("\"step\":7,"), std::string::npos) << twice;
  // and the loss plot's data every step from the first (it began at the resumed step, 7)
  EXPECT_EQ(tt::test::read_file(out / "split" / "loss.dat"), tt::test::read_file(out / "straight" / "loss.dat"));
  EXPECT_EQ(tt::test::read_file(out / "split" / "loss.dat").rfind("1 ", 0), 0u);
}

// The topic model's loss is summed over the batch's documents (as tinytopics'): loss.png draws it
// per example, so an epoch's smaller last batch (64 documents in batches of 24: 16) does not
// dip; loss.dat keeps the loss and adds that, from metrics.jsonl's "examples"; a mean-reduced
// loss (the test-regression model's) is drawn as it is.
TEST(Trainer, ALossSummedOverTheBatchIsPlottedPerExample) {
  auto out = tt::test::temp_dir("per_example");
  std::string yaml = tt::test::topic_yaml(out, "  max_steps: 6\n");
  yaml.replace(yaml.find("batch_size: 16"), 14, "batch_size: 24");
  yaml.replace(yaml.find("plots: false"), 12, "plots: true");
  tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {out / "topic", false, true});
  t.fit();
  std::map<int64_t, int64_t> examples;
  for (const auto& line : tt::test::step_lines(out / "topic" / "metrics.jsonl")) {
    const auto j = nlohmann::json::parse(line);
    examples[j["step"].get<int64_t>()] = j["examples"].get<int64_t>();
  }
  EXPECT_EQ(examples, (std::map<int64_t, int64_t>{{1, 24}, {2, 24}, {3, 16}, {4, 24}, {5, 24}, {6, 16}}));
  std::istringstream dat(tt::test::read_file(out / "topic" / "loss.dat"));
  int rows = 0;
  for (int64_t step; dat >> step;) {
    double loss = 0, per_example = 0;
    dat >> loss >> per_example;
    ++rows;
    EXPECT_NEAR(loss, t.step_losses()[step - 1], 1e-5 * loss) << "step " << step;  // 6 digits
    EXPECT_NEAR(per_example, loss / examples[step], 1e-4 * per_example) << "step " << step;
  }
  EXPECT_EQ(rows, 6);
  // the short batches' summed loss is about 16/24 of the others', per example alike
  EXPECT_LT(t.step_losses()[2], 0.8 * t.step_losses()[1]);

  tt::test::register_test_components();
  tt::Trainer mean(tt::parse_pipeline("model: test-regression\ndata: {name: test-regression-data, n: 32}\noptimizer: sgd\n"
                                      "trainer: {batch_size: 8, max_steps: 3, threads: 1, progress: off}\n"
                                      "output: {plots: true}\n",
                                      "p.yaml"),
                   {out / "mean", false, true});
  mean.fit();
  std::istringstream lines(tt::test::read_file(out / "mean" / "loss.dat"));
  std::string first;
  ASSERT_TRUE(std::getline(lines, first)) << "no loss.dat";
  EXPECT_EQ(std::count(first.begin(), first.end(), ' '), 1) << first << ": a mean loss is drawn as it is";
}

// A resumed run's summary gives the optimizer state the uninterrupted run's does: counted from
// the state the checkpoint brought (torch's SGD with momentum, Adam and AdamW here; adam8bit's
// test covers an optimizer implementing tt::StateTensors), not from what its first step added.
TEST(Trainer, AResumedRunReportsTheOptimizerStateOfTheUninterruptedOne) {
  tt::test::register_test_components();
  for (const auto& [optimizer, bytes] : std::vector<std::pair<std::string, int64_t>>{
           {"{name: sgd, lr: 0.05, momentum: 0.9}", 9 * 4},  // the momentum buffers
           {"{name: adam, lr: 0.01}", 2 * 9 * 4},             // exp_avg and exp_avg_sq
           {"{name: adamw, lr: 0.01}", 2 * 9 * 4}}) {
    const auto out = tt::test::temp_dir("resume_state");
    const std::string yaml = "name: reg\nmodel: test-regression\ndata: test-regression-data\noptimizer: " + optimizer +
                             "\ntrainer: {batch_size: 16, max_steps: 6, threads: 1, progress: off}\noutput: {plots: false}\n";
    tt::Trainer straight(tt::parse_pipeline(yaml, "p.yaml"), {out / "straight", false, true});
    straight.fit();
    tt::Trainer first(tt::parse_pipeline(yaml, "p.yaml"), {out / "split", false, true});
    first.add_plugin(std::make_unique<StopAt>(3));
    EXPECT_THROW(first.fit(), tt::Interrupted) << optimizer;
    tt::clear_interrupt();
    tt::Trainer resumed(tt::Trainer::pipeline_of_run(out / "split", {}), {out / "split", true, true});
    resumed.add_plugin(std::make_unique<StopAt>(-1));
    resumed.fit();
    const auto memory = [](const fs::path& dir) {
      return tt::test::summary_of(dir)["memory"];
    };
    EXPECT_EQ(memory(out / "straight")["optimizer_state_bytes"].get<int64_t>(), bytes) << optimizer;
    EXPECT_EQ(memory(out / "split")["optimizer_state_bytes"].get<int64_t>(), bytes) << optimizer;
    EXPECT_EQ(resumed.step_losses().size(), 3u) << optimizer;
  }
}

// The summary of a run stopped in training (an interrupt, a failure) reports the training loop's
// CPU time, page faults and peaks up to where it stopped: they were taken at the loop's end only,
// and a stopped run reported them as negative differences from zero.
TEST(Trainer, AStoppedRunsSummaryMeasuresTheTrainingUpToTheStop) {
  const auto out = tt::test::temp_dir("stopped_figures");
  for (const bool interrupt : {true, false}) {
    const fs::path dir = out / (interrupt ? "interrupted" : "failed");
    tt::Trainer t(tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 6\n"), "p.yaml"), {dir, false, true});
    if (interrupt)
      t.add_plugin(std::make_unique<StopAt>(3));
    else
      t.add_plugin(std::make_unique<FailAt>(3));
    EXPECT_ANY_THROW(t.fit());
    tt::clear_interrupt();
    const auto s = tt::test::summary_of(dir);
    ASSERT_EQ(s["status"], interrupt ? "interrupted" : "failed") << s.dump(2);
    const auto& p = s["process"];
    EXPECT_GT(p["user_cpu_seconds"].get<double>() + p["system_cpu_seconds"].get<double>(), 0.0) << p.dump();
    for (const char* k : {"user_cpu_seconds", "system_cpu_seconds", "minor_page_faults", "major_page_faults"})
      EXPECT_GE(p[k].get<double>(), 0.0) << k << ": " << p.dump();
    EXPECT_GT(s["train_seconds"].get<double>(), 0.0) << s.dump(2);
    EXPECT_GT(s["memory"]["peak_tensor_bytes"].get<int64_t>(), 0) << s["memory"].dump(2);
    EXPECT_GT(s["memory"]["rss_anon_end_bytes"].get<int64_t>(), 0) << s["memory"].dump(2);
  }
}

// A hook a plugin adds (a loss hook, a gradient-ready hook) that throws is reported as that
// plugin's failure, as its event handlers are; a loss hook's error was blamed on the model's
// forward. What the hook's `next` throws (the model) is not the plugin's.
class ThrowingHooks : public tt::Plugin {
 public:
  explicit ThrowingHooks(std::string which) : which_(std::move(which)) {}
  void on(Event e, tt::State& s) override {
    if (e != Event::INIT) return;
    if (which_ == "loss")
      tt::add_loss_hook(s, [&s](const tt::Batch& micro, const std::function<tt::ModelOutput(const tt::Batch&)>& next) {
        if (s.step + 1 == 2) throw std::runtime_error("the hook's own failure");
        return next(micro);
      });
    else
      tt::add_gradient_ready_hook(s, [&s](size_t, at::Tensor&) {
        if (s.step + 1 == 2) throw std::runtime_error("the hook's own failure");
      });
  }

 private:
  std::string which_;
};

TEST(Trainer, AHookThatThrowsIsReportedAsItsPluginsFailure) {
  const auto out = tt::test::temp_dir("hook_failure");
  for (const std::string which : {"loss", "gradient-ready"}) {
    tt::Trainer t(tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 3\n"), "p.yaml"), {out / which, false, true});
    auto plugin = std::make_unique<ThrowingHooks>(which);
    plugin->set_name("hooks");
    t.add_plugin(std::move(plugin));
    std::string e = "no error";
    try {
      t.fit();
    } catch (const tt::Error& error) {
      e = error.what();
    }
    EXPECT_HAS(e, "plugin 'hooks' failed in its " + which + " hook at step 2: the hook's own failure");
    EXPECT_EQ(e.find("forward at step"), std::string::npos) << e;
  }
}

// A resume of a completed run trains nothing; overrides given to it (other than a longer
// training) change nothing, and the log says so rather than taking them silently.
TEST(Trainer, OverridesOnAResumeOfACompletedRunAreSaidToChangeNothing) {
  const auto out = tt::test::temp_dir("resume_complete");
  const fs::path dir = out / "run";
  tt::Trainer(tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 2\n"), "p.yaml"), {dir, false, true}).fit();
  tt::Trainer again(tt::Trainer::pipeline_of_run(dir, {"trainer.batch_size=8"}), {dir, true, true});
  testing::internal::CaptureStderr();
  again.fit();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_HAS(said, "is complete at step 2 (of 2); nothing to train");
  EXPECT_HAS(said, "the overrides trainer.batch_size=8 train nothing: the run is complete");
}

// A resume refused for its overrides (a model that does not fit the checkpoint) is a
// configuration error and changes nothing: pipeline.yaml and summary.json stay as they were, so
// the run still resumes as it was made.
TEST(Trainer, AResumeRefusedForItsOverridesLeavesTheRunAsItWas) {
  const auto out = tt::test::temp_dir("resume_refused");
  const fs::path dir = out / "run";
  tt::Trainer first(tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 6\n"), "p.yaml"), {dir, false, true});
  first.add_plugin(std::make_unique<StopAt>(3));
  EXPECT_THROW(first.fit(), tt::Interrupted);
  tt::clear_interrupt();
  const std::string pipeline = tt::test::read_file(dir / "pipeline.yaml"), summary = tt::test::read_file(dir / "summary.json");
  ASSERT_NE(pipeline.find("k: 4"), std::string::npos) << pipeline;
  ASSERT_EQ(tt::test::summary_of(dir)["status"], "interrupted");

  tt::Trainer refused(tt::Trainer::pipeline_of_run(dir, {"model.k=5"}), {dir, true, true});
  refused.add_plugin(std::make_unique<StopAt>(-1));
  try {
    refused.fit();
    ADD_FAILURE() << "a resume with model.k=5 of a k=4 run was accepted";
  } catch (const tt::ConfigError& e) {
    EXPECT_HAS(e.what(), "does not fit the model of this pipeline");
    EXPECT_EQ(e.exit_code(), 2);
  }
  EXPECT_EQ(tt::test::read_file(dir / "pipeline.yaml"), pipeline);
  EXPECT_EQ(tt::test::read_file(dir / "summary.json"), summary);

  tt::Trainer resumed(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
  resumed.add_plugin(std::make_unique<StopAt>(-1));
  resumed.fit();
  EXPECT_EQ(resumed.step_losses().size(), 3u);
  EXPECT_EQ(tt::test::summary_of(dir)["status"], "completed");

  // A resume of the completed run stopped during its set-up (after the checkpoint loaded)
  // trained nothing: the summary stays the completed run's.
  const std::string completed = tt::test::read_file(dir / "summary.json"),
                    resolved = tt::test::read_file(dir / "pipeline.yaml");
  tt::Trainer stopped(tt::Trainer::pipeline_of_run(dir, {"trainer.max_steps=8"}), {dir, true, true});
  stopped.add_plugin(std::make_unique<InterruptInSetup>());
  EXPECT_THROW(stopped.fit(), tt::Interrupted);
  tt::clear_interrupt();
  EXPECT_EQ(tt::test::read_file(dir / "summary.json"), completed);
  EXPECT_EQ(tt::test::read_file(dir / "pipeline.yaml"), resolved) << "max_steps 8 written by a resume that trained nothing";
}

// A run stopped after its last step, before its outputs were written (Ctrl-C then, or a kill
// while it evaluated or wrote them), is finished by a resume: the model's outputs and a completed
// summary, with the training process's memory figures where its summary has them. A resume of
// the finished run then leaves it as it is.
TEST(Trainer, AResumeOfARunTrainedToTheEndWritesTheOutputsItMissed) {
  for (const bool summary_lost : {false, true}) {
    const auto out = tt::test::temp_dir("resume_outputs");
    const fs::path dir = out / "run";
    tt::Trainer first(tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 4\n"), "p.yaml"), {dir, false, true});
    first.add_plugin(std::make_unique<StopAt>(4));  // the last step
    EXPECT_THROW(first.fit(), tt::Interrupted);
    tt::clear_interrupt();
    EXPECT_FALSE(fs::exists(dir / "L.npy"));
    const auto interrupted = tt::test::summary_of(dir);
    ASSERT_EQ(interrupted["status"], "interrupted");
    // an interrupted run's summary has the peaks of its steps so far (0 when they were set only
    // after the training loop)
    ASSERT_GT(interrupted["memory"]["peak_tensor_bytes"].get<int64_t>(), 0);
    ASSERT_GT(interrupted["memory"]["peak_rss_bytes"].get<int64_t>(), 0);
    if (summary_lost) fs::remove(dir / "summary.json");

    tt::Trainer resumed(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
    resumed.add_plugin(std::make_unique<StopAt>(-1));
    resumed.fit();
    EXPECT_TRUE(resumed.step_losses().empty()) << summary_lost;
    for (const char* f : {"L.npy", "F.npy", "top_terms.txt"}) EXPECT_TRUE(fs::exists(dir / f)) << f << " " << summary_lost;
    const auto done = tt::test::summary_of(dir);
    EXPECT_EQ(done["status"], "completed") << summary_lost;
    EXPECT_EQ(done["steps"], 4);
    EXPECT_EQ(done["steps_this_run"], 0);
    EXPECT_EQ(done["outputs_only"], true);
    if (summary_lost) {  // what this process held: the model, its optimizer state; no step measured
      EXPECT_GT(done["memory"]["peak_tensor_bytes"].get<int64_t>(), 0);
      EXPECT_EQ(done["memory"]["parameters_bytes"], interrupted["memory"]["parameters_bytes"]);
      for (const char* k : {"final_loss", "median_step_seconds", "steps_per_second"}) EXPECT_FALSE(done.contains(k)) << k;
    } else {  // the stopped run's
      EXPECT_EQ(done["memory"], interrupted["memory"]);
      for (const char* k : {"final_loss", "median_step_seconds", "steps_per_second", "train_seconds"})
        EXPECT_EQ(done[k], interrupted[k]) << k;
      // measured by the stopped run up to its interrupt, not 0
      for (const char* k : {"final_loss", "steps_per_second", "train_seconds"}) EXPECT_GT(done[k].get<double>(), 0) << k;
    }

    const std::string finished = tt::test::read_file(dir / "summary.json");
    tt::Trainer again(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
    again.add_plugin(std::make_unique<StopAt>(-1));
    again.fit();
    EXPECT_EQ(tt::test::read_file(dir / "summary.json"), finished) << summary_lost;
  }
}

// Ctrl-C after the last step (here as its final checkpoint is written) stops before the outputs,
// as it stops between them: the run ends interrupted (exit 130 from tt-run) with its checkpoint
// at the last step and no model output, and its resume writes them. It used to write every
// output and end as completed after the user had asked it to stop.
class InterruptAtCheckpoint : public tt::Plugin {
 public:
  explicit InterruptAtCheckpoint(bool armed) : armed_(armed) {}
  void on(Event e, tt::State&) override {
    if (e == Event::CHECKPOINT && armed_) tt::request_interrupt();
  }

 private:
  bool armed_;
};

TEST(Trainer, CtrlCAfterTheLastStepStopsBeforeTheOutputsAndAResumeWritesThem) {
  const auto out = tt::test::temp_dir("stop_outputs");
  const fs::path dir = out / "run";
  tt::Trainer first(tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 4\n"), "p.yaml"), {dir, false, true});
  first.add_plugin(std::make_unique<InterruptAtCheckpoint>(true));
  std::string what;
  try {
    first.fit();
  } catch (const tt::Interrupted& e) {
    what = e.what();
    EXPECT_EQ(e.exit_code(), 130);
  }
  tt::clear_interrupt();
  EXPECT_HAS(what, "interrupted after the last step (4, checkpoint written), before its outputs");
  EXPECT_HAS(what, "--resume " + dir.string() + " to write them");
  EXPECT_FALSE(fs::exists(dir / "L.npy"));
  EXPECT_EQ(tt::list_checkpoints(dir / "checkpoints"),
            std::vector<fs::path>{tt::checkpoint_path(dir / "checkpoints", 4)});
  EXPECT_EQ(tt::test::summary_of(dir)["status"], "interrupted");

  tt::Trainer resumed(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
  resumed.add_plugin(std::make_unique<InterruptAtCheckpoint>(false));  // the plugins the checkpoint has
  resumed.fit();
  EXPECT_TRUE(resumed.step_losses().empty());
  for (const char* f : {"L.npy", "F.npy", "top_terms.txt"}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  const auto done = tt::test::summary_of(dir);
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["outputs_only"], true);
}

// A run stopped in its set-up wrote no checkpoint: --resume starts it from step 0 (it used to
// fail with "no checkpoint to resume from") and it trains as an uninterrupted run does; one that
// trained steps and has none is refused, whether its summary or its metrics say it trained. A run
// whose weights came from model.init_from resumes from its checkpoint without that source
// (it used to need the file though every weight is in the checkpoint).
TEST(Trainer, AResumeOfADirectoryThatIsNoRunNamesTheRunsMeant) {
  const auto out = tt::test::temp_dir("resume_which");
  const auto now = fs::file_time_type::clock::now();
  int age = 4;  // minutes: the runs were started in the order their names say
  for (const char* run : {"lm-big-20260101-000000", "lmx-20260101-000000", "lm-20260101-000000", "lm-20260102-000000"}) {
    fs::create_directories(out / "runs" / run);
    tt::test::write_text(out / "runs" / run / "pipeline.yaml", "name: lm\n");
    fs::last_write_time(out / "runs" / run / "pipeline.yaml", now - std::chrono::minutes(age--));
  }
  fs::create_directories(out / "runs" / "lm-notes");  // no pipeline.yaml: no run
  const auto refusal = [](const fs::path& dir) {
    return tt::test::config_error([&] { tt::Trainer::pipeline_of_run(dir, {}); });
  };
  // The name without its start time: the runs of that name, the newest last.
  const std::string base = (out / "runs").string();
  EXPECT_HAS(refusal(out / "runs" / "lm"), base + "/lm: no such directory; the runs of that name: " + base +
                                               "/lm-20260101-000000, " + base + "/lm-20260102-000000: give one of them");
  // The directory of the runs: the runs in it.
  const std::string all = refusal(out / "runs");
  EXPECT_HAS(all, base + " is not a tt run directory (no pipeline.yaml); the runs in it: ");
  EXPECT_HAS(all, "lmx-20260101-000000");
  EXPECT_EQ(all.find("lm-notes"), std::string::npos) << all;
  EXPECT_EQ(refusal(out / "runs" / "lm").find("lm-big"), std::string::npos) << "another run's name";
  EXPECT_HAS(refusal(out / "runs" / "lm/"), "lm-20260102-000000: give one of them");  // a trailing slash
  // A file: --resume takes a directory.
  tt::test::write_text(out / "runs" / "notes.txt", "x");
  EXPECT_HAS(refusal(out / "runs" / "notes.txt"), "notes.txt is a file: --resume takes a run's directory");
  // Nothing near: the plain refusal.
  const std::string none = refusal(out / "other");
  EXPECT_HAS(none, "other: no such directory");
  EXPECT_EQ(none.find("runs of that name"), std::string::npos) << none;
}

TEST(Trainer, AResumeWithoutACheckpointStartsFromStepZeroAndAResumeNeedsNoInitFrom) {
  const auto out = tt::test::temp_dir("resume_none");
  const std::string yaml = tt::test::topic_yaml(out, "  max_steps: 6\n");
  tt::Trainer whole(tt::parse_pipeline(yaml, "p.yaml"), {out / "whole", false, true});
  whole.fit();

  const fs::path dir = out / "run";
  tt::Trainer stopped(tt::parse_pipeline(yaml, "p.yaml"), {dir, false, true});
  stopped.add_plugin(std::make_unique<InterruptInSetup>());
  EXPECT_THROW(stopped.fit(), tt::Interrupted);
  tt::clear_interrupt();
  ASSERT_TRUE(tt::list_checkpoints(dir / "checkpoints").empty());
  tt::Trainer resumed(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
  resumed.add_plugin(std::make_unique<StopAt>(-1));
  resumed.fit();
  EXPECT_EQ(resumed.step_losses(), whole.step_losses());
  const auto summary = tt::test::summary_of(dir);
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["steps"], 6);
  EXPECT_FALSE(summary.contains("resumed_from"));
  // A run that trained and then lost its checkpoints is not trained again over its results.
  const std::string completed = tt::test::read_file(dir / "summary.json");
  for (const auto& f : tt::list_checkpoints(dir / "checkpoints")) fs::remove(f);
  tt::Trainer lost(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
  const std::string lost_refusal = tt::test::config_error([&] { lost.fit(); });
  EXPECT_HAS(lost_refusal, "holds no checkpoint, but its summary.json says it trained 6 steps");
  EXPECT_HAS(lost_refusal, "--overwrite");
  EXPECT_EQ(tt::test::read_file(dir / "summary.json"), completed);
  // Nor one killed before it wrote its summary and its first checkpoint (the interrupt's grace
  // ran out in an evaluation): its metrics.jsonl has the steps it trained.
  fs::rename(dir / "summary.json", out / "completed.json");
  tt::Trainer killed(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
  const std::string killed_refusal = tt::test::config_error([&] { killed.fit(); });
  EXPECT_HAS(killed_refusal, "holds no checkpoint, but its metrics.jsonl shows it trained 6 steps before it ended "
                             "without a summary");
  EXPECT_HAS(killed_refusal, "--overwrite");
  EXPECT_FALSE(fs::exists(dir / "summary.json"));

  // One that trains no steps, stopped in its set-up: its resume runs it as the first time would
  // have (it took the path of a trained run that missed its outputs: "outputs_only").
  const fs::path none = out / "none";
  tt::Trainer unstarted(tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 0\n"), "p.yaml"), {none, false, true});
  unstarted.add_plugin(std::make_unique<InterruptInSetup>());
  EXPECT_THROW(unstarted.fit(), tt::Interrupted);
  tt::clear_interrupt();
  tt::Trainer evaluated(tt::Trainer::pipeline_of_run(none, {}), {none, true, true});
  evaluated.add_plugin(std::make_unique<StopAt>(-1));
  evaluated.fit();
  const auto none_summary = tt::test::summary_of(none);
  EXPECT_EQ(none_summary["status"], "completed");
  EXPECT_FALSE(none_summary.contains("outputs_only"));
  EXPECT_TRUE(fs::exists(none / "L.npy"));

  // A run fine-tuned from `whole`, then `whole` removed: its resume reads its own checkpoint.
  const fs::path tuned = out / "tuned";
  tt::Trainer from(tt::parse_pipeline(yaml, "p.yaml", {"model.init_from=" + (out / "whole").string(),
                                                       "trainer.max_steps=4"}),
                   {tuned, false, true});
  from.add_plugin(std::make_unique<StopAt>(2));
  EXPECT_THROW(from.fit(), tt::Interrupted);
  tt::clear_interrupt();
  fs::remove_all(out / "whole");
  tt::Trainer continued(tt::Trainer::pipeline_of_run(tuned, {}), {tuned, true, true});
  continued.add_plugin(std::make_unique<StopAt>(-1));
  continued.fit();
  EXPECT_EQ(continued.step_losses().size(), 2u);
  EXPECT_EQ(tt::test::summary_of(tuned)["status"], "completed");
  EXPECT_HAS(tt::test::read_file(tuned / "log.txt"),
             "model.init_from (" + (out / "whole").string() + ") is gone; the run resumes without it");

  // A run that failed before its first checkpoint is not trained again over its record either:
  // the refusal says why it has none.
  const fs::path failed = out / "failed";
  tt::Trainer failing(tt::parse_pipeline(yaml, "p.yaml"), {failed, false, true});
  failing.add_plugin(std::make_unique<FailAt>(3));
  EXPECT_THROW(failing.fit(), tt::Error);
  ASSERT_EQ(tt::test::summary_of(failed)["status"], "failed");
  ASSERT_TRUE(tt::list_checkpoints(failed / "checkpoints").empty());
  tt::Trainer again(tt::Trainer::pipeline_of_run(failed, {}), {failed, true, true});
  const std::string failed_refusal = tt::test::config_error([&] { again.fit(); });
  EXPECT_HAS(failed_refusal, "holds no checkpoint: the run failed at step 3 before its first");
  EXPECT_HAS(failed_refusal, "--overwrite");
  fs::remove_all(out);
}

// A plugin whose state fails to save or load: `how` is "save", "load" (a tt::Error) or "read"
// (another exception, as a damaged archive gives).
class FailingState : public tt::Plugin {
 public:
  explicit FailingState(std::string how) : how_(std::move(how)) {}
  void save_state(torch::serialize::OutputArchive& ar) const override {
    if (how_ == "save") TT_FAIL("cannot save (test)");
    ar.write("x", torch::ones({1}));
  }
  void load_state(torch::serialize::InputArchive&) override {
    if (how_ == "load") TT_FAIL("bad state (test)");
    if (how_ == "read") throw std::runtime_error("bad state (test)");
  }

 private:
  std::string how_;
};

// A plugin's state that cannot be saved or read back is named as that plugin's failure, with
// the checkpoint's step or file, not left to be taken for the trainer's own.
TEST(Trainer, APluginsStateThatFailsToSaveOrLoadIsNamedWithItsCheckpoint) {
  const auto out = tt::test::temp_dir("state_failure");
  std::string extra = "  max_steps: 4\n  checkpoint_every: 2\n";
  auto with = [&](const fs::path& dir, const std::string& how, bool resume) {
    auto p = resume ? tt::Trainer::pipeline_of_run(dir, {"trainer.max_steps=4"})
                    : tt::parse_pipeline(tt::test::topic_yaml(out, extra), "p.yaml");
    auto t = std::make_unique<tt::Trainer>(p, tt::TrainerConfig{dir, resume, true});
    auto plugin = std::make_unique<FailingState>(how);
    plugin->set_name("stateful");
    t->add_plugin(std::move(plugin));
    return t;
  };
  std::string e = "no error";
  try {
    with(out / "save", "save", false)->fit();
  } catch (const tt::Error& error) {
    e = error.what();
  }
  EXPECT_HAS(e, "plugin 'stateful' failed in save_state (the checkpoint of step 2): cannot save (test)");

  const fs::path dir = out / "load";
  extra = "  max_steps: 2\n";  // a complete run, resumed for two more steps
  with(dir, "", false)->fit();
  e = "no error";
  try {
    with(dir, "load", true)->fit();
  } catch (const tt::Error& error) {
    e = error.what();
  }
  EXPECT_HAS(e, "plugin 'stateful' failed in load_state (" + (dir / "checkpoints" / "step-00000002.pt").string() +
                    "): bad state (test)");
  // what is not a tt::Error (a key its version reads that the checkpoint lacks) is the plugin's
  // too: the checkpoint is whole, so no older one is tried and no --overwrite is advised
  testing::internal::CaptureStderr();
  e = "no error";
  int code = 0;
  try {
    with(dir, "read", true)->fit();
  } catch (const tt::Error& error) {
    e = error.what();
    code = error.exit_code();
  }
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_HAS(e, "plugin 'stateful' failed in load_state (" + (dir / "checkpoints" / "step-00000002.pt").string() +
                    "): bad state (test) (its state in the checkpoint is not what this version of the plugin reads");
  EXPECT_EQ(code, 2);
  EXPECT_EQ(said.find("unreadable"), std::string::npos) << said;
  EXPECT_EQ(e.find("--overwrite"), std::string::npos) << e;
}

TEST(Trainer, KeepsTheNewestCheckpoints) {
  auto out = tt::test::temp_dir("ckpt");
  auto p = tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 12\n  checkpoint_every: 2\n  keep_checkpoints: 2\n"),
                              "p.yaml");
  tt::Trainer t(p, {out / "run", false, true});
  t.fit();
  auto ckpts = tt::list_checkpoints(out / "run" / "checkpoints");
  ASSERT_EQ(ckpts.size(), 2u);
  EXPECT_EQ(ckpts[0].filename(), "step-00000010.pt");
  EXPECT_EQ(ckpts[1].filename(), "step-00000012.pt");
}

// A model's own evaluate() runs in eval mode without autograd, as PyTorch users expect of a
// trainer (dropout off, no graph), and training resumes in training mode after it.
TEST(Trainer, EvaluationRunsInEvalModeWithoutGradientsAndTrainingResumesInTrainingMode) {
  tt::test::register_test_components();
  const auto out = tt::test::temp_dir("eval_mode");
  const std::string yaml =
      "model: test-eval-mode\ndata: {name: test-regression-data, n: 32}\noptimizer: sgd\n"
      "trainer: {batch_size: 8, max_steps: 4, eval_every: 2, threads: 1, progress: off}\noutput: {plots: false}\n";
  tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {out / "run", false, true});
  std::vector<bool> training_at_batch;
  t.add_plugin(std::make_unique<tt::test::OnEvent>(
      Event::BATCH_START, [&](tt::State& s) { training_at_batch.push_back(s.model->is_training()); }));
  t.fit();
  const auto validation = tt::test::summary_of(out / "run")["validation"];
  EXPECT_EQ(validation["in_training_mode"], 0.0) << validation;
  EXPECT_EQ(validation["grad_enabled"], 0.0) << validation;
  EXPECT_EQ(training_at_batch, std::vector<bool>(4, true));
}

// Ctrl-C during a periodic evaluation: the evaluation is abandoned at its next batch (AFTER_EVAL
// still fires, to put back what BEFORE_EVAL swapped in; no EVAL, no validation line), the step
// trained is kept in a checkpoint at once, and the resumed run ends as an uninterrupted one.
TEST(Trainer, AnInterruptDuringAPeriodicEvaluationAbandonsItAndKeepsTheStepInACheckpoint) {
  const auto out = tt::test::temp_dir("eval_interrupt");
  const std::string extra = "  max_steps: 6\n  eval_every: 2\n";
  tt::Trainer whole(tt::test::regression_pipeline(out, extra), {out / "whole", false, true});
  whole.fit();
  const fs::path dir = out / "run";
  std::vector<std::string> events;
  tt::Trainer t(tt::test::regression_pipeline(out, extra), {dir, false, true});
  t.add_plugin(std::make_unique<tt::test::OnEvent>(Event::BEFORE_EVAL, [&](tt::State& s) {
    events.push_back("before " + std::to_string(s.step));
    if (s.step == 4) tt::request_interrupt();
  }));
  t.add_plugin(std::make_unique<tt::test::OnEvent>(
      Event::EVAL, [&](tt::State& s) { events.push_back("eval " + std::to_string(s.step)); }));
  t.add_plugin(std::make_unique<tt::test::OnEvent>(
      Event::AFTER_EVAL, [&](tt::State& s) { events.push_back("after " + std::to_string(s.step)); }));
  EXPECT_THROW(t.fit(), tt::Interrupted);
  tt::clear_interrupt();
  EXPECT_EQ(events, (std::vector<std::string>{"before 2", "eval 2", "after 2", "before 4", "after 4"}));
  const auto ckpts = tt::list_checkpoints(dir / "checkpoints");
  ASSERT_EQ(ckpts.size(), 1u);
  EXPECT_EQ(ckpts[0].filename(), "step-00000004.pt");
  EXPECT_HAS(tt::test::read_file(dir / "log.txt"), "the evaluation after step 4 was abandoned: interrupted");
  // a stop that was asked for is a warning in log.txt, not an error
  EXPECT_HAS(tt::test::read_file(dir / "log.txt"), "[warning] interrupted at step 4; checkpoint written.");
  EXPECT_EQ(tt::test::read_file(dir / "log.txt").find("[error]"), std::string::npos) << tt::test::read_file(dir / "log.txt");
  tt::Trainer resumed(tt::Trainer::pipeline_of_run(dir, {}), {dir, true, true});
  for (int i = 0; i < 3; ++i)  // the same plugins (a checkpoint records them)
    resumed.add_plugin(std::make_unique<tt::test::OnEvent>(Event::EVAL, [](tt::State&) {}));
  resumed.fit();
  EXPECT_EQ(tt::test::summary_of(dir)["final_loss"], tt::test::summary_of(out / "whole")["final_loss"]);
  EXPECT_EQ(tt::test::summary_of(dir)["validation"], tt::test::summary_of(out / "whole")["validation"]);
  // Outside a periodic evaluation the loop stops nothing
  tt::request_interrupt();
  EXPECT_NO_THROW(tt::stop_if_interrupted());
  tt::clear_interrupt();
}

// An unfinished run's resume whose trainer.max_steps ends before the step its checkpoint is at
// is refused (it was marked completed, its pipeline.yaml saying fewer steps than it trained).
TEST(Trainer, AnUnfinishedRunsResumeEndingBeforeItsCheckpointsStepIsRefused) {
  const auto out = tt::test::temp_dir("resume_past");
  const fs::path dir = out / "run";
  tt::Trainer first(tt::test::regression_pipeline(out, "  max_steps: 6\n"), {dir, false, true});
  first.fit();
  fs::remove(dir / "summary.json");  // as a run stopped after its last checkpoint leaves it
  tt::Trainer fewer(tt::Trainer::pipeline_of_run(dir, {"trainer.max_steps=4"}), {dir, true, true});
  EXPECT_HAS(tt::test::config_error([&] { fewer.fit(); }),
             "'s checkpoint is at step 6, past the 4 steps this resume would train: resume with trainer.max_steps of at "
             "least 6 (or as it was)");
  EXPECT_FALSE(fs::exists(dir / "summary.json"));
  tt::Trainer same(tt::Trainer::pipeline_of_run(dir, {"trainer.max_steps=6"}), {dir, true, true});
  EXPECT_NO_THROW(same.fit());
  // a completed run's resume trains nothing whatever it asks (a --predict's overrides may shorten it)
  tt::Trainer done(tt::Trainer::pipeline_of_run(dir, {"trainer.max_steps=4"}), {dir, true, true});
  EXPECT_NO_THROW(done.fit());
  EXPECT_EQ(tt::test::summary_of(dir)["steps"], 6);
}

// A loss the trainer cannot step on names the model and what is wrong with it.
TEST(Trainer, ALossThatIsNotAScalarOrHasNoGraphIsNamedForWhatItIs) {
  tt::test::register_test_components();
  const auto out = tt::test::temp_dir("bad_loss");
  for (const auto& [how, expect] : std::vector<std::pair<std::string, std::string>>{
           {"vector", "model (test-bad-loss) returned a loss of shape [8], not a scalar: reduce it"},
           {"detached", "model (test-bad-loss) returned a loss at step 1 that no gradient flows from: it was detached"}}) {
    const std::string yaml = "model: {name: test-bad-loss, how: " + how +
                             "}\ndata: {name: test-regression-data, n: 32}\noptimizer: sgd\n"
                             "trainer: {batch_size: 8, max_steps: 2, threads: 1, progress: off}\noutput: {plots: false}\n";
    tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {out / how, false, true});
    std::string e = "no error";
    try {
      t.fit();
    } catch (const tt::Error& error) {
      e = error.what();
    }
    EXPECT_HAS(e, expect);
  }
}

// LibTorch writes a submodule, parameter or buffer named with a word TorchScript reserves into a
// checkpoint but cannot read it back ("expected ident but found 'in'"): such a model (here what a
// plugin adds at INIT) is refused before its first step, naming the tensor; another name
// ("print", or Python's "lambda", which TorchScript reads) trains and resumes.
TEST(Trainer, AModelPartNamedWithAWordTorchScriptReservesIsRefusedBeforeTraining) {
  tt::test::register_test_components();
  const auto out = tt::test::temp_dir("keyword_names");
  const std::string yaml = "model: test-regression\ndata: {name: test-regression-data, n: 32}\noptimizer: sgd\n"
                           "trainer: {batch_size: 8, max_steps: 2, checkpoint_every: 2, threads: 1, progress: off}\n"
                           "output: {plots: false}\n";
  // the premise, on the LibTorch this is linked with: an archive holding such a name (a module
  // archive nests its submodules') is written and not read back; Python's "lambda" is
  const auto round_trips = [&](const std::string& name) {
    torch::serialize::OutputArchive ar, sub;
    sub.write(name, torch::ones({2}));
    ar.write(name, sub);
    ar.save_to((out / "names.pt").string());
    try {
      torch::serialize::InputArchive in, part;
      in.load_from((out / "names.pt").string());
      at::Tensor t;
      in.read(name, part);
      part.read(name, t);
      return t.sum().item<double>() == 2;
    } catch (const std::exception&) {
      return false;
    }
  };
  for (const char* name : {"in", "None", "def", "__annotations__"}) EXPECT_FALSE(round_trips(name)) << name;
  for (const char* name : {"lambda", "print", "in_"}) EXPECT_TRUE(round_trips(name)) << name;
  const auto fit = [&](const std::string& tag, std::function<void(tt::State&)> add) {
    tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {out / tag, false, true});
    t.add_plugin(std::make_unique<tt::test::OnEvent>(Event::INIT, std::move(add)));
    std::string e = "no error";
    try {
      t.fit();
    } catch (const tt::Error& error) {
      e = error.what();
    }
    return e;
  };
  std::string e = fit("in", [](tt::State& s) { s.model->register_module("in", torch::nn::Linear(1, 1)); });
  EXPECT_HAS(e, "model (test-regression): the parameter 'in.weight' has a part named 'in', a word TorchScript reserves");
  EXPECT_HAS(e, "(e.g. 'in_')");
  EXPECT_TRUE(tt::list_checkpoints(out / "in" / "checkpoints").empty());
  e = fit("none", [](tt::State& s) {
    s.model->named_children()["lin"]->register_buffer("None", torch::zeros({1}));
  });
  EXPECT_HAS(e, "the buffer 'lin.None' has a part named 'None'");
  e = fit("print", [](tt::State& s) {
    s.model->register_module("print", torch::nn::Linear(1, 1));
    s.model->register_buffer("lambda", torch::zeros({1}));
  });
  EXPECT_EQ(e, "no error");
  // and that model's checkpoint reads back: its run resumed for two more steps
  tt::Trainer again(tt::Trainer::pipeline_of_run(out / "print", {"trainer.max_steps=4"}), {out / "print", true, true});
  again.add_plugin(std::make_unique<tt::test::OnEvent>(Event::INIT, [](tt::State& s) {
    s.model->register_module("print", torch::nn::Linear(1, 1));
    s.model->register_buffer("lambda", torch::zeros({1}));
  }));
  EXPECT_NO_THROW(again.fit());
  EXPECT_EQ(tt::test::summary_of(out / "print")["steps"], 4);
}

// A loss a plugin puts in state.loss (AFTER_LOSS, BEFORE_BACKWARD) is checked as the model's is, and
// a micro-batch size a plugin sets must be 1 to the batch size: each refusal names the plugin
// (a division by a zero micro-batch crashed the process; a NaN loss reached the weights).
TEST(Trainer, APluginsLossOrMicroBatchSizeIsCheckedAndARefusalNamesThePlugin) {
  tt::test::register_test_components();
  const auto out = tt::test::temp_dir("plugin_loss");
  const auto run = [&](const std::string& tag, Event e, std::function<void(tt::State&)> f, const std::string& extra = "") {
    const std::string yaml = "model: test-regression\ndata: {name: test-regression-data, n: 32}\noptimizer: sgd\n"
                             "trainer: {batch_size: 8, max_steps: 3, threads: 1, progress: off" + extra + "}\n"
                             "output: {plots: false}\n";
    tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {out / tag, false, true});
    auto p = std::make_unique<tt::test::OnEvent>(e, std::move(f));
    p->set_name("meddler");
    t.add_plugin(std::move(p));
    std::pair<std::string, int> r{"no error", 0};
    try {
      t.fit();
    } catch (const tt::Error& error) {
      r = {error.what(), error.exit_code()};
    }
    return r;
  };
  auto r = run("nan", Event::AFTER_LOSS, [](tt::State& s) { s.loss = s.loss * NAN; });
  EXPECT_HAS(r.first, "plugin 'meddler' replaced the loss at step 1 with one that is nan (the model's was ");
  EXPECT_EQ(r.second, 5);
  r = run("detached", Event::AFTER_LOSS, [](tt::State& s) { s.loss = s.loss.detach(); });
  EXPECT_HAS(r.first, "plugin 'meddler' replaced the loss at step 1 with one that no gradient flows from");
  r = run("vector", Event::BEFORE_BACKWARD, [](tt::State& s) { s.loss = s.loss.expand({3}); });
  EXPECT_HAS(r.first, "plugin 'meddler' replaced the loss at step 1 with one of shape [3], not a scalar");
  r = run("integer", Event::AFTER_LOSS, [](tt::State& s) { s.loss = torch::ones({}, torch::kLong); });
  EXPECT_HAS(r.first, "plugin 'meddler' replaced the loss at step 1 with a tensor of Long, not a floating one");
  r = run("undefined", Event::AFTER_LOSS, [](tt::State& s) { s.loss = at::Tensor(); });
  EXPECT_HAS(r.first, "plugin 'meddler' replaced the loss at step 1 with an undefined tensor");
  // on_nan=skip drops those batches as it drops the model's: the weights never see the NaN
  r = run("skip", Event::AFTER_LOSS, [](tt::State& s) { if (s.step == 1) s.loss = s.loss * NAN; }, ", on_nan: skip");
  EXPECT_EQ(r.first, "no error");
  const auto summary = tt::test::summary_of(out / "skip");
  EXPECT_EQ(summary["skipped_steps"], 1);
  EXPECT_TRUE(std::isfinite(summary["final_loss"].get<double>())) << summary.dump();
  for (int64_t bad : {0, -1, 9}) {
    r = run("micro" + std::to_string(bad), Event::BEFORE_STEP, [bad](tt::State& s) { s.micro_batch_size = bad; });
    EXPECT_HAS(r.first, "plugin 'meddler' failed in BEFORE_STEP at step 1: it set state.micro_batch_size to " +
                            std::to_string(bad) + ", which must be 1 to the batch size (8)");
  }
  r = run("micro4", Event::BEFORE_STEP, [](tt::State& s) { s.micro_batch_size = 4; });  // within: trains
  EXPECT_EQ(r.first, "no error");
  r = run("midbatch", Event::AFTER_BACKWARD, [](tt::State& s) { s.micro_batch_size = 4; });
  EXPECT_HAS(r.first, "plugin 'meddler' failed in AFTER_BACKWARD at step 1: it changed state.micro_batch_size from "
                      "8 to 4 between a batch's micro-steps: change it at BATCH_START, BEFORE_STEP or OOM");
}

// A metric a plugin names as one of the trainer's fields does not replace the trainer's loss in
// metrics.jsonl; a warning says so, once.
TEST(Trainer, APluginsMetricNamedLossLeavesTheTrainersLossInPlace) {
  const auto out = tt::test::temp_dir("metric_loss");
  tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 3\n"), {out / "run", false, true});
  t.add_plugin(std::make_unique<tt::test::OnEvent>(Event::AFTER_STEP, [](tt::State& s) {
    s.metrics["loss"] = 12345;
    s.metrics["mine"] = 7;
  }));
  testing::internal::CaptureStderr();
  t.fit();
  const std::string said = testing::internal::GetCapturedStderr();
  const auto lines = tt::test::step_lines(out / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto line = nlohmann::json::parse(lines[i]);
    EXPECT_DOUBLE_EQ(line["loss"].get<double>(), t.step_losses()[i]) << lines[i];
    EXPECT_EQ(line["mine"], 7) << lines[i];
  }
  const std::string warning = "set state.metrics[\"loss\"], a field of the trainer's own in metrics.jsonl";
  EXPECT_HAS(said, warning);
  EXPECT_EQ(said.find(warning), said.rfind(warning)) << said;
}

// A plugin that ends the fit early (state.stop, as early stopping does) is named in the summary:
// the run completed, but not to its step limit.
TEST(Trainer, AnEarlyStopNamesThePluginThatStoppedTheRun) {
  const auto out = tt::test::temp_dir("early_stop");
  tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 6\n"), {out / "run", false, true});
  auto stopper = std::make_unique<tt::test::OnEvent>(Event::AFTER_STEP, [](tt::State& s) { s.stop = s.step == 2; });
  stopper->set_name("early-stop");
  t.add_plugin(std::move(stopper));
  t.fit();
  const auto summary = tt::test::summary_of(out / "run");
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["steps"], 2);
  EXPECT_EQ(summary["stopped_early_by"], "early-stop");
}

// summary.json's median step leaves the run's first step (its warm-up) out, as compare does: with
// two steps, a slow first one no longer makes the median the mean of both.
TEST(Trainer, TheMedianStepLeavesTheWarmUpStepOut) {
  const auto out = tt::test::temp_dir("median_step");
  tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 2\n"), {out / "run", false, true});
  t.add_plugin(std::make_unique<tt::test::OnEvent>(Event::BATCH_START, [](tt::State& s) {
    if (s.step == 0) std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }));
  t.fit();
  const auto summary = tt::test::summary_of(out / "run");
  const auto lines = tt::test::step_lines(out / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  const double first = nlohmann::json::parse(lines[0])["step_seconds"].get<double>();
  const double second = nlohmann::json::parse(lines[1])["step_seconds"].get<double>();
  EXPECT_GE(first, 0.6);
  EXPECT_LT(second, first);  // so that the median of both is not the second
  EXPECT_DOUBLE_EQ(summary["median_step_seconds"].get<double>(), second);
}

// process_peak_rss_bytes is the process's high-water mark from its start: what set-up touched
// before the training loop started its own peak (clear_refs, which also clears getrusage's
// ru_maxrss) counts in it, not in peak_rss_bytes.
TEST(Trainer, TheProcessPeakRssKeepsWhatSetUpTouchedBeforeTheLoopsOwnPeak) {
  const auto out = tt::test::temp_dir("process_rss");
  tt::Trainer t(tt::test::regression_pipeline(out, "  max_steps: 2\n"), {out / "run", false, true});
  constexpr int64_t kSetUp = int64_t{256} << 20;
  t.add_plugin(std::make_unique<tt::test::OnEvent>(Event::INIT, [](tt::State&) {
    std::vector<char> touched(static_cast<size_t>(kSetUp), 1);  // mapped, written, unmapped when freed
    EXPECT_EQ(touched[touched.size() / 2], 1);
  }));
  t.fit();
  const auto memory = tt::test::summary_of(out / "run")["memory"];
  const int64_t process = memory["process_peak_rss_bytes"].get<int64_t>(), loop = memory["peak_rss_bytes"].get<int64_t>();
  EXPECT_GE(process, kSetUp) << memory;
  EXPECT_LT(loop, process - kSetUp / 2) << memory;  // the loop's own peak started after set-up's
}

// trainer.memory_cap caps the training steps: evaluations, periodic and final alike, are
// measured apart and not capped (a warning says when one went over the cap), and they do not
// raise the training figures.
TEST(Trainer, EvaluationIsMeasuredApartFromTheCappedTrainingSteps) {
  tt::test::register_test_components();
  const auto out = tt::test::temp_dir("eval_cap");
  const std::string yaml = "name: cap\nseed: 1\ndata: {name: test-regression-data}\nmodel: {name: test-big-eval, "
                           "eval_bytes: 4194304}\noptimizer: {name: sgd, lr: 0.05}\ntrainer:\n  batch_size: 16\n  "
                           "threads: 1\n  progress: off\n  max_steps: 3\n  eval_every: 1\n  memory_cap: 1MiB\n"
                           "output:\n  dir: " + out.string() + "\n  plots: false\n";
  tt::Trainer t(tt::parse_pipeline(yaml, "cap.yaml"), {out / "run", false, true});
  testing::internal::CaptureStderr();
  t.fit();
  const std::string said = testing::internal::GetCapturedStderr();
  const auto summary = tt::test::summary_of(out / "run");
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["steps"], 3);
  const auto& m = summary["memory"];
  EXPECT_LT(m["peak_tensor_bytes"].get<int64_t>(), int64_t{1} << 20) << m;
  EXPECT_GE(m["evaluation_peak_tensor_bytes"].get<int64_t>(), int64_t{4} << 20) << m;
  const std::string warning = "evaluation at step 1 peaked at 4.00 MiB of tensors, above the training steps' memory cap "
                              "of 1.00 MiB";
  EXPECT_HAS(said, warning);
  EXPECT_EQ(said.find(warning), said.rfind(warning)) << "warned once";
}

TEST(Trainer, NanLossIsAClearErrorOrSkipped) {
  tt::test::register_test_components();
  auto out = tt::test::temp_dir("nan");
  const std::string yaml =
      "model: test-regression\ndata: {name: test-regression-data, n: 32, nan_at: 5}\noptimizer: sgd\n"
      "trainer: {batch_size: 8, epochs: 1, threads: 1, progress: off, shuffle: false}\noutput: {plots: false}\n";
  tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {out / "a", false, true});
  // NumericError: tt-run's exit 5
  const std::string m = tt::test::message_of<tt::NumericError>([&] { t.fit(); }, "a NumericError");
  EXPECT_HAS(m, "loss is nan at step 1 (epoch 0, batch 0)");
  EXPECT_HAS(m, "trainer.on_nan=skip");
  tt::Trainer s(tt::parse_pipeline(yaml, "p.yaml", {"trainer.on_nan=skip"}), {out / "b", false, true});
  s.fit();
  auto summary = tt::test::summary_of(out / "b");
  EXPECT_EQ(summary["skipped_steps"], 1);
  EXPECT_EQ(summary["dropped_batches"], 1);
  EXPECT_EQ(summary["steps"], 4);
  // The dropped batch has no loss (null), and the epoch's mean is that of the three others:
  // a 0 in its place would pull it down as if the batch had fitted perfectly.
  const auto lines = tt::test::step_lines(out / "b" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_TRUE(first["loss"].is_null()) << lines[0];
  EXPECT_EQ(first["dropped"], true) << lines[0];
  double sum = 0;
  for (size_t i = 1; i < 4; ++i) sum += nlohmann::json::parse(lines[i])["loss"].get<double>();
  EXPECT_DOUBLE_EQ(summary["first_epoch_loss"].get<double>(), sum / 3);
  EXPECT_EQ(summary["final_loss"], nlohmann::json::parse(lines[3])["loss"]);

  // A checkpoint after steps that were all dropped is not written: nothing was learned since, and
  // weights that no longer give a finite loss would push the good ones out (keep_checkpoints).
  tt::Trainer kept(tt::parse_pipeline(yaml, "p.yaml", {"trainer.on_nan=skip", "trainer.checkpoint_every=1",
                                                        "trainer.keep_checkpoints=10"}),
                   {out / "e", false, true});
  kept.fit();
  std::vector<std::string> written;
  for (const auto& f : fs::directory_iterator(out / "e" / "checkpoints")) written.push_back(f.path().filename().string());
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written, (std::vector<std::string>{"step-00000002.pt", "step-00000003.pt", "step-00000004.pt"}));
  // ... but the end's is: a completed run's checkpoint is at its last step, dropped or not
  tt::Trainer last(tt::parse_pipeline(yaml, "p.yaml", {"trainer.on_nan=skip", "trainer.checkpoint_every=1",
                                                        "trainer.keep_checkpoints=10", "data.nan_at=29"}),
                   {out / "h", false, true});
  last.fit();
  EXPECT_EQ(tt::test::summary_of(out / "h")["dropped_batches"], 1);
  EXPECT_TRUE(fs::exists(out / "h" / "checkpoints" / "step-00000004.pt"));
  // With trainer.grad_clip set, the error says to lower it rather than to set it.
  tt::Trainer clipped(tt::parse_pipeline(yaml, "p.yaml", {"trainer.grad_clip=0.5"}), {out / "g", false, true});
  const std::string c = tt::test::message_of<tt::NumericError>([&] { clipped.fit(); }, "a NumericError");
  EXPECT_HAS(c, "Lower optimizer.lr or trainer.grad_clip (0.5)");
  EXPECT_EQ(c.find("set trainer.grad_clip"), std::string::npos) << c;

  // A run whose every step was dropped trained nothing: a numeric error, not "completed".
  tt::Trainer none(tt::parse_pipeline(yaml, "p.yaml", {"trainer.on_nan=skip", "trainer.max_steps=1"}),
                   {out / "c", false, true});
  EXPECT_HAS(tt::test::message_of<tt::NumericError>([&] { none.fit(); }, "a NumericError"),
             "every one of the 1 steps had a loss that is not finite and was dropped");
  EXPECT_EQ(tt::test::summary_of(out / "c")["status"], "failed");

  // Nor one whose weights an update made infinite: every later loss is not finite, and dropping
  // batches cannot undo it (it ended "completed", its exported weights all NaN).
  const std::string clean = "model: test-regression\ndata: {name: test-regression-data, n: 32}\noptimizer: sgd\n"
                            "trainer: {batch_size: 8, epochs: 1, threads: 1, progress: off, shuffle: false}\n"
                            "output: {plots: false}\n";
  tt::Trainer diverged(tt::parse_pipeline(clean, "p.yaml", {"trainer.on_nan=skip", "optimizer.lr=3e38"}),
                       {out / "d", false, true});
  const std::string e = tt::test::message_of<tt::NumericError>([&] { diverged.fit(); }, "a NumericError");
  EXPECT_HAS(e, "loss is ");
  EXPECT_HAS(e, "holds NaN/inf: an earlier step's update made the weights non-finite, which dropping batches "
                "(trainer.on_nan=skip) cannot undo");
  EXPECT_EQ(tt::test::summary_of(out / "d")["status"], "failed");
}

// trainer.checkpoint_minutes: a run without checkpoint_every still checkpoints as it goes (a long
// run that fails loses at most that much), counted from the last checkpoint, not at every step.
TEST(Trainer, ACheckpointIsWrittenOnceCheckpointMinutesPassedSinceTheLast) {
  tt::test::register_test_components();
  auto out = tt::test::temp_dir("ckpt_minutes");
  const std::string yaml =
      "model: test-regression\ndata: {name: test-regression-data, n: 32}\noptimizer: sgd\n"
      "trainer: {batch_size: 8, max_steps: 24, threads: 1, progress: off, keep_checkpoints: 0}\noutput: {plots: false}\n";
  const auto checkpoints_of = [](const fs::path& dir) {
    std::vector<int> steps;
    for (const auto& f : fs::directory_iterator(dir / "checkpoints"))
      steps.push_back(std::stoi(f.path().stem().string().substr(5)));
    std::sort(steps.begin(), steps.end());
    return steps;
  };
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> written;  // the fit's start, then each checkpoint's
  const auto slow_fit = [&](const fs::path& dir, const std::vector<std::string>& overrides, bool resume = false) {
    tt::Trainer t(resume ? tt::Trainer::pipeline_of_run(dir, {}) : tt::parse_pipeline(yaml, "p.yaml", overrides),
                  {dir, resume, !resume});
    t.add_plugin(std::make_unique<tt::test::OnEvent>(
        Event::BATCH_END, [](tt::State&) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }));
    written = {Clock::now()};
    t.add_plugin(std::make_unique<tt::test::OnEvent>(Event::CHECKPOINT, [&](tt::State&) { written.push_back(Clock::now()); }));
    t.fit();
  };
  // 0.3 s between checkpoints, steps of 50 ms or a little more: one every 6 steps or so
  slow_fit(out / "timed", {"trainer.checkpoint_minutes=0.005"});
  const auto timed = checkpoints_of(out / "timed");
  ASSERT_GE(timed.size(), 3u) << "no checkpoint before the end's";
  EXPECT_EQ(timed.back(), 24);
  ASSERT_EQ(written.size(), timed.size() + 1);
  for (size_t i = 1; i + 1 < written.size(); ++i)  // the last is the end's, whenever the one before was
    EXPECT_GE(std::chrono::duration<double>(written[i] - written[i - 1]).count(), 0.3)
        << "checkpoint " << i << " (step " << timed[i - 1] << ") came less than 0.3 s after the one before (or the start)";
  // the default (30 minutes) and 0 (off): only the end's, in a run this short
  slow_fit(out / "default", {});
  EXPECT_EQ(checkpoints_of(out / "default"), std::vector<int>{24});
  EXPECT_HAS(tt::test::read_file(out / "default" / "pipeline.yaml"), "checkpoint_minutes: 30");
  slow_fit(out / "off", {"trainer.checkpoint_minutes=0", "trainer.checkpoint_every=10"});
  EXPECT_EQ(checkpoints_of(out / "off"), (std::vector<int>{10, 20, 24}));
  // a timed checkpoint resumes as any other: the run goes on from it to the same end
  fs::copy(out / "timed", out / "resumed", fs::copy_options::recursive);
  for (int step : timed) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08d.pt", step);
    if (step != timed.front()) fs::remove(out / "resumed" / "checkpoints" / name);
  }
  slow_fit(out / "resumed", {}, /*resume=*/true);
  EXPECT_EQ(tt::test::summary_of(out / "resumed")["final_loss"], tt::test::summary_of(out / "timed")["final_loss"]);
}

// Settings that would change nothing are said before training: a warm-up longer than the run (a
// 10-step run with warmup_steps 500 trained at 2% of optimizer.lr without a word), evaluations of
// data without a validation set. A warm-up shorter than the run says nothing.
TEST(Trainer, SettingsThatWouldChangeNothingInTheRunAreWarnedOf) {
  const auto out = tt::test::temp_dir("unused_settings");
  const auto log_of = [&](const std::string& yaml, const std::string& tag) {
    tt::Trainer t(tt::parse_pipeline(yaml, tag + ".yaml"), {out / tag, false, true});
    t.fit();
    return tt::test::read_file(out / tag / "log.txt");
  };
  const auto with_warmup = [&](const std::string& trainer) {
    std::string yaml = tt::test::topic_yaml(out, trainer);
    const std::string schedule = "schedule: {name: cosine_warm_restarts, t0_epochs: 2, eta_min: 0.01}";
    return yaml.replace(yaml.find(schedule), schedule.size(), "schedule: {name: constant, warmup_steps: 500}");
  };
  const std::string long_warmup = log_of(with_warmup("  max_steps: 10\n"), "long");
  EXPECT_HAS(long_warmup, "schedule (constant): the learning rate never rises above 0.001 (2% of optimizer.lr 0.05) "
                          "in this run's 10 steps: schedule.warmup_steps (500) is not shorter than the run; lower it");
  const std::string short_warmup = log_of(with_warmup("  max_steps: 600\n"), "short");
  EXPECT_EQ(short_warmup.find("never rises"), std::string::npos) << short_warmup;
  // the topic data has no validation set
  const std::string evals = log_of(tt::test::topic_yaml(out, "  max_steps: 4\n  eval_every: 2\n"), "eval");
  EXPECT_HAS(evals,
             "trainer.eval_every is set, but data (topic-synthetic) has no validation set: nothing is evaluated");
  EXPECT_EQ(evals.find("never rises"), std::string::npos) << evals;
}

TEST(Trainer, WritesRunDirectory) {
  tt::test::register_test_components();
  auto out = tt::test::temp_dir("outputs");
  const std::string yaml =
      "name: reg\nmodel: test-regression\ndata: test-regression-data\noptimizer: {name: adam, lr: 0.01}\n"
      "trainer: {batch_size: 16, epochs: 3, eval_every: 4, threads: 1, progress: off}\n"
      "output: {dir: " + out.string() + ", plots: true}\n";
  tt::Trainer t(tt::parse_pipeline(yaml, "p.yaml"), {});
  t.fit();
  const fs::path dir = t.run_dir();
  EXPECT_EQ(dir.parent_path(), out);
  {  // a file the user left in a run directory before its run is not listed among its outputs
    fs::create_directories(out / "own");
    std::ofstream(out / "own" / "notes.txt") << "mine\n";
    fs::last_write_time(out / "own" / "notes.txt", fs::file_time_type::clock::now() - std::chrono::hours(1));
    tt::Trainer own(tt::parse_pipeline(yaml, "p.yaml"), {out / "own", false, true});
    own.fit();
    const auto outputs = tt::test::summary_of(out / "own")["outputs"].dump();
    EXPECT_EQ(outputs.find("notes.txt"), std::string::npos) << outputs;
    EXPECT_HAS(outputs, "metrics.jsonl");
    // the plot where gnuplot is installed (a portable build's machine may have none: its log then)
    EXPECT_HAS(outputs, system("command -v gnuplot >/dev/null") == 0 ? "loss.png" : "gnuplot.log");
  }
  EXPECT_EQ(dir.filename().string().rfind("reg-", 0), 0u);
  for (const char* f : {"pipeline.yaml", "metrics.jsonl", "summary.json", "log.txt"}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  auto summary = tt::test::summary_of(dir);
  EXPECT_EQ(summary["steps"], 12);
  EXPECT_GT(summary["memory"]["peak_tensor_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(summary["memory"]["parameters_bytes"], 9 * 4);
  EXPECT_EQ(summary["memory"]["gradients_bytes"], 9 * 4);
  EXPECT_EQ(summary["memory"]["optimizer_state_bytes"], 2 * 9 * 4);  // Adam: exp_avg + exp_avg_sq
  // the loader's thread built every batch after the first (x: 16 x 8 floats, y: 16)
  EXPECT_GE(summary["memory"]["peak_prefetch_bytes"].get<int64_t>(), 16 * 9 * 4);
  EXPECT_EQ(summary["machine"]["cpu"], tt::cpu_model());
  EXPECT_EQ(summary["machine"]["cores"], tt::usable_cores());
  EXPECT_TRUE(summary.contains("validation"));
  // when the run began and ended, in UTC: ISO 8601, to the second
  const std::string started = summary["started_at"], ended = summary["ended_at"];
  for (const std::string& t : {started, ended}) {
    EXPECT_EQ(t.size(), 20u) << t;
    EXPECT_EQ(t.substr(4, 1) + t.substr(7, 1) + t.substr(10, 1) + t.substr(13, 1) + t.substr(16, 1) + t.substr(19), "--T::Z") << t;
  }
  EXPECT_LE(started, ended);
  const auto epoch_of = [](const std::string& iso) {
    std::tm tm{};
    strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return static_cast<double>(timegm(&tm));
  };
  EXPECT_NEAR(epoch_of(ended) - epoch_of(started), summary["wall_seconds"].get<double>(), 1.0);
  // one metrics line per step with the documented fields, plus eval and epoch lines, each with
  // its wall-clock time (Unix seconds) within the run's, in order
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  int steps = 0, evals = 0, epochs = 0;
  double last_time = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("time")) << line;
    const double t = j["time"].get<double>();
    EXPECT_GE(t, last_time) << line;
    EXPECT_GE(t, epoch_of(started)) << line;
    EXPECT_LT(t, epoch_of(ended) + 1) << line;
    last_time = t;
    if (j.contains("loss")) {
      ++steps;
      for (const char* k : {"step", "epoch", "lr", "step_seconds", "optimizer_seconds", "samples_per_s", "tensor_bytes",
                            "tensor_peak", "rss", "time"})
        EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
    }
    evals += j.contains("val_loss");
    epochs += j.contains("epoch_loss");
  }
  EXPECT_EQ(steps, 12);
  EXPECT_EQ(evals, 3);  // steps 4, 8, 12; the final evaluation at step 12 is not repeated
  EXPECT_EQ(epochs, 3);
  if (system("command -v gnuplot >/dev/null") == 0) {
    EXPECT_TRUE(fs::exists(dir / "loss.png"));
  }
}

// The progress line's rate and ETA count from the end of the first step: its warm-up
// (allocations, library pages read in) can take many steps' time, and put the ETA hours off.
TEST(Progress, TheRateAndEtaLeaveTheFirstStepOut) {
  testing::internal::CaptureStderr();
  {
    tt::Progress p(tt::Progress::Mode::Lines, 100, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a slow first step
    p.update(1, 1.0, 0, 0);
    for (int i = 2; i <= 100; ++i) p.update(i, 1.0, 0, 0);  // fast ones
  }
  const std::string out = testing::internal::GetCapturedStderr();
  const size_t first = out.find("step 1/100 "), last = out.find("step 100/100 ");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(last, std::string::npos) << out;
  EXPECT_HAS(out.substr(first, out.find('\n', first) - first), "ETA --:--");  // no rate to tell yet
  // 99 steps in well under a second: far above the 66 it/s the 1.5 s first step would make it
  // (200: room for the process to be set aside for a while on a busy machine)
  const double rate = std::stod(out.substr(last + std::string("step 100/100 ").size()));
  EXPECT_GT(rate, 200) << out;
}
