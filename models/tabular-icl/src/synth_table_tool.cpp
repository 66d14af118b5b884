// tt-data synth-table: one table drawn from the pretraining prior (prior.h's sample_prior_table,
// the prior's defaults but for the counts given here) written as CSV: a header f0,...,f{F-1},target
// and one row per line, the class as an integer 0..C-1. Pretraining draws table i from seed
// mix(run seed, i); a benchmark takes seeds far from those (the default, 1e9 + 7) so that its
// tables are held out. Every class gets at least 2 rows (what a stratified split needs): a class
// the prior left with fewer takes the last rows of the largest class, so a table the prior already
// gave 2 rows a class is written as drawn.
#include "synth_table_tool.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "prior.h"
#include "table.h"
#include "tt/cli.h"
#include "tt/error.h"

namespace tt::tab {

namespace {
// `path` opened for writing, its directory made first (as the other tt-data tools make theirs);
// a ConfigError naming the option and the reason where it cannot be.
std::ofstream open_output(const std::string& path, const char* option) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(path, ec).parent_path();
  if (!ec) std::filesystem::create_directories(dir, ec);
  TT_CHECK_AS(ConfigError, !ec, "cannot write ", option, " ", path, ": cannot make its directory ", dir.string(), " (",
              ec.message(), ")");
  std::ofstream f(path);
  TT_CHECK_AS(ConfigError, f.good(), "cannot write ", option, " ", path, ": ", std::strerror(errno));
  return f;
}
}  // namespace

int synth_table_tool(const std::vector<std::string>& args) {
  int64_t features = 10, classes = 2, rows = 1000;
  std::string seed_text = "1000000007";
  double node_target_share = -1;
  std::string out;
  CLI::App app{"one table drawn from tabular-icl's pretraining prior, written as CSV (f0,...,target)",
               "tt-data synth-table"};
  app.add_option("--features", features, "feature columns")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--classes", classes, "classes (2 to 1000; the model tells 10 apart per pass, more through grouped members)")
      ->capture_default_str()
      ->check(CLI::Range(2, static_cast<int>(kMaxTableClasses)));
  app.add_option("--rows", rows, "rows")->capture_default_str()->check(CLI::Range(4, 10000000));
  app.add_option("--seed", seed_text, "the table's seed, 0 to 2^64-1 (the same seed, the same table)")
      ->capture_default_str();
  app.add_option("--node-target-share", node_target_share,
                 "chance that the class is a node of the causal graph rather than a function of the features "
                 "(default: the prior's, 0.3)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--out", out, "the CSV file to write")->required();
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, app.get_name());
  }
  TT_CHECK_AS(ConfigError, rows >= 2 * classes, "--rows ", rows, " is fewer than 2 per class (", classes, " classes)");
  // CLI11 reads "-1" into an unsigned seed as 2^64-1 and a number past 2^64 as its largest value
  uint64_t seed = 0;
  const auto [end, err] = std::from_chars(seed_text.data(), seed_text.data() + seed_text.size(), seed);
  TT_CHECK_AS(ConfigError, err == std::errc() && end == seed_text.data() + seed_text.size() && !seed_text.empty(),
              "--seed must be a whole number from 0 to 18446744073709551615, got '", seed_text, "'");
  // NaN passes CLI11's range check (every comparison with it is false)
  TT_CHECK_AS(ConfigError, app.count("--node-target-share") == 0 || (node_target_share >= 0 && node_target_share <= 1),
              "--node-target-share must be in [0, 1], got ", node_target_share);
  PriorOptions o = Options::defaults(prior_schema(), "data").to<PriorOptions>();
  o.rows = rows;
  o.min_features = o.max_features = features;
  o.min_classes = o.max_classes = classes;
  if (node_target_share >= 0) o.node_target_share = node_target_share;
  const Batch b = sample_prior_table(o, seed);
  const at::Tensor x = b.at("x")[0].contiguous(), y = b.at("y")[0].contiguous();
  std::ofstream f = open_output(out, "--out");
  for (int64_t j = 0; j < features; ++j) f << 'f' << j << ',';
  f << "target\n";
  const float* xp = x.data_ptr<float>();
  std::vector<int64_t> label(y.data_ptr<int64_t>(), y.data_ptr<int64_t>() + rows);
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(classes));  // each class's rows, ascending
  for (int64_t i = 0; i < rows; ++i) members[static_cast<size_t>(label[i])].push_back(i);
  // rows >= 2 * classes: while a class has fewer than 2 rows, the largest has at least 3
  for (auto& m : members)
    while (m.size() < 2) {
      auto& largest = *std::max_element(members.begin(), members.end(),
                                        [](const auto& a, const auto& b) { return a.size() < b.size(); });
      const int64_t r = largest.back();
      largest.pop_back();
      label[static_cast<size_t>(r)] = &m - members.data();
      m.push_back(r);
    }
  char buf[32];
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < features; ++j) {
      std::snprintf(buf, sizeof buf, "%.9g,", static_cast<double>(xp[i * features + j]));
      f << buf;
    }
    f << label[static_cast<size_t>(i)] << '\n';
  }
  f.close();
  TT_CHECK_AS(WriteError, f.good(), "writing ", out, " failed (is the disk full?)");
  return 0;
}

// tt-data split-table: the lines of the rows stratified_split puts on each side, copied as they are.
int split_table_tool(const std::vector<std::string>& args) {
  std::string csv, label, train_out, test_out, impute = "none";
  double test_fraction = 0.3;
  uint64_t seed = 0;
  CLI::App app{"a CSV table's stratified train/test split (the rows tabular-csv and scikit-learn's train_test_split "
               "pick) written as two CSV files of the table's own lines",
               "tt-data split-table"};
  app.add_option("--csv", csv, "the table (a header row, then one row per line)")->required();
  app.add_option("--label", label, "the label column (default: the last one)");
  app.add_option("--test-fraction", test_fraction, "share of the rows in the test file (data.test_fraction)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", seed, "split seed (data.split_seed; numpy's random_state)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, uint64_t{0xFFFFFFFFull}));
  app.add_option("--impute", impute, "none: a missing value is an error; mean: allowed (the lines are copied as they are)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "mean"}));
  app.add_option("--train-out", train_out, "the training rows' CSV file to write")->required();
  app.add_option("--test-out", test_out, "the test rows' CSV file to write")->required();
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, app.get_name());
  }
  TT_CHECK_AS(ConfigError, test_fraction > 0 && test_fraction < 1, "--test-fraction ", test_fraction,
              " must be between 0 and 1 (exclusive)");
  TT_CHECK_AS(ConfigError, std::filesystem::is_regular_file(csv), "--csv ", csv, " is not a file: check the path");
  for (const auto& [opt, out] : {std::pair{"--train-out", train_out}, std::pair{"--test-out", test_out}})
    TT_CHECK_AS(ConfigError, !same_file(out, csv), opt, " ", out,
                " is the --csv table itself; name another file (the table would be overwritten)");
  TT_CHECK_AS(ConfigError, !same_file(train_out, test_out), "--train-out and --test-out name one file (", train_out,
              "); give each side its own");
  CsvOptions o;
  if (!label.empty()) o.label = label;
  o.impute = impute;
  const Table t = read_csv(csv, o);
  const Split split = stratified_split(t, test_fraction, seed);
  // The file's lines by number (1-based), read the way read_csv read them.
  std::vector<std::string> lines{""};
  {
    std::ifstream in(csv);
    TT_CHECK_AS(ConfigError, in.good(), "cannot open ", csv);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  // a byte-order mark before the header is dropped here as read_csv drops it (the outputs get none)
  if (lines.size() > 1 && lines[1].rfind("\xEF\xBB\xBF", 0) == 0) lines[1].erase(0, 3);
  TT_CHECK(!t.line.empty() && t.line.front() >= 2, "internal: read_csv gave no file lines for ", csv);
  const int64_t header_line = [&] {  // the first line that is not blank
    for (size_t n = 1; n < lines.size(); ++n)
      if (!is_blank_line(lines[n])) return static_cast<int64_t>(n);
    return int64_t{1};
  }();
  for (const auto& [path, rows, option] :
       {std::tuple{train_out, &split.train, "--train-out"}, std::tuple{test_out, &split.test, "--test-out"}}) {
    std::ofstream f = open_output(path, option);
    f << lines[static_cast<size_t>(header_line)] << '\n';
    for (int64_t r : *rows) f << lines[static_cast<size_t>(t.line[static_cast<size_t>(r)])] << '\n';
    f.close();
    TT_CHECK_AS(WriteError, f.good(), "writing ", path, " failed (is the disk full?)");
  }
  std::printf("%s: %zu training rows -> %s, %zu test rows -> %s (stratified, test fraction %g, seed %llu)\n",
              csv.c_str(), split.train.size(), train_out.c_str(), split.test.size(), test_out.c_str(), test_fraction,
              static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace tt::tab
