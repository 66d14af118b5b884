#include "tt/registry.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

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

template <class C>
static void add_to(std::map<std::string, C>& table, Kind kind, C component) {
  auto it = table.find(component.name);
  TT_CHECK_AS(ModuleError, it == table.end(), kind_name(kind), " '", component.name, "' from ", component.origin,
              " is already registered by ", it->second.origin, ": rename one of them");
  // A section's `name` says which component it is: an option of that name would never be the user's.
  TT_CHECK_AS(ModuleError, !component.schema.find("name"), kind_name(kind), " '", component.name, "' from ",
              component.origin, " declares an option 'name', but 'name' is the key that picks the ", kind_name(kind),
              " in a pipeline ({name: ", component.name, ", ...}): call the option otherwise");
  std::string name = component.name;
  table.emplace(std::move(name), std::move(component));
}

// A planner alternative's options must be what the plugin's own schema accepts: checked when the
// module registers, so a typo refuses the module instead of failing every probe that uses it.
static void check_offer(const std::string& plugin, const Schema& schema, const PlannerOffer& offer,
                        const std::string& origin) {
  std::set<std::string> labels;
  for (const auto& a : offer.alternatives) {
    const std::string what = detail::cat("plugin '", plugin, "' from ", origin, ": planner alternative '", a.label, "'");
    TT_CHECK_AS(ModuleError, !a.label.empty(), "plugin '", plugin, "' from ", origin,
                ": a planner alternative has no label; give each one, e.g. \"", plugin, "(fast)\"");
    TT_CHECK_AS(ModuleError, labels.insert(a.label).second, what, " is declared twice: give each alternative its own label");
    try {
      const YAML::Node node = a.options.empty() ? YAML::Node() : YAML::Load(a.options);
      Options::parse(node, schema, "plugins." + plugin, "planner alternative '" + a.label + "'");
    } catch (const YAML::Exception& e) {
      TT_FAIL_AS(ModuleError, what, ": its options '", a.options, "' are not YAML (", e.what(),
                 "); write a flow map, e.g. \"{key: value}\"");
    } catch (const Error& e) {
      TT_FAIL_AS(ModuleError, what, ": its options '", a.options, "' do not fit the plugin's schema: ", e.what());
    }
  }
}

void Registry::add_model(std::string n, std::string d, Schema s, ModelFactory f,
                         std::optional<std::vector<std::string>> parts,
                         std::optional<std::vector<std::string>> abilities) {
  if (abilities)
    for (const auto& a : *abilities)
      TT_CHECK_AS(ModuleError, a == "generate" || a == "predict", origin_, ": model '", n, "' declares the ability '",
                  a, "'; tt knows \"generate\" (tt-run --sample) and \"predict\" (tt-run --predict)");
  // Every model can start from another run's weights (the trainer loads them, not the model).
  if (!s.find("init_from"))
    s.add("init_from", Type::String, "~",
          "start from the model weights of this run directory's newest checkpoint, or of this checkpoint "
          "file (the same model settings; optimizer and position start fresh)");
  if (!s.find("init_average"))
    s.add("init_average", Type::Int, "1",
          "with init_from a run directory: the mean of the weights of its newest N checkpoints (checkpoint "
          "averaging, as fairseq's average_checkpoints; 1: the newest alone)")
        .range(ge(1));
  add_to(models_, Kind::Model,
         ModelComponent{{std::move(n), std::move(d), std::move(s), std::move(f), origin_}, std::move(parts),
                        std::move(abilities)});
}
void Registry::add_dataset(std::string n, std::string d, Schema s, DatasetFactory f) {
  add_to(datasets_, Kind::Dataset, Component<DatasetFactory>{std::move(n), std::move(d), std::move(s), std::move(f), origin_});
}
void Registry::add_plugin(std::string n, std::string d, Schema s, PluginFactory f, PlannerOffer planner,
                          Repeats repeats, std::vector<std::string> needs) {
  check_offer(n, s, planner, origin_);
  add_to(plugins_, Kind::Plugin,
         PluginComponent{{std::move(n), std::move(d), std::move(s), std::move(f), origin_}, std::move(planner), repeats,
                         std::move(needs)});
}

std::string missing_part(const ModelComponent& model, const PluginComponent& plugin) {
  if (!model.parts) return "";
  for (const auto& need : plugin.needs)
    if (std::find(model.parts->begin(), model.parts->end(), need) == model.parts->end()) return need;
  return "";
}
bool may_have_ability(const ModelComponent& model, const std::string& ability) {
  return !model.abilities || std::find(model.abilities->begin(), model.abilities->end(), ability) !=
                                 model.abilities->end();
}
void Registry::add_optimizer(std::string n, std::string d, Schema s, OptimizerFactory f, OptimizerStateBytes b) {
  add_to(optimizers_, Kind::Optimizer,
         OptimizerComponent{{std::move(n), std::move(d), std::move(s), std::move(f), origin_}, std::move(b)});
}
void Registry::add_schedule(std::string n, std::string d, Schema s, ScheduleFactory f) {
  add_to(schedules_, Kind::Schedule, Component<ScheduleFactory>{std::move(n), std::move(d), std::move(s), std::move(f), origin_});
}
void Registry::add_data_tool(std::string n, std::string d, DataToolRun run) {
  TT_CHECK_AS(ModuleError, !n.empty() && n[0] != '-' && n.find_first_of(" \t\n") == std::string::npos, "data tool '",
              n, "' from ", origin_, ": a tool's name must not be empty, start with '-' or hold spaces (tt-data NAME ",
              "ARGS... could not tell it from an option); name it like \"synth-topics\"");
  TT_CHECK_AS(ModuleError, static_cast<bool>(run), "data tool '", n, "' from ", origin_,
              " has no run function: register the function tt-data calls with its arguments");
  auto it = data_tools_.find(n);
  TT_CHECK_AS(ModuleError, it == data_tools_.end(), "data tool '", n, "' from ", origin_,
              " is already registered by ", it->second.origin, ": rename one of them");
  std::string name = n;
  data_tools_.emplace(std::move(name), DataTool{std::move(n), std::move(d), std::move(run), origin_});
}

// "unknown model 'x'. Available models: ..." or "unknown model 'x'; did you mean 'y'? Available models: ... Searched ...", then the refusals.
static std::string unknown_name(const std::string& what, const std::string& name,
                                const std::vector<std::string>& available, const std::vector<std::string>& refusals) {
  std::string list;
  for (const auto& a : available) list += (list.empty() ? "" : ", ") + a;
  std::string msg = detail::cat("unknown ", what, " '", name, "'");
  std::string near = nearest(name, available);
  msg += near.empty() ? "." : "; did you mean '" + near + "'?";
  msg += detail::cat(" Available ", what, "s: ", list.empty() ? "(none)" : list, ". Searched ",
                     ModuleLoader::global().describe_search_path(), ".");
  for (const auto& r : refusals) msg += "\n  refused: " + r;
  return msg;
}

template <class C>
const C& Registry::find(std::map<std::string, C>& table, Kind kind, const std::string& name) {
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
  throw ConfigError(unknown_name(kind_name(kind), name, available, refusals));
}

const ModelComponent& Registry::model(const std::string& n) { return find(models_, Kind::Model, n); }
const Component<DatasetFactory>& Registry::dataset(const std::string& n) { return find(datasets_, Kind::Dataset, n); }
const PluginComponent& Registry::plugin(const std::string& n) { return find(plugins_, Kind::Plugin, n); }
const OptimizerComponent& Registry::optimizer(const std::string& n) {
  return find(optimizers_, Kind::Optimizer, n);
}
const Component<ScheduleFactory>& Registry::schedule(const std::string& n) {
  return find(schedules_, Kind::Schedule, n);
}

const DataTool& Registry::data_tool(const std::string& name) {
  auto it = data_tools_.find(name);
  if (it != data_tools_.end()) return it->second;
  std::vector<std::string> refusals = ModuleLoader::global().load_all();
  it = data_tools_.find(name);
  if (it != data_tools_.end()) return it->second;
  std::vector<std::string> available;
  for (const auto& [k, v] : data_tools_) available.push_back(k);
  throw ConfigError(unknown_name("data tool", name, available, refusals));
}

std::vector<DataTool> Registry::data_tools() const {
  std::vector<DataTool> out;
  for (const auto& [name, t] : data_tools_) out.push_back(t);
  return out;
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

void Registry::remove_origin(const std::string& origin) {
  const auto from = [&origin](auto& table) {
    for (auto it = table.begin(); it != table.end();) it = it->second.origin == origin ? table.erase(it) : std::next(it);
  };
  from(models_);
  from(datasets_);
  from(plugins_);
  from(optimizers_);
  from(schedules_);
  from(data_tools_);
}

std::vector<std::string> Registry::names(Kind k) const {
  std::vector<std::string> out;
  for (const auto& e : entries(k)) out.push_back(e.name);
  return out;
}

}  // namespace tt
