// Data tools: registered by the modules that own them (tt::Registry::add_data_tool), found by
// name, and launched by tt-data, which links no module.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <sstream>

#include "data_test_util.h"
#include "topic_data.h"
#include "tt/module_loader.h"
#include "tt/npy.h"
#include "tt/registry.h"

namespace fs = std::filesystem;
using tt::test::quote;
using tt::test::run;
using tt::test::tt_data_bin;

namespace {


std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The line after the one listing `tool` in tt-data's list ("  NAME  description"), where the
// list says which module it comes from; "" if the tool is not listed.
std::string origin_line(const std::string& listing, const std::string& tool) {
  const auto lines = lines_of(listing);
  for (size_t i = 0; i + 1 < lines.size(); ++i)
    if (lines[i].rfind("  " + tool + " ", 0) == 0) return lines[i + 1];
  return "";
}

}  // namespace

TEST(DataTools, ARegisteredToolIsFoundByNameAndGetsItsArguments) {
  auto& reg = tt::Registry::global();
  auto seen = std::make_shared<std::vector<std::string>>();
  reg.add_data_tool("test-echo", "records its arguments", [seen](const std::vector<std::string>& args) {
    *seen = args;
    return args.empty() ? 2 : 0;
  });
  const tt::DataTool& tool = reg.data_tool("test-echo");
  EXPECT_EQ(tool.name, "test-echo");
  EXPECT_EQ(tool.description, "records its arguments");
  EXPECT_EQ(tool.origin, "built-in");
  EXPECT_EQ(tool.run({"--out", "dir", "x y"}), 0);
  EXPECT_EQ(*seen, (std::vector<std::string>{"--out", "dir", "x y"}));
  EXPECT_EQ(tool.run({}), 2);
  EXPECT_TRUE(seen->empty());
  bool listed = false;
  for (const auto& t : reg.data_tools()) listed = listed || (t.name == "test-echo" && t.origin == "built-in");
  EXPECT_TRUE(listed);
}

TEST(DataTools, RegistrationRefusesUnusableNamesDuplicatesAndNoFunction) {
  auto& reg = tt::Registry::global();
  const tt::DataToolRun ok = [](const std::vector<std::string>&) { return 0; };
  const auto refusal = [&](const std::string& name, const tt::DataToolRun& run) {
    try {
      reg.add_data_tool(name, "a tool", run);
    } catch (const tt::ModuleError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "data tool '" << name << "' was accepted";
    return std::string();
  };
  EXPECT_HAS(refusal("", ok), "must not be empty, start with '-' or hold spaces");
  EXPECT_HAS(refusal("--fetch", ok), "must not be empty, start with '-' or hold spaces");
  EXPECT_HAS(refusal("two words", ok), "must not be empty, start with '-' or hold spaces");
  EXPECT_HAS(refusal("test-no-run", nullptr), "data tool 'test-no-run' from built-in has no run function");
  reg.add_data_tool("test-twice", "the first", ok);
  EXPECT_HAS(refusal("test-twice", ok), "data tool 'test-twice' from built-in is already registered by built-in");
  EXPECT_EQ(reg.data_tool("test-twice").description, "the first");
}

TEST(DataTools, TheTopicModuleBringsSynthTopics) {
  // Loaded as tt-data loads it: the tool is the module's, not this test's copy of tt_topic_impl.
  ASSERT_TRUE(tt::ModuleLoader::global().load_by_name("model", "topic"));
  const tt::DataTool& tool = tt::Registry::global().data_tool("synth-topics");
  EXPECT_EQ(fs::path(tool.origin).filename(), "tt_model_topic.so");
  const auto dir = tt::test::temp_dir("datatools");
  const int rc =
      tool.run({"--n", "20", "--m", "8", "--k", "2", "--seed", "3", "--quiet", "--out", (dir / "o").string()});
  ASSERT_EQ(rc, 0);
  tt::topic::SyntheticDataset same(20, 8, 2, 150, 3);  // --avg-doc-length defaults to 150
  EXPECT_TRUE(torch::equal(tt::read_npy(dir / "o" / "X.npy"), same.counts()));
  EXPECT_EQ(tool.run({"--help"}), 0);
  EXPECT_EQ(tool.run({"--n", "20"}), 2);  // no --out
}

TEST(TtData, NoArgumentsListsTheToolsWithTheirModules) {
  const auto r = run(tt_data_bin());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "tt-data: name a tool");
  EXPECT_HAS(origin_line(r.output, "synth-topics"), "from model 'topic'");
  EXPECT_HAS(origin_line(r.output, "synth-topics"), "tt_model_topic.so");
  EXPECT_HAS(origin_line(r.output, "tokenizer"), "from model 'transformer'");
  EXPECT_HAS(origin_line(r.output, "fetch"), "from tt-data itself");
  EXPECT_HAS(r.output, "module search path: ");

  const auto help = run(tt_data_bin() + " --help");
  EXPECT_EQ(help.rc, 0) << help.output;
  EXPECT_HAS(origin_line(help.output, "synth-topics"), "from model 'topic'");
  EXPECT_HAS(help.output, "Exit codes: 0 done, 1 error, 2 bad command line or arguments, 130 interrupted.");
}

TEST(TtData, AToolRunsByNameWithItsOwnOptions) {
  auto r = run(tt_data_bin() + " synth-topics --help");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "tt-data synth-topics");
  EXPECT_HAS(r.output, "--avg-doc-length");
  const auto dir = tt::test::temp_dir("datatools");
  r = run(tt_data_bin() + " synth-topics --n 12 --m 6 --k 2 --avg-doc-length 5 --seed 4 --quiet --out " + quote(dir));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(tt::read_npy(dir / "X.npy").sizes(), (std::vector<int64_t>{12, 6}));
  r = run(tt_data_bin() + " tokenizer --help");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "--vocab-size");
}

// A tool's error starts "tt-data TOOL: error: ", as its command-line errors do, and names the
// tool once (synth-table's said "tt-data: error: tt-data synth-table: ...").
TEST(TtData, AToolsErrorNamesTheToolOnce) {
  const auto dir = tt::test::temp_dir("datatools");
  tt::test::write_text(dir / "plain", "a file, not a directory\n");
  auto r = run(tt_data_bin() + " synth-table --rows 10 --out " + quote(dir / "plain" / "t.csv"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_EQ(r.output.rfind("tt-data synth-table: error: cannot write --out " + (dir / "plain" / "t.csv").string() +
                               ": cannot make its directory " + (dir / "plain").string() + " (Not a directory)",
                           0),
            0u)
      << r.output;
  EXPECT_EQ(r.output.find("synth-table", 20), std::string::npos) << r.output;
  r = run(tt_data_bin() + " tokenizer --vocab-size 300 --input " + quote(dir / "none.txt") + " --out " +
          quote(dir / "t.model"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "tt-data tokenizer: error: --input: no such file or directory '" + (dir / "none.txt").string() + "'");
  fs::remove_all(dir);
}

// synth-table makes the directory of its --out (as synth-topics, tokenizer and fetch do), and
// refuses a seed CLI11 would read wrapped or clamped (-1, a number past 2^64) and a NaN share,
// which passes CLI11's range check.
TEST(TtData, SynthTableMakesItsDirectoryAndRefusesSeedsAndSharesItCannotUse) {
  const auto dir = tt::test::temp_dir("datatools");
  auto r = run(tt_data_bin() + " synth-table --rows 10 --features 3 --out " + quote(dir / "new" / "t.csv"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(tt::test::read_file(dir / "new" / "t.csv").substr(0, 16), "f0,f1,f2,target\n");
  const std::pair<std::string, std::string> bad[] = {
      {"--seed -1", "--seed must be a whole number from 0 to 18446744073709551615, got '-1'"},
      {"--seed 99999999999999999999", "got '99999999999999999999'"},
      {"--seed 3x", "got '3x'"},
      {"--node-target-share nan", "--node-target-share must be in [0, 1], got nan"},
  };
  for (const auto& [args, message] : bad) {
    r = run(tt_data_bin() + " synth-table --rows 10 " + args + " --out " + quote(dir / "bad.csv"));
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("tt-data synth-table: error: --", 0), 0u) << r.output;
    EXPECT_HAS(r.output, message);
    EXPECT_FALSE(fs::exists(dir / "bad.csv")) << args;
  }
  fs::remove_all(dir);
}

TEST(TtData, AnUnknownToolIsABadCommandLineListingTheTools) {
  auto r = run(tt_data_bin() + " synth-topic --n 5");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "unknown data tool 'synth-topic'; did you mean 'synth-topics'?");
  const auto from = r.output.find("Available data tools: ");
  ASSERT_NE(from, std::string::npos) << r.output;
  const std::string available = r.output.substr(from, r.output.find(". Searched", from) - from);
  for (const char* tool : {"fetch", "synth-topics", "tokenizer"}) EXPECT_HAS(available, tool);
  r = run(tt_data_bin() + " --n 5 synth-topics");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "'--n' is not a tool: name the tool first");
}
