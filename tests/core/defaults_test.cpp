// Every registered component is built from its declared defaults alone: a default that its own
// declaration does not allow, or a factory that needs an option its schema leaves unset without
// saying so, fails here. Loads every module of the build (lib/tt beside the core library).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "test_support.h"
#include "tt/error.h"
#include "tt/model.h"
#include "tt/module_loader.h"
#include "tt/pipeline.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/schedule.h"

namespace fs = std::filesystem;

namespace {

// Loads every module in lib/tt (not TT_PLUGIN_PATH, where the loader tests keep refused ones).
tt::Registry& with_all_modules() {
  static bool loaded = [] {
    const fs::path dir = tt::ModuleLoader::global().search_path().back();
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("tt_", 0) == 0 && entry.path().extension() == ".so")
        tt::ModuleLoader::global().load_file(entry.path());
    }
    return true;
  }();
  (void)loaded;
  return tt::Registry::global();
}

// The components tt ships: the core's optimizers and schedules, and what the modules in lib/tt
// register (not those the tests register in-process or load from their own directory).
std::vector<std::string> shipped(tt::Kind kind) {
  const fs::path lib = tt::ModuleLoader::global().search_path().back();
  std::vector<std::string> out;
  for (const auto& e : with_all_modules().entries(kind)) {
    const bool core = e.origin == "built-in" && (kind == tt::Kind::Optimizer || kind == tt::Kind::Schedule);
    if (core || fs::path(e.origin).parent_path() == lib) out.push_back(e.name);
  }
  return out;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The keys of a schema whose default is unset ("~").
std::vector<std::string> unset_keys(const tt::Schema& schema) {
  std::vector<std::string> out;
  for (const auto& s : schema.specs())
    if (s.default_yaml == "~" || s.default_yaml.empty()) out.push_back(s.key);
  return out;
}

}  // namespace

TEST(Defaults, EveryModuleOfTheSourceTreeIsRegistered) {
  const fs::path src = tt::test::source_dir();
  for (const auto& [folder, kind] : {std::pair{"plugins", tt::Kind::Plugin}, std::pair{"models", tt::Kind::Model}}) {
    for (const auto& entry : fs::directory_iterator(src / folder)) {
      const std::string name = entry.path().filename().string();
      if (!fs::is_directory(entry) || name == "template") continue;  // the template is built out of tree
      EXPECT_TRUE(contains(shipped(kind), name))
          << tt::kind_name(kind) << " '" << name << "' is not in " << tt::ModuleLoader::global().search_path().back()
          << ": build all modules (cmake --build build) before the tests";
    }
  }
}

TEST(Defaults, EverySchemaResolvesItsDefaults) {
  auto& reg = with_all_modules();
  int schemas = 0;
  for (auto kind : {tt::Kind::Model, tt::Kind::Dataset, tt::Kind::Plugin, tt::Kind::Optimizer, tt::Kind::Schedule}) {
    for (const auto& e : reg.entries(kind)) {
      const std::string context = std::string(tt::kind_name(kind)) + " " + e.name;
      EXPECT_NO_THROW({
        tt::Options o = tt::Options::defaults(*e.schema, context);
        EXPECT_EQ(o.resolved().size(), e.schema->specs().size()) << context;
      }) << context;
      ++schemas;
    }
  }
  EXPECT_NO_THROW(tt::Options::defaults(tt::trainer_schema(), "trainer"));
  EXPECT_NO_THROW(tt::Options::defaults(tt::output_schema(), "output"));
  EXPECT_GE(schemas, 20);
}

// Every number a shipped component (and the trainer) takes declares the values it may have, so a
// pipeline is refused at the line that gives -3 threads or a negative clip, not run with it. A
// seed is the exception: every integer is one.
TEST(Defaults, EveryNumberDeclaresItsRangeAndOptimizersTheirStateBytes) {
  auto& reg = with_all_modules();
  std::vector<std::string> missing;
  auto check = [&](const tt::Schema& schema, const std::string& context) {
    for (const auto& spec : schema.specs()) {
      const bool number = spec.type == tt::Type::Int || spec.type == tt::Type::Float || spec.type == tt::Type::Bytes;
      if (number && !spec.range.min && !spec.range.max && spec.key.find("seed") == std::string::npos)
        missing.push_back(context + "." + spec.key);
    }
  };
  int numbers = 0;
  for (auto kind : {tt::Kind::Model, tt::Kind::Dataset, tt::Kind::Plugin, tt::Kind::Optimizer, tt::Kind::Schedule})
    for (const auto& name : shipped(kind)) {
      const auto* schema = [&]() -> const tt::Schema* {
        for (const auto& e : reg.entries(kind))
          if (e.name == name) return e.schema;
        return nullptr;
      }();
      ASSERT_NE(schema, nullptr) << name;
      for (const auto& spec : schema->specs()) numbers += spec.type == tt::Type::Int || spec.type == tt::Type::Float;
      check(*schema, std::string(tt::kind_name(kind)) + " " + name);
    }
  check(tt::trainer_schema(), "trainer");
  EXPECT_TRUE(missing.empty()) << "numbers without a range: " << ::testing::PrintToString(missing);
  EXPECT_GE(numbers, 60);
  for (const auto& name : shipped(tt::Kind::Optimizer)) {
    const auto& c = reg.optimizer(name);
    ASSERT_TRUE(c.state_bytes) << name << " does not declare its state bytes";
    const tt::Options defaults = tt::Options::defaults(c.schema, "optimizer");
    auto w = torch::ones({256}).requires_grad_();
    auto opt = c.factory({w}, defaults);
    w.mutable_grad() = torch::ones({256});
    opt->step();
    int64_t held = 0;  // what the optimizer keeps after a step, in the tensors of its state
    for (const auto& [key, state] : opt->state()) {
      (void)key;
      if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(state.get()))
        held += a->exp_avg().nbytes() + a->exp_avg_sq().nbytes() +
                (a->max_exp_avg_sq().defined() ? a->max_exp_avg_sq().nbytes() : 0);
      else if (auto* b = dynamic_cast<torch::optim::AdamParamState*>(state.get()))
        held += b->exp_avg().nbytes() + b->exp_avg_sq().nbytes() +
                (b->max_exp_avg_sq().defined() ? b->max_exp_avg_sq().nbytes() : 0);
      else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(state.get()))
        held += m->momentum_buffer().defined() ? m->momentum_buffer().nbytes() : 0;
    }
    EXPECT_EQ(c.state_bytes(defaults, static_cast<int64_t>(w.nbytes())), held) << name;
  }
}

TEST(Defaults, PluginsBuildFromDefaultsAlone) {
  auto& reg = with_all_modules();
  for (const auto& name : shipped(tt::Kind::Plugin)) {
    const auto& c = reg.plugin(name);
    std::unique_ptr<tt::Plugin> p;
    EXPECT_NO_THROW(p = c.factory(tt::Options::defaults(c.schema, "plugins[0] (" + name + ")"))) << name;
    EXPECT_NE(p, nullptr) << name;
  }
}

TEST(Defaults, OptimizersBuildFromDefaultsAloneAndStep) {
  auto& reg = with_all_modules();
  for (const auto& name : shipped(tt::Kind::Optimizer)) {
    const auto& c = reg.optimizer(name);
    auto w = torch::ones({4}).requires_grad_();
    auto opt = c.factory({w}, tt::Options::defaults(c.schema, "optimizer"));
    ASSERT_NE(opt, nullptr) << name;
    w.mutable_grad() = torch::ones({4});
    opt->step();
    EXPECT_LT(w.max().item<float>(), 1.0f) << name << ": a step against a positive gradient lowers the weight";
  }
}

TEST(Defaults, SchedulesBuildFromDefaultsAlone) {
  auto& reg = with_all_modules();
  for (const auto& name : shipped(tt::Kind::Schedule)) {
    const auto& c = reg.schedule(name);
    auto s = c.factory(tt::Options::defaults(c.schema, "schedule"));
    ASSERT_NE(s, nullptr) << name;
    for (int64_t step : {0, 50, 99}) {
      const double lr = s->lr({step, 100, step / 10.0, 0.1});
      EXPECT_TRUE(std::isfinite(lr) && lr >= 0 && lr <= 0.1) << name << " at step " << step << ": lr " << lr;
    }
  }
}

// A dataset reads something: it builds from its defaults (a synthetic one), or it refuses with a
// ConfigError that names one of the options its schema leaves unset (the file to read).
TEST(Defaults, DatasetsBuildFromDefaultsOrNameTheUnsetOptionToSet) {
  auto& reg = with_all_modules();
  int built = 0;
  for (const auto& name : shipped(tt::Kind::Dataset)) {
    const auto& c = reg.dataset(name);
    try {
      tt::Datasets d = c.factory(tt::Options::defaults(c.schema, "data"), 1);
      EXPECT_NE(d.train, nullptr) << name;
      ++built;
    } catch (const tt::ConfigError& e) {
      const std::string m = e.what();
      const auto unset = unset_keys(c.schema);
      EXPECT_TRUE(std::any_of(unset.begin(), unset.end(),
                              [&](const std::string& k) { return m.find("data." + k) != std::string::npos; }))
          << name << " refused its defaults without naming an unset option: " << m;
    }
  }
  EXPECT_GE(built, 2);  // topic-synthetic and tabular-prior need nothing
}

// Each model is built from its own defaults on data from its module: the synthetic data's
// defaults, or for the text LM a small text file (a path is all its data needs).
TEST(Defaults, ModelsBuildFromDefaultsAlone) {
  auto& reg = with_all_modules();
  const fs::path dir = tt::test::temp_dir("defaults");
  std::ofstream(dir / "train.txt") << std::string(4000, 'a') + "\nthe quick brown fox jumps over the lazy dog\n";
  const std::map<std::string, std::pair<std::string, std::string>> data_of = {
      {"topic", {"topic-synthetic", "{}"}},
      {"tabular-icl", {"tabular-prior", "{}"}},
      {"transformer", {"text", "{train: [" + (dir / "train.txt").string() + "]}"}},
  };
  for (const auto& name : shipped(tt::Kind::Model)) {
    auto it = data_of.find(name);
    if (it == data_of.end()) {
      ADD_FAILURE() << "model '" << name << "': name the data it is built on in this test";
      continue;
    }
    const auto& data = reg.dataset(it->second.first);
    tt::Datasets d = data.factory(tt::Options::parse(YAML::Load(it->second.second), data.schema, "data", "test"), 1);
    const auto& c = reg.model(name);
    std::shared_ptr<tt::Model> m;
    EXPECT_NO_THROW(m = c.factory(tt::Options::defaults(c.schema, "model"), d)) << name;
    ASSERT_NE(m, nullptr) << name;
    EXPECT_FALSE(m->parameters().empty()) << name;
  }
}
