#include "tt/registry.h"

#include "tt/error.h"
#include "tt/module_loader.h"

namespace tt {

void register_builtin_optimizers(Registry& r);  // builtin_optimizers.cpp
void register_builtin_schedules(Registry& r);   // builtin_schedules.cpp

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Model: return "model";
    case Kind::Dataset: return "dataset";
    case Kind::Plugin: return "plugin";
    case Kind::Optimizer: return "optimizer";
    case Kind::Schedule: return "schedule";
  }
  return "?";
}

Registry& Registry::global() {
  static Registry* r = new Registry();  // never destroyed: modules' factories live in it
  return *r;
}

Registry::Registry() {
  register_builtin_optimizers(*this);
  register_builtin_schedules(*this);
}

template <class F>
static void add_to(std::map<std::string, Component<F>>& table, Kind kind, std::string name, std::string desc,
                   Schema schema, F f, const std::string& origin) {
  auto it = table.find(name);
  TT_CHECK_AS(ModuleError, it == table.end(), kind_name(kind), " '", name, "' from ", origin,
              " is already registered by ", it->second.origin, ": rename one of them");
  table.emplace(name, Component<F>{name, std::move(desc), std::move(schema), std::move(f), origin});
}

void Registry::add_model(std::string n, std::string d, Schema s, ModelFactory f) {
  // Every model can start from another run's weights (the trainer loads them, not the model).
  if (!s.find("init_from"))
    s.add("init_from", Type::String, "~",
          "start from the model weights of this run directory's newest checkpoint, or of this checkpoint "
          "file (the same model settings; optimizer and position start fresh)");
  if (!s.find("init_average"))
    s.add("init_average", Type::Int, "1",
          "with init_from a run directory: the mean of the weights of its newest N checkpoints (checkpoint "
          "averaging, as fairseq's average_checkpoints; 1: the newest alone)");
  add_to(models_, Kind::Model, std::move(n), std::move(d), std::move(s), std::move(f), origin_);
}
void Registry::add_dataset(std::string n, std::string d, Schema s, DatasetFactory f) {
  add_to(datasets_, Kind::Dataset, std::move(n), std::move(d), std::move(s), std::move(f), origin_);
}
void Registry::add_plugin(std::string n, std::string d, Schema s, PluginFactory f) {
  add_to(plugins_, Kind::Plugin, std::move(n), std::move(d), std::move(s), std::move(f), origin_);
}
void Registry::add_optimizer(std::string n, std::string d, Schema s, OptimizerFactory f) {
  add_to(optimizers_, Kind::Optimizer, std::move(n), std::move(d), std::move(s), std::move(f), origin_);
}
void Registry::add_schedule(std::string n, std::string d, Schema s, ScheduleFactory f) {
  add_to(schedules_, Kind::Schedule, std::move(n), std::move(d), std::move(s), std::move(f), origin_);
}

template <class F>
const Component<F>& Registry::find(std::map<std::string, Component<F>>& table, Kind kind, const std::string& name) {
  auto it = table.find(name);
  if (it != table.end()) return it->second;
  auto& loader = ModuleLoader::global();
  // Plugins and models live in files named after them; datasets come with their model.
  if (kind == Kind::Plugin || kind == Kind::Model) loader.load_by_name(kind_name(kind), name);
  it = table.find(name);
  if (it != table.end()) return it->second;
  std::vector<std::string> refusals = loader.load_all();
  it = table.find(name);
  if (it != table.end()) return it->second;
  std::vector<std::string> available;
  for (const auto& [k, v] : table) available.push_back(k);
  std::string list;
  for (const auto& a : available) list += (list.empty() ? "" : ", ") + a;
  std::string msg = detail::cat("unknown ", kind_name(kind), " '", name, "'");
  std::string near = nearest(name, available);
  if (!near.empty()) msg += "; did you mean '" + near + "'?";
  msg += detail::cat(" Available ", kind_name(kind), "s: ", list.empty() ? "(none)" : list, ". Searched ",
                     loader.describe_search_path(), ".");
  for (const auto& r : refusals) msg += "\n  refused: " + r;
  throw ConfigError(msg);
}

const Component<ModelFactory>& Registry::model(const std::string& n) { return find(models_, Kind::Model, n); }
const Component<DatasetFactory>& Registry::dataset(const std::string& n) { return find(datasets_, Kind::Dataset, n); }
const Component<PluginFactory>& Registry::plugin(const std::string& n) { return find(plugins_, Kind::Plugin, n); }
const Component<OptimizerFactory>& Registry::optimizer(const std::string& n) {
  return find(optimizers_, Kind::Optimizer, n);
}
const Component<ScheduleFactory>& Registry::schedule(const std::string& n) {
  return find(schedules_, Kind::Schedule, n);
}

std::vector<Registry::Entry> Registry::entries(Kind k) const {
  std::vector<Entry> out;
  auto collect = [&](const auto& table) {
    for (const auto& [name, c] : table) out.push_back({c.name, c.description, c.origin, &c.schema});
  };
  switch (k) {
    case Kind::Model: collect(models_); break;
    case Kind::Dataset: collect(datasets_); break;
    case Kind::Plugin: collect(plugins_); break;
    case Kind::Optimizer: collect(optimizers_); break;
    case Kind::Schedule: collect(schedules_); break;
  }
  return out;
}

std::vector<std::string> Registry::names(Kind k) const {
  std::vector<std::string> out;
  for (const auto& e : entries(k)) out.push_back(e.name);
  return out;
}

}  // namespace tt
