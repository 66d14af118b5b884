#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "test_support.h"
#include "tt/compat.h"
#include "tt/error.h"
#include "tt/meter.h"
#include "tt/options.h"
#include "tt/report.h"
#include "tt/runtime.h"

namespace {
using nlohmann::json;
using tt::test::csv_rows;
namespace fs = std::filesystem;

struct Cmp {
  fs::path dir = tt::test::temp_dir("compare");
  Cmp() {
    std::ofstream t(dir / "train.txt");
    for (int i = 0; i < 300; ++i) t << "the quick brown fox jumps over the lazy dog " << i << "\n";
    std::ofstream v(dir / "val.txt");
    for (int i = 0; i < 40; ++i) v << "a lazy dog sleeps under the quick brown fox " << i << "\n";
  }
  // validation: the text dataset's validation stream, evaluated at the end of each run
  std::string base(bool validation = false) const {
    return "name: cmp\nseed: 0\ndata: {name: text, train: " + (dir / "train.txt").string() +
           (validation ? ", validation: [" + (dir / "val.txt").string() + "]" : std::string()) +
           ", seq_len: 32}\nmodel: {name: transformer, d_model: 32, n_layers: 2, n_heads: 2, sample_tokens: 0}\n"
           "trainer: {batch_size: 4, threads: 1}\noutput: {dir: " + (dir / "runs").string() + "}\n";
  }
  tt::test::RunResult run(const std::string& tag, const std::string& compare_section, const std::string& args = "",
                          const std::string& pipeline = "") {
    std::ofstream(dir / (tag + ".yaml")) << (pipeline.empty() ? base() : pipeline) << compare_section;
    return tt::test::run("TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt::test::tt_run_bin() + " " +
                         (dir / (tag + ".yaml")).string() + " --run-dir " + (dir / tag).string() + " " + args);
  }
};
std::map<std::string, json> by_name(const json& compare) {
  std::map<std::string, json> v;
  for (const auto& x : compare["variants"]) v[x["name"].get<std::string>()] = x;
  return v;
}

}  // namespace

TEST(Compare, ACrashingVariantIsReportedWhileTheOthersComplete) {
  Cmp c;
  auto r = c.run("crash", R"(compare:
  steps: 3
  warmup_steps: 1
  variants:
    baseline: {}
    crashes: {plugins: [test-crash]}
    capped: {set: {trainer.memory_cap: 64KiB}}
    checkpoint: {plugins: [checkpoint]}
)");
  // the others ran and the table is written, and the exit says that not every variant ran
  ASSERT_EQ(r.rc, 7) << r.output;
  EXPECT_NE(r.output.find("2 of 4 variants did not run: crashes (crashed (signal 11)), capped (out of memory); their "
                          "rows say why (exit 7)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("crashes ... crashed (signal 11)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("capped ... out of memory"), std::string::npos) << r.output;

  const json j = tt::test::read_json(c.dir / "crash" / "compare.json");
  EXPECT_EQ(j["baseline"], "baseline");
  EXPECT_EQ(j["steps"], 3);
  ASSERT_EQ(j["variants"].size(), 4u);
  std::map<std::string, json> v;
  for (const auto& x : j["variants"]) v[x["name"].get<std::string>()] = x;
  EXPECT_EQ(v["crashes"]["status"], "crashed (signal 11)");
  EXPECT_EQ(v["capped"]["status"], "out of memory");
  EXPECT_NE(v["capped"]["reason"].get<std::string>().find("memory cap"), std::string::npos);
  ASSERT_TRUE(v["baseline"]["ok"].get<bool>());
  ASSERT_TRUE(v["checkpoint"]["ok"].get<bool>());
  EXPECT_DOUBLE_EQ(v["baseline"]["peak_vs_baseline"].get<double>(), 1.0);
  // checkpointing holds less than the baseline: the comparison sees what the meter sees
  EXPECT_LT(v["checkpoint"]["activations_bytes"].get<int64_t>(), v["baseline"]["activations_bytes"].get<int64_t>());
  EXPECT_LT(v["checkpoint"]["peak_vs_baseline"].get<double>(), 1.0);
  EXPECT_GT(v["baseline"]["median_step_ms"].get<double>(), 0);
  // The same losses: the same data, seed and batches in every variant.
  EXPECT_EQ(v["checkpoint"]["final_loss"], v["baseline"]["final_loss"]);
  EXPECT_EQ(v["checkpoint"]["plugins"], json::array({"checkpoint"}));
  // no validation data: no validation column
  EXPECT_FALSE(j.contains("validation_metric"));
  EXPECT_FALSE(v["baseline"].contains("validation"));
  EXPECT_EQ(r.output.find("val_loss"), std::string::npos) << r.output;

  // compare.csv: a header and one row per variant, the same figures.
  std::ifstream csv(c.dir / "crash" / "compare.csv");
  std::string header, line;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("variant,status,peak_tensor_bytes,", 0), 0u) << header;
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    std::stringstream ss(line);
    std::string name, status, peak;
    std::getline(ss, name, ',');
    std::getline(ss, status, ',');
    std::getline(ss, peak, ',');
    if (status == "ok") {
      EXPECT_EQ(std::stoll(peak), v[name]["peak_tensor_bytes"].get<int64_t>()) << line;
    }
  }
  EXPECT_EQ(rows, 4);
  EXPECT_TRUE(fs::exists(c.dir / "crash" / "baseline.yaml"));
  EXPECT_TRUE(fs::exists(c.dir / "crash" / "crashes.log"));
  // the Pareto plot of the variants that ran (gnuplot's log is left only when it is not drawn)
  if (std::system("command -v gnuplot >/dev/null") == 0) {
    EXPECT_TRUE(fs::exists(c.dir / "crash" / "compare.png"));
    EXPECT_FALSE(fs::exists(c.dir / "crash" / "gnuplot.log"));
  }
}

// first_line, which cuts a compare row's reason (and any error's first line) at 300 characters,
// cuts at a space and marks the cut: a long refusal ended mid-word, on a stray '(' that read as
// the message's own.
TEST(FirstLine, CutsALongLineAtASpaceAndMarksTheCut) {
  std::string reason;
  for (int i = 0; reason.size() < 400; ++i) reason += "word" + std::to_string(i) + " (";
  const std::string cut = tt::first_line(reason + "\nC++ stack");
  EXPECT_LE(cut.size(), 300u);
  ASSERT_GE(cut.size(), 250u);
  EXPECT_EQ(cut.substr(cut.size() - 4), " ...") << cut;
  EXPECT_EQ(reason.compare(0, cut.size() - 4, cut, 0, cut.size() - 4), 0) << "a prefix of the reason";
  EXPECT_EQ(reason[cut.size() - 4], ' ') << "cut at a space";
  EXPECT_EQ(tt::first_line("short\nstack"), "short");
  EXPECT_EQ(tt::first_line(std::string(500, 'x')).size(), 300u);  // no space: cut where it must
}

// The Pareto plot's labels: two variants a few milliseconds apart at the same peak (checkpoint and
// checkpoint with the step in backward) printed their names over each other.
TEST(Compare, ThePlotsLabelsOfVariantsThatMeetAreNotPrintedOverEachOther) {
  const double W = 792, H = 492, cw = 7, ch = 14;
  const tt::PlotBox key{W - 22 * cw, H - 3 * ch, W, H};
  const std::vector<tt::LabelPoint> points = {
      {517, 60, "checkpoint"}, {551, 60, "checkpoint+in-backward"},  // 34 px apart, the same peak
      {300, 200, "same"}, {300, 200, "same-again"}, {300, 200, "and-a-third"},  // one spot
      {0, 0, "at-the-corner-with-a-long-name"}, {W, H - 40, "under-the-key"}, {150, 400, "größe"},
      {600, 300, "a"}, {610, 305, "b"}, {620, 300, "c"}, {605, 295, "d"}, {615, 310, "e"}};
  const auto spots = tt::place_labels(points, W, H, cw, ch, {key});
  ASSERT_EQ(spots.size(), points.size());
  auto apart = [](const tt::PlotBox& a, const tt::PlotBox& b) {
    return a.x1 <= b.x0 || b.x1 <= a.x0 || a.y1 <= b.y0 || b.y1 <= a.y0;
  };
  for (size_t i = 0; i < spots.size(); ++i) {
    const auto& b = spots[i].box;
    const std::string& name = points[i].text;
    // its size: a character each (UTF-8 counted as characters), one line
    EXPECT_DOUBLE_EQ(b.x1 - b.x0, cw * (name == "größe" ? 5 : static_cast<double>(name.size()))) << name;
    EXPECT_DOUBLE_EQ(b.y1 - b.y0, ch) << name;
    // inside the plot, clear of the key
    EXPECT_TRUE(b.x0 >= 0 && b.y0 >= 0 && b.x1 <= W && b.y1 <= H) << name;
    EXPECT_TRUE(apart(b, key)) << name;
    // beside its own point: within three lines and two characters of it
    const double dx = std::max({b.x0 - points[i].x, points[i].x - b.x1, 0.0});
    const double dy = std::max({b.y0 - points[i].y, points[i].y - b.y1, 0.0});
    EXPECT_LE(dx, 2 * cw) << name;
    EXPECT_LE(dy, 3 * ch) << name;
    // gnuplot's offset and alignment say the same box
    const double ax = points[i].x + spots[i].dx * cw;
    EXPECT_DOUBLE_EQ(spots[i].align == "left" ? b.x0 : spots[i].align == "right" ? b.x1 : (b.x0 + b.x1) / 2, ax) << name;
    EXPECT_DOUBLE_EQ((b.y0 + b.y1) / 2, points[i].y + spots[i].dy * ch) << name;
    // over no point's mark and no other label
    for (size_t j = 0; j < points.size(); ++j) {
      EXPECT_TRUE(apart(b, {points[j].x - cw / 2, points[j].y - ch / 2, points[j].x + cw / 2, points[j].y + ch / 2}))
          << name << " covers the point of " << points[j].text;
      if (j != i) {
        EXPECT_TRUE(apart(b, spots[j].box)) << name << " over " << points[j].text;
      }
    }
  }

  // Drawn: two variants with the same peak, one named with a quote (a gnuplot string's delimiter).
  Cmp c;
  auto r = c.run("twins", R"(compare:
  steps: 2
  warmup_steps: 1
  variants:
    plain: {}
    plain's-twin: {}
)");
  ASSERT_EQ(r.rc, 0) << r.output;
  if (std::system("command -v gnuplot >/dev/null") != 0) GTEST_SKIP() << "gnuplot is not installed (tools/setup.sh installs it)";
  EXPECT_TRUE(fs::exists(c.dir / "twins" / "compare.png")) << r.output;
  EXPECT_FALSE(fs::exists(c.dir / "twins" / "gnuplot.log"));
}

TEST(Compare, PipelineFilesNamedOnTheCommandLineKeepTheirOwnPlugins) {
  Cmp c;
  std::ofstream(c.dir / "plain.yaml") << c.base();
  std::ofstream(c.dir / "ckpt.yaml") << c.base() << "plugins: [checkpoint]\n";
  auto r = tt::test::run(tt::test::tt_run_bin() + " --compare " + (c.dir / "plain.yaml").string() + " " +
                         (c.dir / "ckpt.yaml").string() + " --steps 2 --warmup 0 --run-dir " + (c.dir / "files").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const json j = tt::test::read_json(c.dir / "files" / "compare.json");
  ASSERT_EQ(j["variants"].size(), 2u);
  EXPECT_EQ(j["variants"][0]["name"], "plain");
  EXPECT_EQ(j["baseline"], "plain");
  EXPECT_EQ(j["steps"], 2);
  auto v = by_name(j);
  ASSERT_TRUE(v["plain"]["ok"].get<bool>()) << r.output;
  ASSERT_TRUE(v["ckpt"]["ok"].get<bool>()) << r.output;
  // each file runs with its own plugins list, and the meter sees the difference
  EXPECT_EQ(v["plain"]["plugins"], json::array());
  EXPECT_EQ(v["ckpt"]["plugins"], json::array({"checkpoint"}));
  EXPECT_NE(tt::test::read_file(c.dir / "files" / "ckpt.yaml").find("checkpoint"), std::string::npos);
  EXPECT_LT(v["ckpt"]["activations_bytes"].get<int64_t>(), v["plain"]["activations_bytes"].get<int64_t>());
  EXPECT_LT(v["ckpt"]["peak_vs_baseline"].get<double>(), 1.0);

  // A file that is not there is a bad command line, before anything runs.
  auto missing = tt::test::run(tt::test::tt_run_bin() + " --compare " + (c.dir / "plain.yaml").string() + " " +
                               (c.dir / "plian.yaml").string() + " --run-dir " + (c.dir / "missing").string());
  EXPECT_EQ(missing.rc, 2) << missing.output;
  EXPECT_NE(missing.output.find("--compare: " + (c.dir / "plian.yaml").string() + ": no such file"), std::string::npos)
      << missing.output;
  EXPECT_FALSE(fs::exists(c.dir / "missing" / "plain")) << "nothing runs";

  // Without --run-dir the results go to <output.dir>/plain-vs-ckpt-compare-<time>
  auto named = tt::test::run(tt::test::tt_run_bin() + " -q --compare " + (c.dir / "plain.yaml").string() + " " +
                             (c.dir / "ckpt.yaml").string() + " --steps 1 --warmup 0");
  ASSERT_EQ(named.rc, 0) << named.output;
  std::vector<std::string> folders;
  for (const auto& e : fs::directory_iterator(c.dir / "runs")) folders.push_back(e.path().filename().string());
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(folders[0].rfind("plain-vs-ckpt-compare-", 0), 0u) << folders[0];
}

// tt-run --compare RUN_DIR RUN_DIR: the table of runs that exist, from what they measured; each
// row is its run's summary (memory) and metrics.jsonl (the median step after --warmup), nothing runs.
TEST(Compare, RunDirectoriesAreTabulatedFromWhatTheyMeasured) {
  Cmp c;
  std::ofstream(c.dir / "plain.yaml") << c.base();
  std::ofstream(c.dir / "ckpt.yaml") << c.base() << "plugins: [checkpoint]\n";
  for (const char* tag : {"plain", "ckpt"}) {
    auto r = tt::test::run(tt::test::tt_run_bin() + " -q " + (c.dir / (std::string(tag) + ".yaml")).string() +
                           " trainer.max_steps=5 --run-dir " + (c.dir / "runs" / tag).string());
    ASSERT_EQ(r.rc, 0) << r.output;
  }
  const fs::path plain = c.dir / "runs" / "plain", ckpt = c.dir / "runs" / "ckpt";
  auto r = tt::test::run(tt::test::tt_run_bin() + " --compare " + plain.string() + " " + ckpt.string() +
                         "/ --warmup 1 --run-dir " + (c.dir / "table").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "after each run's own steps; step ms leaves each run's first 1 steps out");
  EXPECT_HAS(r.output, "runs measured on " + tt::cpu_model());
  const json j = tt::test::read_json(c.dir / "table" / "compare.json");
  EXPECT_EQ(j["baseline"], "plain");
  EXPECT_TRUE(j["steps"].is_null());
  auto v = by_name(j);
  ASSERT_TRUE(v["plain"]["ok"].get<bool>()) << r.output;
  ASSERT_TRUE(v["ckpt"]["ok"].get<bool>()) << r.output;  // named by its directory, the trailing / aside
  for (const auto& [name, dir] : {std::pair<std::string, fs::path>{"plain", plain}, {"ckpt", ckpt}}) {
    const json summary = tt::test::read_json(dir / "summary.json");
    EXPECT_EQ(v[name]["peak_tensor_bytes"], summary["memory"]["peak_tensor_bytes"]) << name;
    EXPECT_EQ(v[name]["activations_bytes"], summary["memory"]["activations_bytes"]) << name;
    EXPECT_EQ(v[name]["final_loss"], summary["final_loss"]) << name;
    EXPECT_EQ(v[name]["timed_steps"], 4) << name;  // steps 2..5
    EXPECT_EQ(v[name]["plugins"], summary["plugins"]) << name;
  }
  EXPECT_LT(v["ckpt"]["peak_vs_baseline"].get<double>(), 1.0);
  EXPECT_TRUE(fs::exists(plain / "summary.json") && !fs::exists(c.dir / "table" / "plain")) << "nothing ran";
  EXPECT_EQ(r.output.find("different models or data"), std::string::npos) << r.output;
  // a run of another model beside them: the table says its ratios set unlike things side by side
  r = tt::test::run(tt::test::tt_run_bin() + " -q " + (c.dir / "plain.yaml").string() +
                    " model.d_model=64 trainer.max_steps=3 --run-dir " + (c.dir / "runs" / "wide").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  r = tt::test::run(tt::test::tt_run_bin() + " --compare " + plain.string() + " " + (c.dir / "runs" / "wide").string() +
                    " --warmup 1 --run-dir " + (c.dir / "unlike").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "  ! the runs are of different models or data (");
  EXPECT_HAS(r.output, "): their ratios set unlike things side by side\n");

  // refusals: a run directory beside a pipeline, one without summary.json, two of one name, options that run
  fs::create_directories(c.dir / "empty");
  fs::create_directories(c.dir / "other" / "plain");
  fs::copy(plain / "summary.json", c.dir / "other" / "plain" / "summary.json");
  for (const auto& [args, expect] : std::vector<std::pair<std::string, std::string>>{
           {plain.string() + " " + (c.dir / "ckpt.yaml").string(), "name run directories only (their table)"},
           {plain.string() + " " + (c.dir / "empty").string(), "has no summary.json: not a tt run directory"},
           {plain.string() + " " + (c.dir / "other" / "plain").string(), "two runs are named 'plain'"},
           {plain.string() + " " + ckpt.string() + " --steps 3", "tabulates what they measured and runs nothing"},
           {plain.string(), "name two or more run directories"}}) {
    r = tt::test::run(tt::test::tt_run_bin() + " --compare " + args + " --run-dir " + (c.dir / "refused").string());
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.output;
    EXPECT_HAS(r.output, expect);
  }
  // a summary without figures (a run that failed in its set-up) is a row saying so: exit 7
  std::ofstream(c.dir / "empty" / "summary.json") << "{\"status\": \"failed\"}";
  r = tt::test::run(tt::test::tt_run_bin() + " --compare " + plain.string() + " " + (c.dir / "empty").string() +
                    " --run-dir " + (c.dir / "partial").string());
  EXPECT_EQ(r.rc, 7) << r.output;
  EXPECT_HAS(r.output, "no figures: a run that failed before training writes none");
}

// The variants of a repeated comparison tabulated again: each row is the median of the variant's
// runs (NAME, NAME-r2, NAME-r3), as the comparison's row was, not its first run's.
TEST(Compare, ARepeatedComparisonsVariantsTabulateAsTheMedianOfTheirRuns) {
  Cmp c;
  auto r = c.run("rep", "compare:\n  steps: 2\n  warmup_steps: 1\n  repeats: 3\n  variants:\n    plain: {}\n"
                        "    ckpt: {plugins: [checkpoint]}\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto original = by_name(tt::test::read_json(c.dir / "rep" / "compare.json"));
  r = tt::test::run(tt::test::tt_run_bin() + " --compare " + (c.dir / "rep" / "plain").string() + " " +
                    (c.dir / "rep" / "ckpt").string() + " --warmup 1 --run-dir " + (c.dir / "again").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "plain: the median of 3 runs of a repeated comparison");
  auto again = by_name(tt::test::read_json(c.dir / "again" / "compare.json"));
  for (const char* name : {"plain", "ckpt"}) {
    ASSERT_EQ(again[name]["step_ms_per_run"].size(), 3u) << again[name];
    EXPECT_EQ(again[name]["step_ms_per_run"], original[name]["step_ms_per_run"]) << name;
    EXPECT_DOUBLE_EQ(again[name]["median_step_ms"].get<double>(), original[name]["median_step_ms"].get<double>()) << name;
    EXPECT_EQ(again[name]["peak_tensor_bytes"], original[name]["peak_tensor_bytes"]) << name;
  }
}

TEST(Compare, AVariantWithoutPluginsKeepsThePipelinesAndAnEmptyListRemovesThem) {
  Cmp c;
  auto r = c.run("keep", "compare:\n  steps: 2\n  warmup_steps: 0\n  variants:\n    kept: {}\n    none: {plugins: []}\n",
                 "", c.base() + "plugins: [checkpoint]\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto v = by_name(tt::test::read_json(c.dir / "keep" / "compare.json"));
  ASSERT_TRUE(v["kept"]["ok"].get<bool>()) << r.output;
  ASSERT_TRUE(v["none"]["ok"].get<bool>()) << r.output;
  EXPECT_EQ(v["kept"]["plugins"], json::array({"checkpoint"}));
  EXPECT_EQ(v["none"]["plugins"], json::array());
  EXPECT_LT(v["kept"]["activations_bytes"].get<int64_t>(), v["none"]["activations_bytes"].get<int64_t>());
}

// A comparison keeps its variants' measurements, not their weights: --resume and --export of a
// variant say so and how to train it (not --overwrite, which would replace the measurements),
// and --resume of the comparison's folder says a comparison is run again, not resumed.
TEST(Compare, AVariantKeepsNoWeightsAndResumeOrExportOfItSaysHowToTrainIt) {
  Cmp c;
  auto r = c.run("kept", "compare:\n  steps: 2\n  warmup_steps: 0\n  variants:\n    plain: {}\n"
                         "    ckpt: {plugins: [checkpoint]}\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  const fs::path variant = c.dir / "kept" / "ckpt";
  EXPECT_FALSE(fs::exists(variant / "checkpoints"));
  EXPECT_TRUE(tt::test::read_json(variant / "summary.json").contains("checkpoints_removed"));
  const std::string tt_run = "TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt::test::tt_run_bin();
  r = tt::test::run(tt_run + " --resume " + variant.string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, variant.string() + " is a variant of a comparison, which keeps its measurements, not its weights");
  EXPECT_HAS(r.output, "to train it, run tt-run " + (variant / "pipeline.yaml").string() + " with another --run-dir");
  EXPECT_EQ(r.output.find("--overwrite"), std::string::npos) << r.output;
  r = tt::test::run(tt_run + " --export safetensors " + variant.string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, variant.string() + " is a variant of a comparison, which keeps its measurements, not its weights: "
                       "train its pipeline");
  r = tt::test::run(tt_run + " --resume " + (c.dir / "kept").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "is a comparison's folder (compare.json), not a run: a comparison is not resumed");
}

TEST(Compare, ValidationColumnShowsEachVariantsValidationMetric) {
  Cmp c;
  auto r = c.run("val", R"(compare:
  steps: 3
  warmup_steps: 0
  variants:
    baseline: {}
    fast: {set: {optimizer.lr: 0.02}}
)",
                 "", c.base(true));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json j = tt::test::read_json(c.dir / "val" / "compare.json");
  EXPECT_EQ(j["validation_metric"], "val_loss");
  auto v = by_name(j);
  std::map<std::string, std::string> csv_val;
  for (const auto& row : csv_rows(c.dir / "val" / "compare.csv")) csv_val[row.at("variant")] = row.at("val_loss");
  for (const char* name : {"baseline", "fast"}) {
    ASSERT_TRUE(v[name]["ok"].get<bool>()) << r.output;
    // the figures are the variant's own run's: its summary.json's validation object
    const json summary = tt::test::summary_of(c.dir / "val" / name);
    ASSERT_TRUE(summary.contains("validation")) << summary.dump();
    EXPECT_EQ(v[name]["validation"], summary["validation"]);
    const double val_loss = summary["validation"]["val_loss"].get<double>();
    EXPECT_GT(val_loss, 0);
    EXPECT_NEAR(std::stod(csv_val[name]), val_loss, 1e-6);
  }
  // a different learning rate trains to a different validation loss: the column tells them apart
  EXPECT_NE(v["baseline"]["validation"]["val_loss"], v["fast"]["validation"]["val_loss"]);
  // the table has the column, with the value rounded to 4 places in each variant's row
  EXPECT_NE(r.output.find("val_loss\n"), std::string::npos) << r.output;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f\n", v["fast"]["validation"]["val_loss"].get<double>());
  EXPECT_NE(r.output.find(std::string(" ") + buf), std::string::npos) << buf << r.output;
}

// Where nothing evaluates, the column is the model's own loss over all of its data at the end
// (the topic model's corpus_loss): the training loss of the last batch is a sum over that
// batch's documents and tells nothing across batch sizes.
TEST(Compare, WithoutAnEvaluationTheColumnIsTheModelsLossOverItsWholeData) {
  Cmp c;
  std::ofstream(c.dir / "t.yaml") << tt::test::topic_yaml(
      c.dir / "runs", "",
      "compare:\n  steps: 3\n  warmup_steps: 0\n  variants:\n    small: {set: {trainer.batch_size: 8}}\n"
      "    large: {set: {trainer.batch_size: 32}}\n");
  auto r = tt::test::run(tt::test::tt_run_bin() + " " + (c.dir / "t.yaml").string() + " --run-dir " +
                         (c.dir / "mm").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const json j = tt::test::read_json(c.dir / "mm" / "compare.json");
  EXPECT_EQ(j["validation_metric"], "corpus_loss");
  std::map<std::string, std::string> csv_val;
  for (const auto& row : csv_rows(c.dir / "mm" / "compare.csv")) csv_val[row.at("variant")] = row.at("corpus_loss");
  for (const char* name : {"small", "large"}) {
    const json summary = tt::test::summary_of(c.dir / "mm" / name);
    const double corpus = summary["model_metrics"]["corpus_loss"].get<double>();
    EXPECT_NEAR(std::stod(csv_val[name]), corpus, 1e-6 * corpus) << name;
  }
  EXPECT_NE(r.output.find("corpus_loss"), std::string::npos) << r.output;
}

TEST(Compare, BytesAPluginHoldsShowInTheRestOfThePeak) {
  Cmp c;
  auto r = c.run("rest", R"(compare:
  steps: 2
  warmup_steps: 0
  variants:
    baseline: {}
    holds: {plugins: [{name: test-hold, bytes: 4MiB}]}
    reports: {plugins: [{name: test-hold, bytes: 4MiB, report: true}]}
)");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto v = by_name(tt::test::read_json(c.dir / "rest" / "compare.json"));
  ASSERT_TRUE(v["baseline"]["ok"].get<bool>()) << r.output;
  ASSERT_TRUE(v["holds"]["ok"].get<bool>()) << r.output;
  for (const char* name : {"baseline", "holds"}) {
    const json& x = v[name];
    // rest = peak - parameters - gradients - optimizer state - activations
    EXPECT_EQ(x["rest_bytes"].get<int64_t>(),
              x["peak_tensor_bytes"].get<int64_t>() - x["parameters_bytes"].get<int64_t>() -
                  x["gradients_bytes"].get<int64_t>() - x["optimizer_state_bytes"].get<int64_t>() -
                  x["activations_bytes"].get<int64_t>());
  }
  // the plugin's 4 MiB are in none of the four named parts: they show in the rest
  for (const char* part : {"parameters_bytes", "gradients_bytes", "optimizer_state_bytes"})
    EXPECT_EQ(v["holds"][part], v["baseline"][part]) << part;
  const int64_t held = 4 << 20, more = v["holds"]["rest_bytes"].get<int64_t>() - v["baseline"]["rest_bytes"].get<int64_t>();
  EXPECT_NEAR(static_cast<double>(more), static_cast<double>(held), 0.05 * held) << r.output;
  std::map<std::string, std::string> csv_rest;
  for (const auto& row : csv_rows(c.dir / "rest" / "compare.csv")) csv_rest[row.at("variant")] = row.at("rest_bytes");
  EXPECT_EQ(std::stoll(csv_rest["holds"]), v["holds"]["rest_bytes"].get<int64_t>());
  EXPECT_NE(r.output.find(" rest "), std::string::npos) << r.output;
  // reported (tt::report_held), the same bytes are named under the table and leave the rest
  ASSERT_TRUE(v["reports"]["ok"].get<bool>()) << r.output;
  EXPECT_EQ(v["reports"]["held"], json::parse(R"([{"plugin": "test-hold", "what": "buffer", "bytes": 4194304,
                                                   "where": "tensors"}])"));
  const int64_t reported_rest = v["reports"]["rest_bytes"].get<int64_t>(), base_rest = v["baseline"]["rest_bytes"].get<int64_t>();
  EXPECT_NEAR(static_cast<double>(reported_rest - base_rest), 0.0, 0.05 * held) << r.output;
  EXPECT_HAS(r.output, "reports: test-hold holds buffer of 4.0");
  EXPECT_HAS(r.output, " MiB in tensors (part of the tensor peak, not of its rest)");
}

TEST(Compare, ARefusedVariantIsNamedInItsRowAndTheOthersRun) {
  Cmp c;
  auto r = c.run("refused", R"(compare:
  steps: 2
  warmup_steps: 0
  variants:
    baseline: {}
    typo: {plugins: [{name: checkpoint, everry: 2}]}
    old-api: {plugins: [test-wrong-api]}
    bad-index: {set: {plugins.x.every: 2}, plugins: [checkpoint]}
    checkpoint: {plugins: [checkpoint]}
)");
  ASSERT_EQ(r.rc, 7) << r.output;
  EXPECT_NE(r.output.find("typo ... refused: "), std::string::npos) << r.output;
  auto v = by_name(tt::test::read_json(c.dir / "refused" / "compare.json"));
  ASSERT_EQ(v.size(), 5u);
  struct Refusal {
    const char* name;
    const char* line;  // of the variant in refused.yaml: base()'s 6 lines, then the section
    const char* reason;
  };
  for (const Refusal& k : {Refusal{"typo", "12:5", "unknown key 'everry' in plugins[0] (checkpoint)"},
                           Refusal{"old-api", "13:5", "built for tt module API version 999"},
                           Refusal{"bad-index", "14:5", "compare.variants.bad-index.set 'plugins.x.every': 'x' indexes a list"}}) {
    EXPECT_EQ(v[k.name]["status"], "refused") << k.name;
    EXPECT_FALSE(v[k.name]["ok"].get<bool>()) << k.name;
    EXPECT_NE(v[k.name]["reason"].get<std::string>().find(k.reason), std::string::npos) << v[k.name]["reason"];
    // said of the user's file, the variant's line and its name, not of the pipeline written out for it
    const std::string said = (c.dir / "refused.yaml").string() + ":" + k.line + ": compare.variants." + k.name;
    EXPECT_EQ(v[k.name]["reason"].get<std::string>().rfind(said, 0), 0u) << v[k.name]["reason"];
    // the table's row names the variant and its reason
    const std::string row = std::string(k.name) + " ";
    size_t at = r.output.rfind("\n" + row);
    ASSERT_NE(at, std::string::npos) << k.name << r.output;
    const std::string line = r.output.substr(at + 1, r.output.find('\n', at + 1) - at - 1);
    EXPECT_NE(line.find("refused"), std::string::npos) << line;
    EXPECT_NE(line.find(k.reason), std::string::npos) << line;
    EXPECT_FALSE(fs::exists(c.dir / "refused" / k.name)) << "a refused variant does not run";
  }
  // the others ran and were measured
  ASSERT_TRUE(v["baseline"]["ok"].get<bool>()) << r.output;
  ASSERT_TRUE(v["checkpoint"]["ok"].get<bool>()) << r.output;
  EXPECT_LT(v["checkpoint"]["activations_bytes"].get<int64_t>(), v["baseline"]["activations_bytes"].get<int64_t>());
  std::map<std::string, std::map<std::string, std::string>> rows;
  for (const auto& row : csv_rows(c.dir / "refused" / "compare.csv")) rows[row.at("variant")] = row;
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows["typo"]["status"], "refused");
  EXPECT_NE(rows["typo"]["reason"].find("unknown key 'everry'"), std::string::npos) << rows["typo"]["reason"];
  EXPECT_EQ(rows["checkpoint"]["status"], "ok");
}

TEST(Compare, BadSectionsAreClearErrors) {
  Cmp c;
  struct Case {
    std::string section, expect;
  };
  for (const Case& k : std::vector<Case>{
           {"compare: {variants: {a: {plugins: [no-such-plugin]}}}\n", "variant 'a'"},
           {"compare: {variants: {a: {}, b: {plugins: [checkpoint]}, a: {}}}\n", "'a' appears twice in this map (first at "},
           {"compare: {variants: {a: {plugin: [checkpoint]}}}\n", "bad.yaml:7:26: compare.variants.a: unknown key 'plugin'"},
           {"compare: {steps: 0, variants: {a: {}}}\n", "steps must be at least 1"},
           {"compare: {baseline: z, variants: {a: {}}}\n", "baseline 'z' is not a variant"},
           {"compare: {variants: {a: {set: {trainer.batch_size: abc}}}}\n",
            "bad.yaml:7:22: compare.variants.a: trainer.batch_size must be an integer, got 'abc' (at "},
           {"compare: {varients: {a: {}}}\n", "bad.yaml:7:11: compare: unknown key 'varients'"},
           {"compare: [a, b]\n", "compare must be a map"},
           {"compare: {variants: {\"a\\\"b\": {}}}\n", "'a\"b': a variant name must not contain '/', spaces, '\"' or control"},
           {"compare: {variants: {\"a\\nb\": {}}}\n", "a variant name must not contain"},
       }) {
    auto r = c.run("bad", k.section);
    EXPECT_EQ(r.rc, 2) << k.section << r.output;
    EXPECT_NE(r.output.find(k.expect), std::string::npos) << k.section << r.output;
  }
}

TEST(ProfileMemory, BreakdownPerBlockTableAndTimelineOfOneStep) {
  Cmp c;
  std::ofstream(c.dir / "p.yaml") << c.base();
  std::ofstream(c.dir / "pc.yaml") << c.base() << "plugins: [checkpoint]\n";
  auto r = tt::test::run(tt::test::tt_run_bin() + " --profile-memory " + (c.dir / "p.yaml").string() + " --run-dir " +
                         (c.dir / "prof").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("blocks.1"), std::string::npos) << r.output;
  const json j = tt::test::read_json(c.dir / "prof" / "memory_profile.json");
  ASSERT_EQ(j["blocks"].size(), 2u);
  int64_t blocks = 0;
  for (const auto& b : j["blocks"]) {
    EXPECT_GT(b["activation_bytes"].get<int64_t>(), 0);
    EXPECT_GT(b["forward_ms"].get<double>(), 0);
    ASSERT_FALSE(b["backward_ms"].is_null());
    EXPECT_GT(b["backward_ms"].get<double>(), 0);
    blocks += b["activation_bytes"].get<int64_t>();
  }
  const int64_t act = j["memory"]["activations_bytes"].get<int64_t>();
  // the breakdown adds up to the peak: its rest line is the peak less the four parts
  const json& m = j["memory"];
  const int64_t rest = m["peak_tensor_bytes"].get<int64_t>() - m["parameters_bytes"].get<int64_t>() -
                       m["gradients_bytes"].get<int64_t>() - m["optimizer_state_bytes"].get<int64_t>() - act;
  char rest_line[64];
  std::snprintf(rest_line, sizeof rest_line, "  rest %28.2f", static_cast<double>(rest) / 1048576.0);
  EXPECT_NE(r.output.find(rest_line), std::string::npos) << rest_line << "\n" << r.output;
  EXPECT_EQ(r.output.find("fused_step"), std::string::npos) << "no fused step in the transformer: no note";
  EXPECT_LE(blocks, act) << "the blocks' activations are part of the step's";
  EXPECT_GT(blocks, act / 2);
  // The timeline: every allocation and free of the step; it rises in forward and falls back.
  std::ifstream d(c.dir / "prof" / "memory_timeline.dat");
  std::string line;
  std::getline(d, line);
  std::vector<double> mib;
  for (double ms, m; d >> ms >> m;) mib.push_back(m);
  ASSERT_GT(mib.size(), 50u);
  const double top = *std::max_element(mib.begin(), mib.end());
  EXPECT_NEAR(top, j["step_peak_tensor_bytes"].get<double>() / 1048576.0, 1e-3);
  EXPECT_GT(top, mib.front() + 0.5 * act / 1048576.0);
  EXPECT_LT(mib.back(), top);

  // Checkpointed blocks keep only their input: the table shows it.
  auto rc = tt::test::run(tt::test::tt_run_bin() + " --profile-memory " + (c.dir / "pc.yaml").string() + " --run-dir " +
                          (c.dir / "profc").string());
  ASSERT_EQ(rc.rc, 0) << rc.output;
  const json k = tt::test::read_json(c.dir / "profc" / "memory_profile.json");
  ASSERT_EQ(k["blocks"].size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_LT(k["blocks"][i]["activation_bytes"].get<int64_t>(), j["blocks"][i]["activation_bytes"].get<int64_t>() / 3);

  // With micro-batches the per-block bytes are per micro-batch (each one's are freed before the
  // next runs): two micro-batches of 2 keep about half of what one batch of 4 keeps, and the
  // table says so.
  auto rm = tt::test::run(tt::test::tt_run_bin() + " --profile-memory " + (c.dir / "p.yaml").string() + " --run-dir " +
                          (c.dir / "profm").string() + " trainer.micro_batch_size=2");
  ASSERT_EQ(rm.rc, 0) << rm.output;
  const json mj = tt::test::read_json(c.dir / "profm" / "memory_profile.json");
  EXPECT_EQ(mj["micro_batches"], 2);
  ASSERT_EQ(mj["blocks"].size(), 2u);
  int64_t micro_blocks = 0;
  for (size_t i = 0; i < 2; ++i) {
    const double half = j["blocks"][i]["activation_bytes"].get<double>() / 2;
    EXPECT_NEAR(mj["blocks"][i]["activation_bytes"].get<double>(), half, 0.1 * half) << i;
    micro_blocks += mj["blocks"][i]["activation_bytes"].get<int64_t>();
  }
  EXPECT_LE(micro_blocks, mj["memory"]["activations_bytes"].get<int64_t>()) << rm.output;
  EXPECT_NE(rm.output.find("activations are per micro-batch (the step ran 2;"), std::string::npos) << rm.output;
  EXPECT_EQ(r.output.find("per micro-batch"), std::string::npos) << "one batch: no note";

  // The plugin itself, listed in any pipeline: the same files, for the step it names.
  std::ofstream(c.dir / "pp.yaml") << c.base() << "plugins: [{name: profile-memory, step: 2}]\n";
  auto rp = tt::test::run(tt::test::tt_run_bin() + " -q " + (c.dir / "pp.yaml").string() + " --run-dir " +
                          (c.dir / "profp").string());
  ASSERT_EQ(rp.rc, 0) << rp.output;
  const json q = tt::test::read_json(c.dir / "profp" / "memory_profile.json");
  EXPECT_EQ(q["step"], 2);
  ASSERT_EQ(q["blocks"].size(), 2u);
  EXPECT_GT(q["blocks"][0]["activation_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(fs::exists(c.dir / "profp" / "memory_timeline.dat"));
  // gnuplot's log stays only where a plot is missing (an empty one was left beside every plot)
  for (const char* run : {"prof", "profc", "profp"})
    EXPECT_EQ(fs::exists(c.dir / run / "gnuplot.log"), !fs::exists(c.dir / run / "memory_timeline.png")) << run;
  // --profile-memory on a pipeline that lists it already says so.
  auto twice = tt::test::run(tt::test::tt_run_bin() + " --profile-memory " + (c.dir / "pp.yaml").string());
  EXPECT_EQ(twice.rc, 2) << twice.output;
  EXPECT_NE(twice.output.find("lists profile-memory itself"), std::string::npos) << twice.output;
}

// compare.* overrides on the command line change the comparison (steps, warm-up, baseline);
// the other overrides reach every variant's pipeline.
TEST(Compare, CompareOverridesChangeTheComparisonAndTheOthersEachVariant) {
  Cmp c;
  auto r = c.run("ovr", R"(compare:
  steps: 5
  warmup_steps: 1
  variants:
    baseline: {}
    chunked: {plugins: [{name: attention, kernel: chunked}]}
)",
                 "compare.steps=2 compare.warmup_steps=0 trainer.batch_size=2");
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const std::string v : {"baseline", "chunked"}) {
    EXPECT_EQ(tt::test::step_lines(c.dir / "ovr" / v / "metrics.jsonl").size(), 2u) << v;
    const json s = tt::test::summary_of(c.dir / "ovr" / v);
    EXPECT_EQ(s["batch_size"], 2) << v;
  }
  // trainer.max_steps does not set a comparison's length (it ran compare.steps, silently)
  auto steps = c.run("max", "compare: {steps: 2, warmup_steps: 0, variants: {baseline: {}}}\n", "trainer.max_steps=4");
  ASSERT_EQ(steps.rc, 0) << steps.output;
  EXPECT_EQ(tt::test::step_lines(c.dir / "max" / "baseline" / "metrics.jsonl").size(), 2u);
  EXPECT_HAS(steps.output, "compare: trainer.max_steps=4 does not set how long the variants run: each runs 0 warm-up + "
                           "2 timed steps (--warmup N and --steps N set them)");
  // pipelines named on the command line have no compare: section to change
  std::ofstream(c.dir / "a.yaml") << c.base();
  std::ofstream(c.dir / "b.yaml") << c.base();
  auto bad = tt::test::run(tt::test::tt_run_bin() + " --compare " + (c.dir / "a.yaml").string() + " " +
                           (c.dir / "b.yaml").string() + " compare.steps=2");
  EXPECT_EQ(bad.rc, 2) << bad.output;
  EXPECT_NE(bad.output.find("'compare.steps=2' changes a compare: section"), std::string::npos) << bad.output;
}

// Under the table: what its columns are, and what the times were measured on (the CPU, LibTorch,
// the load average), also in compare.json; compare.csv and compare.json carry the whole process's
// peak RSS beside the training loop's, which the RSS column shows.
TEST(Compare, TheTableSaysWhatItsColumnsAreAndWhatItRanOn) {
  Cmp c;
  // two threads where the process may use two cores: the footer names the variants whose threads differ
  const bool two = tt::usable_cores() >= 2;
  auto r = c.run("legend", "compare: {steps: 2, warmup_steps: 0, variants: {baseline: {}, checkpoint: {plugins: "
                           "[checkpoint]}, two: {set: {trainer.threads: 2}}, b8: {set: {trainer.batch_size: 8}}}}\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "  MiB of tensors (tt's allocator): peak, the most live at once, and its parts params..rest "
                       "(rest: backward's working memory, e.g. the blocks checkpointing re-runs, and what plugins hold "
                       "unreported); RSS: the training loop's peak resident set (the whole process's is "
                       "process_peak_rss_bytes in compare.json); step ms: the median step after the warm-up; vs base: "
                       "the ratio to baseline\n");
  EXPECT_HAS(r.output, "  on " + tt::cpu_model() + " (" + std::to_string(tt::usable_cores()) + " cores), LibTorch " +
                           TT_TORCH_VERSION_STRING +
                           (two ? ", 2 threads per variant (1: baseline, checkpoint, b8); the machine's load average "
                                : ", 1 thread per variant; the machine's load average "));
  // a loss summed over the batch scales with it: the variants of another batch size are named
  EXPECT_HAS(r.output, "  ! batch sizes differ (4: baseline, checkpoint, two; 8: b8): a loss summed over the batch");
  EXPECT_EQ(r.output.find("different models or data"), std::string::npos) << r.output;  // variants of one pipeline
  const json doc = tt::test::read_json(c.dir / "legend" / "compare.json");
  EXPECT_EQ(doc["machine"]["cpu"], tt::cpu_model());
  EXPECT_EQ(doc["machine"]["libtorch"], TT_TORCH_VERSION_STRING);
  // Linux's /proc/loadavg is always readable: the figures are there, not null
  for (const char* k : {"load_average_before", "load_average_after"}) {
    ASSERT_TRUE(doc["machine"].contains(k)) << doc["machine"];
    ASSERT_TRUE(doc["machine"][k].is_number()) << doc["machine"];
    EXPECT_GE(doc["machine"][k].get<double>(), 0.0);
  }
  const auto rows = csv_rows(c.dir / "legend" / "compare.csv");
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    const json s = tt::test::summary_of(c.dir / "legend" / row.at("variant"));
    EXPECT_EQ(std::stoll(row.at("process_peak_rss_bytes")), s["memory"]["process_peak_rss_bytes"].get<int64_t>());
    EXPECT_GE(std::stoll(row.at("process_peak_rss_bytes")), std::stoll(row.at("peak_rss_bytes")));
    EXPECT_EQ(s["machine"]["cpu"], tt::cpu_model());  // each run's summary says it too
  }
  for (const auto& [name, v] : by_name(doc)) {
    EXPECT_EQ(v["process_peak_rss_bytes"],
              tt::test::summary_of(c.dir / "legend" / name)["memory"]["process_peak_rss_bytes"]);
  }
}

// What a plugin reports holding (tt::report_held) is a line of the breakdown, and the rest is
// the peak less every line above it, as in compare's table and the summary.
TEST(ProfileMemory, WhatAPluginReportsHoldingIsALineOfTheBreakdown) {
  Cmp c;
  auto r = c.run("profh", "plugins: [{name: test-hold, bytes: 4MiB, report: true}]\n", "--profile-memory");
  ASSERT_EQ(r.rc, 0) << r.output;
  const json m = tt::test::read_json(c.dir / "profh" / "memory_profile.json")["memory"];
  ASSERT_EQ(m["held_bytes"], 4194304);
  const auto line = [](const char* name, double bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %-22s %10.2f", name, bytes / 1048576.0);
    return std::string(buf);
  };
  EXPECT_HAS(r.output, line("held by plugins", 4194304));
  int64_t rest = m["peak_tensor_bytes"].get<int64_t>();
  for (const char* k : {"parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes", "held_bytes"})
    rest -= m[k].get<int64_t>();
  EXPECT_EQ(m["rest_bytes"].get<int64_t>(), rest);
  EXPECT_HAS(r.output, line("rest", static_cast<double>(rest)));
}

// An out-of-memory refusal under trainer.memory_cap says how much of the peak plugins hold.
TEST(ProfileMemory, AnOutOfMemoryRefusalNamesWhatPluginsHold) {
  Cmp c;
  auto r = c.run("oh", "plugins: [{name: test-hold, bytes: 4MiB, report: true}]\n", "trainer.memory_cap=4MiB -q");
  EXPECT_EQ(r.rc, 4) << r.output;
  EXPECT_HAS(r.output, "out of memory at step 1");
  EXPECT_HAS(r.output, " (plugins hold 4.00 MiB of it: test-hold's buffer). ");
}

// The topic model's fused step runs only without plugins, and the profile is a plugin: the
// profiled step is the usual one, and the output says so (the same pipeline run plainly has no
// gradient tensors; the profile shows them).
TEST(ProfileMemory, AModelWithAFusedStepIsProfiledOnTheUsualStepAndSaysSo) {
  Cmp c;
  std::ofstream(c.dir / "topic.yaml") << tt::test::topic_yaml(c.dir / "runs");
  auto r = tt::test::run(tt::test::tt_run_bin() + " --profile-memory " + (c.dir / "topic.yaml").string() +
                         " --run-dir " + (c.dir / "tprof").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("note: model.fused_step is on"), std::string::npos) << r.output;
  // the console shows the profile, the run's log lines (its model's report) are in its log.txt
  EXPECT_EQ(r.output.find("] [info] "), std::string::npos) << r.output;
  EXPECT_HAS(tt::test::read_file(c.dir / "tprof" / "log.txt"), "profile-memory: step 3 peaked at");
  const json j = tt::test::read_json(c.dir / "tprof" / "memory_profile.json");
  EXPECT_GT(j["memory"]["gradients_bytes"].get<int64_t>(), 0) << "the usual step: gradient tensors";
  auto plain = tt::test::run(tt::test::tt_run_bin() + " -q " + (c.dir / "topic.yaml").string() +
                             " trainer.max_steps=3 --run-dir " + (c.dir / "tplain").string());
  ASSERT_EQ(plain.rc, 0) << plain.output;
  const json s = tt::test::summary_of(c.dir / "tplain");
  EXPECT_EQ(s["memory"]["gradients_bytes"], 0) << "the fused step: no gradient tensors";
  // with the fused step off, no note
  auto off = tt::test::run(tt::test::tt_run_bin() + " --profile-memory " + (c.dir / "topic.yaml").string() +
                           " model.fused_step=false --run-dir " + (c.dir / "tprof-off").string());
  ASSERT_EQ(off.rc, 0) << off.output;
  EXPECT_EQ(off.output.find("note: model.fused_step"), std::string::npos) << off.output;
}

// A variant whose plugin acts on a part its model does not have (checkpoint on the topic model,
// two matrices and no blocks) is refused by the dry run, as the run itself would refuse it.
TEST(Compare, DryRunRefusesAVariantWhosePluginTheModelCannotTake) {
  Cmp c;
  std::ofstream(c.dir / "t.yaml") << tt::test::topic_yaml(
      c.dir / "runs", "", "compare:\n  variants:\n    plain: {}\n    ckpt: {plugins: [checkpoint]}\n");
  auto r = tt::test::run(tt::test::tt_run_bin() + " --dry-run " + (c.dir / "t.yaml").string());
  int ckpt_line = 0;  // the variant's line in t.yaml
  {
    std::ifstream in(c.dir / "t.yaml");
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      if (line.rfind("    ckpt:", 0) == 0) ckpt_line = n;
  }
  ASSERT_GT(ckpt_line, 0);
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("compare: variant 'plain': valid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("compare: variant 'ckpt': refused: " + (c.dir / "t.yaml").string() +
                          ":" + std::to_string(ckpt_line) + ":5: compare.variants.ckpt: plugins[0] (checkpoint) acts on a model's block_stack, and model "
                          "'topic' has none"),
            std::string::npos)
      << r.output;
}

// A plugin that evaluates other weights in place of the trained ones (the ema example) reports
// the metrics renamed <plugin>_<metric>: that variant's row shows its avg_val_loss under val_loss,
// marked with a footnote, and names the metric in compare.json and compare.csv.
TEST(Compare, ValidationColumnShowsAVariantsValLossThatItsPluginRenamed) {
  Cmp c;
  auto r = c.run("renamed", R"(compare:
  steps: 3
  warmup_steps: 0
  variants:
    baseline: {}
    averaged: {plugins: [test-rename-eval]}
)",
                 "", c.base(true));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json j = tt::test::read_json(c.dir / "renamed" / "compare.json");
  EXPECT_EQ(j["validation_metric"], "val_loss");
  auto v = by_name(j);
  const json summary = tt::test::summary_of(c.dir / "renamed" / "averaged");
  ASSERT_TRUE(summary["validation"].contains("avg_val_loss")) << summary.dump();
  ASSERT_FALSE(summary["validation"].contains("val_loss")) << summary.dump();
  const double loss = summary["validation"]["avg_val_loss"].get<double>();
  EXPECT_EQ(v["averaged"]["validation_metric"], "avg_val_loss");
  EXPECT_EQ(v["baseline"]["validation_metric"], "val_loss");
  std::map<std::string, std::map<std::string, std::string>> rows;
  for (const auto& row : csv_rows(c.dir / "renamed" / "compare.csv")) rows[row.at("variant")] = row;
  ASSERT_FALSE(rows["averaged"]["val_loss"].empty());
  EXPECT_NEAR(std::stod(rows["averaged"]["val_loss"]), loss, 1e-6);
  EXPECT_EQ(rows["averaged"]["validation_metric"], "avg_val_loss");
  char buf[32];
  std::snprintf(buf, sizeof buf, " %.4f*\n", loss);
  EXPECT_NE(r.output.find(buf), std::string::npos) << buf << r.output;
  EXPECT_NE(r.output.find("* averaged: avg_val_loss"), std::string::npos) << r.output;
  // the unmarked rows leave room for the mark: the figures stay aligned
  std::snprintf(buf, sizeof buf, " %.4f \n", v["baseline"]["validation"]["val_loss"].get<double>());
  EXPECT_NE(r.output.find(buf), std::string::npos) << buf << r.output;
}

// A variant's step time is the median of every timed step, whatever trainer.log_every the
// pipeline sets (it sets which steps write a metrics line, and the times come from those lines).
TEST(Compare, AStepTimeIsTheMedianOfEveryTimedStepWhateverThePipelinesLogEvery) {
  Cmp c;
  auto r = c.run("every", R"(compare:
  steps: 4
  warmup_steps: 1
  variants:
    baseline: {}
    checkpoint: {plugins: [checkpoint]}
)", "trainer.log_every=5");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto v = by_name(tt::test::read_json(c.dir / "every" / "compare.json"));
  for (const char* name : {"baseline", "checkpoint"}) {
    ASSERT_TRUE(v[name]["ok"].get<bool>()) << r.output;
    EXPECT_EQ(v[name]["timed_steps"], 4) << name << " " << v[name].dump();
  }
}

// samples/s is the throughput at the step time shown beside it: the examples a step takes over
// the median step time (with an even count of steps, the median of the steps' own rates is not
// that), and with repeats over the median of the runs, not the last run's rate. The row's other
// columns are the median run's (of two, the faster), each run's RSS listed in compare.json.
TEST(Compare, SamplesPerSecondIsTheBatchOverTheStepTimeShownAndTheRowIsTheMedianRuns) {
  Cmp c;
  auto r = c.run("rate", R"(compare:
  steps: 2
  warmup_steps: 1
  repeats: 2
  variants:
    baseline: {}
    checkpoint: {plugins: [checkpoint]}
)");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto v = by_name(tt::test::read_json(c.dir / "rate" / "compare.json"));
  std::map<std::string, std::map<std::string, std::string>> csv;
  for (const auto& row : csv_rows(c.dir / "rate" / "compare.csv")) csv[row.at("variant")] = row;
  for (const char* name : {"baseline", "checkpoint"}) {
    const json& x = v[name];
    ASSERT_TRUE(x["ok"].get<bool>()) << r.output;
    const double ms = x["median_step_ms"].get<double>(), expected = 4 * 1e3 / ms;  // batch_size 4
    EXPECT_NEAR(x["samples_per_s"].get<double>(), expected, 1e-9 * expected) << name << "\n" << r.output;
    EXPECT_NEAR(std::stod(csv[name].at("samples_per_s")), expected, 1e-3) << name;
    char cell[32];
    std::snprintf(cell, sizeof cell, " %.2f ", expected);  // the table's samples/s column
    EXPECT_NE(r.output.find(cell), std::string::npos) << name << ": " << cell << "\n" << r.output;
    const auto per_run_ms = x["step_ms_per_run"].get<std::vector<double>>();
    const auto per_run_rss = x["peak_rss_bytes_per_run"].get<std::vector<int64_t>>();
    ASSERT_EQ(per_run_ms.size(), 2u);
    ASSERT_EQ(per_run_rss.size(), 2u);
    // the median run's (of two, the faster: one run's figures, not their mean), not the last run's
    const size_t faster = per_run_ms[0] <= per_run_ms[1] ? 0 : 1;
    EXPECT_DOUBLE_EQ(ms, per_run_ms[faster]) << name;
    EXPECT_EQ(x["peak_rss_bytes"].get<int64_t>(), per_run_rss[faster]) << name << " " << x.dump();
  }
}

// Under a cap the whole batch does not fit: oom-guard runs out at the first step, halves the
// micro-batch and trains on. Its row's peak is the one since that retry (what the micro-batch it
// kept holds, as a run set to that micro-batch does), marked, with the process's peak (the
// attempt that ran out) beside it, not the failed attempt's as if it were the technique's.
TEST(Compare, OomGuardsRowShowsThePeakSinceItsRetryAndSaysSo) {
  Cmp c;
  auto sizes = c.run("sizes", R"(compare:
  steps: 2
  warmup_steps: 1
  variants:
    whole: {}
    half: {set: {trainer.micro_batch_size: 2}}
)");
  ASSERT_EQ(sizes.rc, 0) << sizes.output;
  auto s = by_name(tt::test::read_json(c.dir / "sizes" / "compare.json"));
  const int64_t whole = s["whole"]["peak_tensor_bytes"].get<int64_t>(), half = s["half"]["peak_tensor_bytes"].get<int64_t>();
  ASSERT_LT(half, whole);
  const int64_t cap = (half + whole) / 2;
  auto r = c.run("guard", "compare:\n  steps: 2\n  warmup_steps: 1\n  baseline: whole\n  variants:\n    whole: {}\n"
                 "    half: {set: {trainer.micro_batch_size: 2}}\n"
                 "    guarded: {plugins: [oom-guard], set: {trainer.memory_cap: " + std::to_string(cap) + "}}\n");
  ASSERT_EQ(r.rc, 0) << r.output;
  auto v = by_name(tt::test::read_json(c.dir / "guard" / "compare.json"));
  const json& g = v["guarded"];
  ASSERT_TRUE(g["ok"].get<bool>()) << r.output;
  ASSERT_EQ(g["micro_batch_size"], 2) << r.output;
  const int64_t shown = g["peak_tensor_bytes"].get<int64_t>(), process = g.value("process_peak_tensor_bytes", int64_t{-1});
  const int64_t half_now = v["half"]["peak_tensor_bytes"].get<int64_t>();
  // the micro-batch it kept holds what a run set to it holds; the failed attempt reached more
  EXPECT_NEAR(static_cast<double>(shown), static_cast<double>(half_now), 0.03 * half_now) << r.output;
  EXPECT_GT(process, shown) << r.output;
  EXPECT_TRUE(g.value("peak_since_oom_retry", false));
  EXPECT_FALSE(v["half"].value("peak_since_oom_retry", true));
  EXPECT_EQ(v["half"]["process_peak_tensor_bytes"], v["half"]["peak_tensor_bytes"]);
  // the ratio and the rest are of the peak shown
  EXPECT_NEAR(g["peak_vs_baseline"].get<double>(), double(shown) / v["whole"]["peak_tensor_bytes"].get<double>(), 1e-9);
  EXPECT_EQ(g["rest_bytes"].get<int64_t>(), shown - g["parameters_bytes"].get<int64_t>() -
                                                g["gradients_bytes"].get<int64_t>() -
                                                g["optimizer_state_bytes"].get<int64_t>() -
                                                g["activations_bytes"].get<int64_t>());
  std::map<std::string, std::map<std::string, std::string>> csv;
  for (const auto& row : csv_rows(c.dir / "guard" / "compare.csv")) csv[row.at("variant")] = row;
  EXPECT_EQ(std::stoll(csv["guarded"].at("peak_tensor_bytes")), shown);
  EXPECT_EQ(std::stoll(csv["guarded"].at("process_peak_tensor_bytes")), process);
  // the table marks the row and says what the peak is, and the process's peak
  EXPECT_NE(r.output.find(tt::format_mib(shown) + "+"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  + guarded: peak since its out-of-memory retry, at micro-batch 2; the process's peak, the "
                          "attempt that ran out included, was " + tt::format_mib(process) + " MiB"),
            std::string::npos)
      << r.output;
}

// A variant's child gives back its library pages before training as a run of its own does: the
// compare process gives back its own first (the kernel leaves a page that another process maps),
// so the child's release and peak RSS are what the pipeline has alone. Where other processes map
// the same libraries meanwhile (tests in parallel), a run alone releases little too: skipped.
// (The test process maps them too and gives its pages back before each run.)
TEST(Compare, AVariantReleasesItsLibraryPagesAsARunAloneDoes) {
  if (!std::getenv("TT_TEST_ALONE"))
    GTEST_SKIP() << "run by ctest's serial entry Compare.LibraryPagesWithNoOtherTestRunning (TT_TEST_ALONE=1): "
                    "tests running beside it map the same libraries";
  Cmp c;
  std::ofstream(c.dir / "alone.yaml") << c.base();
  // this test process maps the libraries too: its pages go first, before each run
  tt::Meter::release_library_pages();
  // run as this test's child (wait4: that process's own peak RSS, the kernel's)
  const std::string cmd = "exec " + tt::test::tt_run_bin() + " " + (c.dir / "alone.yaml").string() +
                          " trainer.max_steps=3 -q --run-dir " + (c.dir / "alone").string() + " > " +
                          (c.dir / "alone.out").string() + " 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage child{};
  ASSERT_EQ(wait4(pid, &status, 0, &child), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << tt::test::read_file(c.dir / "alone.out");
  const json alone = tt::test::summary_of(c.dir / "alone")["memory"];
  const int64_t released_alone = alone["library_pages_released_bytes"].get<int64_t>();
  if (released_alone < (20 << 20))
    GTEST_SKIP() << "a run alone released " << released_alone
                 << " bytes of library pages: other processes map the same libraries now";
  // process_peak_rss_bytes is the whole process's: its end reads back none of the pages it released
  // (the libraries' static teardown did, ~30 MiB after summary.json, seen by /usr/bin/time and a
  // container)
  EXPECT_LE(int64_t{child.ru_maxrss} * 1024, alone["process_peak_rss_bytes"].get<int64_t>() + (2 << 20))
      << alone.dump();
  tt::Meter::release_library_pages();
  auto r = c.run("pages", R"(compare:
  steps: 2
  warmup_steps: 1
  variants:
    baseline: {}
)");
  ASSERT_EQ(r.rc, 0) << r.output;
  const json in_compare = tt::test::summary_of(c.dir / "pages" / "baseline")["memory"];
  EXPECT_GT(in_compare["library_pages_released_bytes"].get<int64_t>(), released_alone / 2)
      << "alone: " << alone.dump() << "\nin compare: " << in_compare.dump();
  EXPECT_LT(in_compare["peak_rss_bytes"].get<double>(), 1.15 * alone["peak_rss_bytes"].get<double>())
      << "alone: " << alone.dump() << "\nin compare: " << in_compare.dump();
}

// README's count of configs/compare-lm.yaml's variants is the file's.
TEST(Compare, ReadmeCountsTheVariantsOfCompareLm) {
  std::ifstream cfg(tt::test::source_dir() + "/configs/compare-lm.yaml");
  int variants = 0;
  bool in_variants = false;
  for (std::string line; std::getline(cfg, line);) {
    if (line == "  variants:") in_variants = true;
    else if (in_variants && line.rfind("    ", 0) == 0 && line.size() > 4 && line[4] != ' ' && line[4] != '#') ++variants;
  }
  ASSERT_GT(variants, 1);
  std::ifstream readme(tt::test::source_dir() + "/README.md");
  std::string said;
  for (std::string line; std::getline(readme, line);)
    if (line.find("tt-run configs/compare-lm.yaml") != std::string::npos && line.find(" variants") != std::string::npos)
      said = line;
  EXPECT_NE(said.find("# " + std::to_string(variants) + " variants"), std::string::npos)
      << "configs/compare-lm.yaml has " << variants << " variants; README says: " << said;
}

// A slow run's steps/s is printed to three significant digits (0.083 was '0.1'); a resume's is
// said to be of the steps it took.
TEST(Compare, ARunsStepsPerSecondIsPrintedToThreeSignificantDigitsAndAResumesAsItsOwn) {
  Cmp c;
  std::ofstream(c.dir / "slow.yaml") << c.base() << "plugins: [{name: test-hold, bytes: 1KiB, step_sleep_ms: 150}]\n";
  auto r = tt::test::run("TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt::test::tt_run_bin() + " " +
                         (c.dir / "slow.yaml").string() + " trainer.max_steps=3 trainer.progress=off --run-dir " +
                         (c.dir / "slow").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const double sps = tt::test::summary_of(c.dir / "slow")["steps_per_second"].get<double>();
  ASSERT_LT(sps, 10.0) << r.output;  // below 10: one decimal is two significant digits or fewer
  const size_t at = r.output.find(" steps/s");
  ASSERT_NE(at, std::string::npos) << r.output;
  const size_t from = r.output.rfind(' ', at - 1) + 1;
  const std::string printed = r.output.substr(from, at - from);
  int significant = 0;
  bool leading = true;
  for (char ch : printed)
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      leading = leading && ch == '0';
      if (!leading) ++significant;
    }
  EXPECT_GE(significant, 3) << printed << "\n" << r.output;
  EXPECT_NEAR(std::stod(printed), sps, 0.005 * sps) << printed << "\n" << r.output;
  // a resume's rate is of the steps it took: said so beside the run's step count
  auto resumed = tt::test::run("TT_PLUGIN_PATH=" TT_TEST_MODULE_DIR " " + tt::test::tt_run_bin() + " --resume " +
                               (c.dir / "slow").string() + " trainer.max_steps=5");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("), 2 in this process at "), std::string::npos) << resumed.output;
}
