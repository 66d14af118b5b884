// Every refusal of the module loader is explained; a pipeline naming a plugin fails
// before its directory is on the search path and works after.
//
// Modules are never unloaded and the registry is global, so a test cannot know which
// modules an earlier test in this process loaded: each one sets the search path it needs,
// asserts what holds either way, and runs tt-run where only a fresh process will do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "test_support.h"
#include "tt/compat.h"
#include "tt/error.h"
#include "tt/module.h"
#include "tt/module_loader.h"
#include "tt/registry.h"
#include "tt/trainer.h"

namespace {
const std::string kDir = TT_TEST_MODULE_DIR;

std::string refusal(const std::string& file) {
  try {
    tt::ModuleLoader::global().load_file(kDir + "/" + file);
  } catch (const tt::ModuleError& e) {
    return e.what();
  }
  return "";
}

// TT_PLUGIN_PATH for one test (unset with nullptr), restored when the test ends.
class PluginPath {
 public:
  explicit PluginPath(const char* value) {
    if (const char* old = std::getenv("TT_PLUGIN_PATH")) old_ = old;
    value ? setenv("TT_PLUGIN_PATH", value, 1) : unsetenv("TT_PLUGIN_PATH");
  }
  ~PluginPath() { old_ ? setenv("TT_PLUGIN_PATH", old_->c_str(), 1) : unsetenv("TT_PLUGIN_PATH"); }

 private:
  std::optional<std::string> old_;
};

bool plugin_registered(const std::string& name) {
  const auto names = tt::Registry::global().names(tt::Kind::Plugin);
  return std::find(names.begin(), names.end(), name) != names.end();
}
}  // namespace

TEST(Loader, LoadsAGoodModuleAndTrainsWithIt) {
  const std::string file = kDir + "/tt_plugin_test-good.so";
  tt::ModuleLoader::global().load_file(file);
  tt::ModuleLoader::global().load_file(file);  // twice is a no-op
  const auto loaded = tt::ModuleLoader::global().loaded();
  EXPECT_EQ(std::count_if(loaded.begin(), loaded.end(), [&](const tt::ModuleRecord& r) { return r.file == file; }), 1);
  const auto& c = tt::Registry::global().plugin("test-good");
  EXPECT_EQ(c.origin, file);
  EXPECT_NE(c.schema.find("bonus"), nullptr);

  auto out = tt::test::temp_dir("loader");
  auto p = tt::parse_pipeline(
      tt::test::topic_yaml(out, "  max_steps: 3\n", "plugins:\n  - {name: test-good, bonus: 100}\n"), "p.yaml");
  tt::Trainer t(p, {out / "run", false, true});
  t.fit();
  EXPECT_NE(tt::test::read_file(out / "run" / "metrics.jsonl").find("\"test_good_batches\":103.0"), std::string::npos);
}

// test-good declares repeats meaningful: two entries are two instances, each with its options,
// and a checkpoint written with both resumes with both.
TEST(Loader, APluginDeclaringRepeatsRunsOneInstancePerEntryAndResumesWithThem) {
  tt::ModuleLoader::global().load_file(kDir + "/tt_plugin_test-good.so");
  EXPECT_EQ(tt::Registry::global().plugin("test-good").repeats, tt::Repeats::Allowed);
  auto out = tt::test::temp_dir("loader");
  const std::string plugins = "plugins:\n  - {name: test-good, tag: a}\n  - {name: test-good, tag: b, bonus: 100}\n";
  auto p = tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 3\n  checkpoint_every: 3\n", plugins), "p.yaml");
  ASSERT_EQ(p.plugins.size(), 2u);
  {
    tt::Trainer t(p, {out / "run"});
    t.fit();
  }
  std::string metrics = tt::test::read_file(out / "run" / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"test_good_batches_a\":3.0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"test_good_batches_b\":103.0"), std::string::npos) << metrics;
  // The instances keep no state: after the resume at step 3 each counts again from its bonus.
  auto longer =
      tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 5\n  checkpoint_every: 3\n", plugins), "p.yaml");
  {
    tt::TrainerConfig resume{out / "run"};
    resume.resume = true;
    tt::Trainer t(longer, resume);
    t.fit();
  }
  metrics = tt::test::read_file(out / "run" / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"step\":5"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"test_good_batches_a\":2.0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"test_good_batches_b\":102.0"), std::string::npos) << metrics;
}

TEST(Loader, RefusesWrongApiVersion) {
  std::string e = refusal("tt_plugin_test-wrong-api.so");
  EXPECT_NE(e.find("tt_plugin_test-wrong-api.so: built for tt module API version 999, this tt supports version " +
                   std::to_string(TT_API_VERSION)),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("Rebuild"), std::string::npos);
}

TEST(Loader, RefusesWrongFingerprint) {
  std::string e = refusal("tt_plugin_test-wrong-fingerprint.so");
  EXPECT_NE(e.find("build fingerprint mismatch: expected LibTorch " TT_TORCH_VERSION_STRING), std::string::npos) << e;
  EXPECT_NE(e.find("found LibTorch 0.0.1"), std::string::npos) << e;
  EXPECT_NE(e.find("_GLIBCXX_USE_CXX11_ABI=0"), std::string::npos) << e;
}

TEST(Loader, RefusesLibraryWithoutEntryPoint) {
  std::string e = refusal("tt_plugin_test-missing-entry.so");
  EXPECT_NE(e.find("not a tt module: it does not export 'tt_module_entry'"), std::string::npos) << e;
}

TEST(Loader, NamesAnUndefinedSymbolDemangled) {
  std::string e = refusal("tt_plugin_test-missing-symbol.so");
  EXPECT_NE(e.find(kDir + "/tt_plugin_test-missing-symbol.so: cannot be loaded: undefined symbol "
                           "tt::missing_in_this_core(int) (_ZN2tt20missing_in_this_coreEi)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("rebuild it"), std::string::npos) << e;
}

TEST(Loader, RefusesAFileNamedForAnotherModuleBeforeItRegisters) {
  const std::string expected = kDir +
                               "/tt_plugin_test-wrong-name.so: tt_plugin_test-wrong-name.so registered "
                               "'test-other-name', not 'test-wrong-name': rename the file to "
                               "tt_plugin_test-other-name.so, or the registration (TT_MODULE and its register "
                               "function) to plugin 'test-wrong-name'";
  EXPECT_EQ(refusal("tt_plugin_test-wrong-name.so"), expected);
  // A pipeline naming the file's plugin gets the same explanation, not "unknown plugin".
  PluginPath path(kDir.c_str());
  try {
    tt::Registry::global().plugin("test-wrong-name");
    FAIL() << "test-wrong-name was found";
  } catch (const tt::ModuleError& e) {
    EXPECT_EQ(e.what(), expected);
  }
  EXPECT_FALSE(plugin_registered("test-other-name"));
}

TEST(Loader, RefusesAModuleRegisteringAnotherNameThanItsOwn) {
  const std::string expected = kDir +
                               "/tt_plugin_test-wrong-registration.so: tt_plugin_test-wrong-registration.so "
                               "registered 'test-registered-name', not 'test-wrong-registration': register the "
                               "plugin as 'test-wrong-registration', the name in TT_MODULE and the file name, or "
                               "rename the module and the file to 'test-registered-name'";
  EXPECT_EQ(refusal("tt_plugin_test-wrong-registration.so"), expected);
  EXPECT_EQ(refusal("tt_plugin_test-wrong-registration.so"), expected);  // again: the same, not "already registered"
  EXPECT_FALSE(plugin_registered("test-wrong-registration"));
  // what the refused module registered is neither listed nor usable
  EXPECT_FALSE(plugin_registered("test-registered-name"));
}

TEST(Loader, ExplainsThrowingRegistration) {
  std::string e = refusal("tt_plugin_test-throwing-register.so");
  EXPECT_NE(e.find("plugin 'test-throwing-register' failed to register: boom while registering"), std::string::npos)
      << e;
}

TEST(Loader, RefusesMissingAndNonLibraryFiles) {
  EXPECT_NE(refusal("tt_plugin_nothing.so").find("no such file"), std::string::npos);
  auto dir = tt::test::temp_dir("loader");
  std::ofstream(dir / "tt_plugin_junk.so") << "not an ELF file";
  try {
    tt::ModuleLoader::global().load_file(dir / "tt_plugin_junk.so");
    FAIL();
  } catch (const tt::ModuleError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be loaded"), std::string::npos) << e.what();
  }
}

// A library cut short (a build or copy that did not finish) is refused before the dynamic
// linker maps it: dlopen maps the missing part anyway and the process dies of SIGBUS.
TEST(Loader, RefusesALibraryCutShortInsteadOfCrashing) {
  const auto dir = tt::test::temp_dir("loader_cut");
  const std::string good = tt::test::read_file(kDir + "/tt_plugin_test-good.so");
  for (const size_t keep : {size_t{1000}, good.size() / 2}) {
    const auto cut = dir / ("tt_plugin_cut" + std::to_string(keep) + ".so");
    std::ofstream(cut, std::ios::binary) << good.substr(0, keep);
    try {
      tt::ModuleLoader::global().load_file(cut);
      FAIL() << cut << " loaded";
    } catch (const tt::ModuleError& e) {
      EXPECT_HAS(e.what(), cut.string() + ": cannot be loaded: the file is cut short: " + std::to_string(keep) +
                               " bytes, where its ELF headers need ");
    }
  }
  // through tt-run: --list scans the search path and names the files it refused
  const auto r = tt::test::run("TT_PLUGIN_PATH=" + dir.string() + " " + tt::test::tt_run_bin() + " --list");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "refused: " + (dir / "tt_plugin_cut1000.so").string() + ": cannot be loaded: the file is cut short");
}

TEST(Loader, NotFoundListsSearchPathAvailableAndRefused) {
  PluginPath path(kDir.c_str());
  try {
    tt::Registry::global().plugin("no-such-plugin");
    FAIL();
  } catch (const tt::ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown plugin 'no-such-plugin'"), std::string::npos) << m;
    EXPECT_NE(m.find("Available plugins:"), std::string::npos) << m;
    EXPECT_NE(m.find("test-good"), std::string::npos) << m;
    EXPECT_NE(m.find("Searched " + kDir + ", "), std::string::npos) << m;
    EXPECT_NE(m.find("lib/tt"), std::string::npos) << m;
    EXPECT_NE(m.find("refused: " + kDir + "/tt_plugin_test-wrong-api.so: built for tt module API version 999"),
              std::string::npos)
        << m;
  }
}

// Entries of TT_PLUGIN_PATH that cannot hold modules say why in the search path a refusal lists.
TEST(Loader, TheSearchPathSaysWhichEntriesAreMissingOrFiles) {
  const std::string so = kDir + "/tt_plugin_test-good.so", gone = kDir + "/no-such-directory";
  PluginPath path((so + ":" + gone + ":" + kDir).c_str());
  const std::string m = tt::ModuleLoader::global().describe_search_path();
  EXPECT_HAS(m, so + " (a file: TT_PLUGIN_PATH lists directories; give " + kDir + ")");
  EXPECT_HAS(m, gone + " (does not exist)");
  EXPECT_HAS(m, ", " + kDir + ", ");  // a directory as it is
}

// A module of TT_PLUGIN_PATH with the name of one installed with tt is the one loaded, and the
// log says so: a user's copy of a shipped plugin does not replace it silently.
TEST(Loader, AModuleOnThePluginPathInPlaceOfAnInstalledOneIsSaidToBe) {
  namespace fs = std::filesystem;
  auto out = tt::test::temp_dir("loader_shadow");
  const fs::path installed = fs::path(tt::test::tt_run_bin()).parent_path().parent_path() / "lib" / "tt" / "tt_plugin_oom-guard.so";
  ASSERT_TRUE(fs::exists(installed)) << installed;
  fs::create_directories(out / "mine");
  fs::copy_file(installed, out / "mine" / "tt_plugin_oom-guard.so");
  std::ofstream(out / "p.yaml") << tt::test::topic_yaml(out, "  max_steps: 2\n", "plugins: [oom-guard]\n");
  auto r = tt::test::run("TT_PLUGIN_PATH=" + (out / "mine").string() + " " + tt::test::tt_run_bin() + " -q " +
                         (out / "p.yaml").string() + " --run-dir " + (out / "run").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "plugin 'oom-guard' from " + (out / "mine" / "tt_plugin_oom-guard.so").string() +
                           ", in place of the one installed with tt (" + installed.string() + ")");
  auto plain = tt::test::run("env -u TT_PLUGIN_PATH " + tt::test::tt_run_bin() + " -q " + (out / "p.yaml").string() +
                             " --run-dir " + (out / "plain").string());
  ASSERT_EQ(plain.rc, 0) << plain.output;
  EXPECT_EQ(plain.output.find("in place of the one installed"), std::string::npos) << plain.output;
  // the installed directory itself on TT_PLUGIN_PATH loads the installed module: nothing to say
  auto same = tt::test::run("TT_PLUGIN_PATH=" + installed.parent_path().string() + " " + tt::test::tt_run_bin() +
                            " -q " + (out / "p.yaml").string() + " --run-dir " + (out / "same").string());
  ASSERT_EQ(same.rc, 0) << same.output;
  EXPECT_EQ(same.output.find("in place of the one installed"), std::string::npos) << same.output;
}

// A name no file can have (longer than a file name may be, a '/' leading out of the module
// directory, a NUL, or nothing) is an unknown model or plugin like any other, not an exception
// from the file system.
TEST(Loader, ANameNoModuleFileCanHaveIsUnknownNotAFileSystemError) {
  PluginPath path(kDir.c_str());
  for (const std::string& name : {std::string(300, 'm'), std::string("../tt_plugin_test-good"), std::string("a\0b", 3),
                                 std::string()}) {
    try {
      tt::Registry::global().model(name);
      ADD_FAILURE() << "model '" << name << "' was found";
    } catch (const tt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown model '"), std::string::npos) << e.what();
    }
  }
}

// tt-run each time: in this process another test may have loaded the plugin already.
TEST(Loader, PipelineFailsBeforeAndWorksAfterPluginPathIsSet) {
  auto out = tt::test::temp_dir("loader");
  std::ofstream(out / "p.yaml") << tt::test::topic_yaml(out, "  max_steps: 3\n",
                                                         "plugins:\n  - {name: test-good, bonus: 100}\n");
  const std::string tt_run = tt::test::tt_run_bin() + " -q " + (out / "p.yaml").string() + " --run-dir ";
  auto before = tt::test::run("env -u TT_PLUGIN_PATH " + tt_run + (out / "before").string());
  EXPECT_EQ(before.rc, 2) << before.output;
  EXPECT_NE(before.output.find("unknown plugin 'test-good'"), std::string::npos) << before.output;
  auto after = tt::test::run("TT_PLUGIN_PATH=" + kDir + " " + tt_run + (out / "after").string());
  ASSERT_EQ(after.rc, 0) << after.output;
  EXPECT_NE(tt::test::read_file(out / "after" / "metrics.jsonl").find("\"test_good_batches\":103.0"),
            std::string::npos);
}

TEST(Loader, ThrowingFactoryIsExplained) {
  PluginPath path(kDir.c_str());
  auto out = tt::test::temp_dir("loader");
  try {  // when the pipeline is read (each plugin is built then), before any run
    tt::parse_pipeline(tt::test::topic_yaml(out, "  max_steps: 1\n", "plugins: [test-throwing-factory]\n"), "p.yaml");
    FAIL();
  } catch (const tt::ModuleError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("plugin 'test-throwing-factory' (" + kDir + "/tt_plugin_test-throwing-factory.so): factory "
                     "threw: boom from the factory"),
              std::string::npos)
        << m;
  }
}

// A section's `name` picks its component ({name: my-plugin, ...}): an option of that name always
// received the component's own name, whatever its default or the user wrote. Refused at registration.
TEST(Loader, AComponentDeclaringAnOptionCalledNameIsRefused) {
  auto& reg = tt::Registry::global();
  const auto schema = tt::Schema().add("name", tt::Type::String, "mine", "a name of its own");
  std::string e = "no error";
  try {
    reg.add_plugin("test-name-option", "", schema, nullptr);
  } catch (const tt::ModuleError& error) {
    e = error.what();
  }
  EXPECT_HAS(e, "plugin 'test-name-option' from ");
  EXPECT_HAS(e, " declares an option 'name', but 'name' is the key that picks the plugin in a pipeline "
                "({name: test-name-option, ...}): call the option otherwise");
  EXPECT_FALSE(plugin_registered("test-name-option"));
  EXPECT_THROW(reg.add_model("test-name-option", "", schema, nullptr), tt::ModuleError);
  EXPECT_THROW(reg.add_dataset("test-name-option", "", schema, nullptr), tt::ModuleError);
}
