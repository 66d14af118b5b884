// tt-run --budget, trainer.memory_budget and --recommend on a tiny LM: the planned run trains to
// completion under the cap; an impossible budget is refused with the measured shortfall; bad
// budgets are refused before anything runs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_support.h"

namespace {
using nlohmann::json;
namespace fs = std::filesystem;

struct Budget {
  tt::test::TinyLm lm{"plan"};
  int64_t baseline_peak = 0;
  Budget() {
    auto r = lm.run("base", "[]", "batch_size: 8, threads: 1, max_steps: 4");
    EXPECT_EQ(r.rc, 0) << r.output;
    baseline_peak = lm.summary("base")["memory"]["peak_tensor_bytes"].get<int64_t>();
  }
  tt::test::RunResult run(const std::string& yaml_tag, const std::string& args) const {
    return tt::test::run(tt::test::tt_run_bin() + " " + (lm.dir / (yaml_tag + ".yaml")).string() + " " + args);
  }
};
}  // namespace

TEST(Budget, HalfTheBaselinePeakPlansAndTrainsToCompletionUnderTheCap) {
  Budget b;
  const int64_t budget = b.baseline_peak / 2;
  const fs::path run_dir = b.lm.dir / "half";
  auto r = b.run("base", "--budget " + std::to_string(budget) + " --run-dir " + run_dir.string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("chosen: "), std::string::npos) << r.output;
  // The fastest measured fit, or (its step times differing by a few percent run to run) the simplest
  // one within noise of it: either way the reason names the limit it fits under.
  EXPECT_TRUE(r.output.find("why: the fastest measured configuration whose peak") != std::string::npos ||
              r.output.find("why: the simplest measured configuration within noise of the fastest") != std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("fits under "), std::string::npos) << r.output;

  const json s = tt::test::summary_of(run_dir);
  EXPECT_EQ(s["steps"], 4);  // to completion
  EXPECT_LE(s["memory"]["peak_tensor_bytes"].get<int64_t>(), budget);
  bool guarded = false;
  for (const auto& p : s["plugins"]) guarded = guarded || p == "oom-guard";
  EXPECT_TRUE(guarded) << s["plugins"];
  EXPECT_NE(tt::test::read_file(run_dir / "pipeline.yaml").find("memory_cap: " + std::to_string(budget)),
            std::string::npos);

  // plan.json: the choice, measured under the limit, and the configurations it weighed.
  const json plan = tt::test::read_json(fs::path(run_dir.string() + "-plan") / "plan.json");
  ASSERT_TRUE(plan["found"].get<bool>());
  EXPECT_EQ(plan["budget_bytes"], budget);
  EXPECT_LE(plan["chosen"]["measured"]["peak_tensor_bytes"].get<int64_t>(), plan["limit_bytes"].get<int64_t>());
  EXPECT_GT(plan["reference"]["peak_tensor_bytes"].get<int64_t>(), budget);
  EXPECT_GT(plan["configurations"].size(), 10u);
  // The run trained what the plan chose: the same micro-batch.
  EXPECT_EQ(s["micro_batch_size"], plan["chosen"]["micro_batch_size"]);
}

TEST(Budget, TheTrainerKeyPlansTheSameWay) {
  Budget b;
  const int64_t budget = b.baseline_peak / 2;
  auto r = b.lm.run("key", "[]", "batch_size: 8, threads: 1, max_steps: 4, memory_budget: " + std::to_string(budget));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json s = b.lm.summary("key");
  EXPECT_EQ(s["steps"], 4);
  EXPECT_LE(s["memory"]["peak_tensor_bytes"].get<int64_t>(), budget);
  // The run's pipeline is the planned one: the budget became its cap, and resuming it does not
  // plan again.
  const std::string yaml = tt::test::read_file(b.lm.dir / "key" / "pipeline.yaml");
  EXPECT_EQ(yaml.find("memory_budget: " + std::to_string(budget)), std::string::npos) << yaml;
  EXPECT_HAS(yaml, "memory_cap: " + std::to_string(budget));
  const json plan = tt::test::read_json(b.lm.dir / "key-plan" / "plan.json");
  ASSERT_TRUE(plan["found"].get<bool>()) << plan.dump(2);
  EXPECT_EQ(s["micro_batch_size"], plan["chosen"]["micro_batch_size"]);
}

TEST(Budget, BelowAnythingPossibleItSaysSoAndByHowMuch) {
  Budget b;
  auto r = b.run("base", "--budget 64KiB --run-dir " + (b.lm.dir / "tiny").string());
  EXPECT_EQ(r.rc, 4) << r.output;
  EXPECT_NE(r.output.find("nothing fits under 57.60 KiB (the budget 64.00 KiB less a 10% margin)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the smallest measured peak"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("raise the budget to at least"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(b.lm.dir / "tiny" / "summary.json"));  // nothing trained
  const json plan = tt::test::read_json(b.lm.dir / "tiny-plan" / "plan.json");
  EXPECT_FALSE(plan["found"].get<bool>());
  EXPECT_GT(plan["smallest"]["over_by_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(plan["smallest"]["over_by_bytes"].get<int64_t>(),
            plan["smallest"]["peak_tensor_bytes"].get<int64_t>() - plan["limit_bytes"].get<int64_t>());
}

// The planner's options go with a pipeline's trainer.memory_budget as with --budget (a check
// that they are given with --budget or --recommend refused them).
TEST(Budget, ThePlannersOptionsApplyToThePipelinesOwnBudget) {
  Budget b;
  auto r = b.lm.run("tinykey", "[]", "batch_size: 8, threads: 1, max_steps: 4, memory_budget: 64KiB");
  EXPECT_EQ(r.rc, 4) << r.output;
  EXPECT_NE(r.output.find("the budget 64.00 KiB less a 10% margin"), std::string::npos) << r.output;
  r = tt::test::run(tt::test::tt_run_bin() + " " + (b.lm.dir / "tinykey.yaml").string() + " --margin 0.2 --run-dir " +
                    (b.lm.dir / "tinykey2").string());
  EXPECT_EQ(r.rc, 4) << r.output;
  EXPECT_NE(r.output.find("nothing fits under 51.20 KiB (the budget 64.00 KiB less a 20% margin)"), std::string::npos)
      << r.output;
}

TEST(Budget, RecommendPrintsASettingForEachBudget) {
  Budget b;
  auto r = b.run("base", "--recommend --run-dir " + (b.lm.dir / "rec").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const char* g : {"0.5 GiB", "1 GiB", "2 GiB", "4 GiB", "8 GiB", "16 GiB"})
    EXPECT_NE(r.output.find(std::string("\n  ") + g), std::string::npos) << g << "\n" << r.output;
  const json rec = tt::test::read_json(b.lm.dir / "rec-plan" / "recommend.json");
  ASSERT_EQ(rec["budgets"].size(), 6u);
  for (const auto& p : rec["budgets"]) {
    // Every configuration of this model fits in 0.5 GiB: each budget takes the fastest measured,
    // or the simplest within noise of it, and all take the same.
    ASSERT_TRUE(p["found"].get<bool>());
    EXPECT_EQ(p["chosen"]["configuration"], rec["budgets"][0]["chosen"]["configuration"]);
    const double chosen_ms = p["chosen"]["measured"]["median_step_ms"].get<double>();
    const double chosen_noise = p["chosen"]["measured"]["noise_ms"].get<double>();
    const double fastest_ms = p["fastest_fit"]["measured"]["median_step_ms"].get<double>();
    EXPECT_LE(chosen_ms, fastest_ms + chosen_noise + p["fastest_fit"]["measured"]["noise_ms"].get<double>()) << p;
    int measured = 0;
    for (const auto& c : p["configurations"])
      if (c.contains("measured") && c["measured"]["status"] == "ok") {
        ++measured;
        EXPECT_LE(c["measured"]["peak_tensor_bytes"].get<int64_t>(), p["limit_bytes"].get<int64_t>());
        EXPECT_LE(fastest_ms, c["measured"]["median_step_ms"].get<double>()) << c;  // the fastest of them all
      }
    EXPECT_GE(measured, 7);  // the reference, the smallest micro-batch, each technique alone
  }
  EXPECT_FALSE(fs::exists(b.lm.dir / "rec" / "summary.json"));  // no training
  // this model is far below 0.5 GiB: the table says so and how to ask for smaller budgets
  EXPECT_HAS(r.output, "fits the smallest budget");
  EXPECT_HAS(r.output, "times over: --budgets ");
}

// --budgets: --recommend's budgets of one's own, in any order, each a row (as written), and
// recommend.json's budgets in ascending order; a budget below the model's smallest peak is
// "nothing fits" in its row. A bad list and --budgets without --recommend are refused (exit 2).
TEST(Budget, RecommendTakesTheBudgetsGiven) {
  Budget b;
  const int64_t kib = b.baseline_peak / 1024;
  const std::string big = std::to_string(2 * kib) + "KiB", tiny = "1KiB";
  auto r = b.run("base", "--recommend --budgets " + big + "," + tiny + " --max-probes 4 --run-dir " +
                              (b.lm.dir / "own").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "\n  " + tiny + " ");
  EXPECT_HAS(r.output, "\n  " + big + " ");
  EXPECT_LT(r.output.find("\n  " + tiny + " "), r.output.find("\n  " + big + " "));  // ascending
  EXPECT_HAS(r.output, tiny + "     nothing fits");
  EXPECT_EQ(r.output.find("0.5 GiB"), std::string::npos) << r.output;
  const json rec = tt::test::read_json(b.lm.dir / "own-plan" / "recommend.json");
  ASSERT_EQ(rec["budgets"].size(), 2u);
  EXPECT_EQ(rec["budgets"][0]["budget_bytes"].get<int64_t>(), 1024);
  EXPECT_FALSE(rec["budgets"][0]["found"].get<bool>());
  EXPECT_EQ(rec["budgets"][1]["budget_bytes"].get<int64_t>(), 2 * kib * 1024);
  EXPECT_TRUE(rec["budgets"][1]["found"].get<bool>());

  r = b.run("base", "--recommend --budgets 8MiB,lots");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--budgets '8MiB,lots': ");
  EXPECT_HAS(r.output, "(the budgets are comma-separated)");
  r = b.run("base", "--budgets 8MiB");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--budgets lists --recommend's budgets: add --recommend");
}

// --plan-estimates (tools/bench-planner-estimates.sh): the reference probes only, every
// configuration's estimate and the plugins list that trains it; no search, no training. A probe
// times every step after its warm-up, whatever trainer.log_every the pipeline sets.
TEST(Budget, PlanEstimatesWritesEveryConfigurationsEstimateFromTheReferenceProbes) {
  Budget b;
  auto r = b.run("base", "--plan-estimates --run-dir " + (b.lm.dir / "est").string() + " trainer.log_every=4");
  ASSERT_EQ(r.rc, 0) << r.output;
  // Eight probes: as written at micro-batch 8 and 1, the six alternatives alone at 8; a ninth,
  // as written again, where a technique alone ran more than 1.25x faster than its first probe (a
  // first probe slowed by the machine's load).
  const bool again = r.output.find("probe  9  as written @ micro 8 ") != std::string::npos;
  EXPECT_EQ(r.output.find("probe 10 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(again ? "configurations estimated from 9 probe runs" : "configurations estimated from 8 probe runs"),
            std::string::npos)
      << r.output;
  const json est = tt::test::read_json(b.lm.dir / "est-plan" / "estimates.json");
  int measured = 0;
  for (const auto& c : est["configurations"]) {
    EXPECT_GT(c["estimated_peak_bytes"].get<int64_t>(), 0) << c;
    const std::string plugins = c["plugins"].get<std::string>();
    ASSERT_TRUE(plugins.size() >= 2 && plugins.front() == '[' && plugins.back() == ']') << c;
    if (!c.contains("measured")) continue;
    ++measured;
    // A reference probe's estimate is its own measurement.
    EXPECT_EQ(c["estimated_peak_bytes"].get<int64_t>(), c["measured"]["peak_tensor_bytes"].get<int64_t>()) << c;
    EXPECT_EQ(c["measured"]["timed_steps"], 3) << c;  // --probe-steps' default
  }
  EXPECT_EQ(measured, 8);  // as written measured again is one configuration
  EXPECT_GT(est["configurations"].size(), 100u);
  // The table printed: a line per configuration, smallest estimated peak first, the reference
  // probes' measurements beside their estimates.
  const size_t head = r.output.find("est. MiB    est. ms  measured (a reference probe)\n");
  ASSERT_NE(head, std::string::npos) << r.output;
  std::istringstream table(r.output.substr(r.output.find('\n', head) + 1));
  std::string line;
  size_t lines = 0, with_measure = 0;
  double last = 0;
  while (std::getline(table, line) && !line.empty()) {
    ++lines;
    with_measure += line.find(" MiB, ") != std::string::npos;  // "62.2 MiB, 3.7 ms" measured
    const size_t at = line.find(" @ micro ");
    ASSERT_NE(at, std::string::npos) << line;
    std::istringstream cols(line.substr(line.find_first_not_of("0123456789", at + 9)));
    double mib = 0;
    cols >> mib;
    EXPECT_GE(mib, last) << line;
    last = mib;
  }
  EXPECT_EQ(lines, est["configurations"].size());
  EXPECT_EQ(with_measure, 8u);
  EXPECT_FALSE(fs::exists(b.lm.dir / "est-plan" / "plan.json"));  // no search
  EXPECT_FALSE(fs::exists(b.lm.dir / "est" / "summary.json"));  // no training
  r = b.run("base", "--plan-estimates --recommend");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--plan-estimates only estimates"), std::string::npos) << r.output;
}

TEST(Budget, BadBudgetsAreRefusedBeforeAnythingRuns) {
  Budget b;
  for (const std::string bad : {"'1.5 GB'", "abc", "0", "-1GiB"}) {
    auto r = b.run("base", "--budget " + bad);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("is not a memory budget"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("probe"), std::string::npos) << r.output;
  }
  auto r = b.lm.run("badkey", "[]", "batch_size: 8, max_steps: 1, memory_budget: 1.5 GB");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("badkey.yaml:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trainer.memory_budget = '1.5 GB' is not a memory budget"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1.5GiB"), std::string::npos) << r.output;

  r = b.lm.run("both", "[]", "batch_size: 8, max_steps: 1, memory_budget: 1GiB, memory_cap: 1GiB");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("remove memory_cap"), std::string::npos) << r.output;
  // --dry-run refuses it too (it passed), naming the file and both keys
  r = tt::test::run(tt::test::tt_run_bin() + " --dry-run " + (b.lm.dir / "both.yaml").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "both.yaml");
  EXPECT_HAS(r.output, "trainer.memory_cap is set beside trainer.memory_budget");
  // --budget beside a pipeline's memory_cap: refused before any probe, at memory_cap's line
  b.lm.run("cap", "[]", "batch_size: 8, max_steps: 1, memory_cap: 1GiB");
  r = b.run("cap", "--budget 1GiB");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "cap.yaml:");
  EXPECT_HAS(r.output, "trainer.memory_cap is set beside --budget: the budget is planned and then becomes the cap");
  EXPECT_EQ(r.output.find("probe"), std::string::npos) << r.output;

  r = b.run("base", "--budget 1GiB --recommend");
  EXPECT_EQ(r.rc, 2) << r.output;
}
