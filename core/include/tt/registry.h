#pragma once
// Everything a pipeline names is looked up here: models, datasets, plugins, optimizers,
// schedules. Built-ins register at start-up; modules (.so) register when loaded. A name
// that is not registered makes the registry ask the module loader for a file of that name
// (tt_plugin_<name>.so, tt_model_<name>.so); if that fails too, the error lists what exists.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tt/dataset.h"
#include "tt/export.h"
#include "tt/options.h"

namespace torch::optim {
class Optimizer;
}
namespace at {
class Tensor;
}

namespace tt {

class Plugin;
class Model;
class Schedule;

using PluginFactory = std::function<std::unique_ptr<Plugin>(const Options&)>;
using ModelFactory = std::function<std::shared_ptr<Model>(const Options&, const Datasets&)>;
using DatasetFactory = std::function<Datasets(const Options&, uint64_t seed)>;
using OptimizerFactory =
    std::function<std::shared_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>&, const Options&)>;
using ScheduleFactory = std::function<std::unique_ptr<Schedule>(const Options&)>;

template <class Factory>
struct Component {
  std::string name;
  std::string description;
  Schema schema;
  Factory factory;
  std::string origin;  // "built-in" or the .so it came from
};

// What a plugin offers tt-run's budget planner (--budget, --recommend, trainer.memory_budget):
// the settings worth trying to fit a memory budget. A configuration the planner weighs takes at
// most one alternative per plugin (its entry appended to the pipeline's plugins list), and none
// of a plugin the pipeline already names, nor of one acting on a part the model declares it has not
// (ModelComponent::parts below). An alternative that fails on the pipeline's model otherwise (a
// model that declares nothing) is measured alone once and excluded with the reason.
struct PlannerAlternative {
  enum class Device { Any, Cpu, Cuda };  // Cuda: trainer.device is cuda or cuda:N; Cpu: otherwise
  std::string label;    // in the plan's table and plan.json, e.g. "checkpoint(every 2)"
  std::string options;  // the plugin's options, a YAML map in flow style, e.g. "{policy: every, every: 2}"
  Device only_on = Device::Any;
};

struct PlannerOffer {
  std::vector<PlannerAlternative> alternatives;  // none: the plugin is not a planner technique
  // Where the planner lists the plugin in a configuration, lowest first (ties by name). tt's:
  // checkpoint 10, amp 20, attention 30, adam8bit 40, offload 50 (it moves adam8bit's state).
  int order = 100;
};

// Whether a pipeline may list a plugin more than once. Most techniques cannot be applied twice (two
// amp entries would only contradict each other), so a second entry is refused, naming both, unless
// the plugin declares that each entry is an instance of its own: a logger per
// metric, say. Each instance gets its own options and its own state in checkpoints (kept by position).
enum class Repeats { Once, Allowed };

// The parts of core's tt::nn a model is built from, for the plugins that act on one: a model
// declares its parts when it registers, a plugin the parts it needs. A pipeline that pairs a
// plugin with a model declaring it has no such part is refused when the pipeline is read
// (tt-run --dry-run, a comparison's variants, the planner's offers), naming both; with a model
// that declares nothing, the plugin finds out when it starts, as before. tt's parts (a model and
// plugin of one's own may agree on others): "block_stack" (tt::nn::BlockStack; checkpoint needs
// it), "attention" (tt::nn::Attention; attention), "linear" (tt::nn::Linear; lora, amp), "embedding"
// (tt::nn::Embedding), "output_head" (Model::output_head; losses computed from the head).
//
// A model may also declare what it does beyond training, for tt-run's options that use it:
// "generate" (Model::generate: tt-run --sample) and "predict" (Model::predict: tt-run --predict).
// tt-run refuses such an option before training when the model declares a list without it (an
// empty list: neither); a model registered without one (nullopt) is asked after training (the
// default generate/predict refuses).
struct ModelComponent : Component<ModelFactory> {
  std::optional<std::vector<std::string>> parts;      // nullopt: not declared
  std::optional<std::vector<std::string>> abilities;  // nullopt: not declared
};
struct PluginComponent : Component<PluginFactory> {
  PlannerOffer planner;
  Repeats repeats = Repeats::Once;
  std::vector<std::string> needs;  // model parts it acts on
};

// The bytes of state an optimizer keeps for `trainable_bytes` of trainable parameters with these
// options (Adam's two moments: 2x; SGD with momentum: 1x). The run's memory estimate states it
// beside the measured figure; an optimizer registered without one has no estimate.
using OptimizerStateBytes = std::function<int64_t(const Options&, int64_t trainable_bytes)>;

struct OptimizerComponent : Component<OptimizerFactory> {
  OptimizerStateBytes state_bytes;
};

// A command-line tool a module brings for its data, run as `tt-data NAME ARGS...` (tt's: the
// topic model's synth-topics, the transformer's tokenizer and fetch). It parses its own arguments
// (those after NAME; --help is its own) and returns the exit code: 0 done, 2 a bad command line
// (its message already printed). A failure throws tt::Error (ConfigError: bad arguments, exit 2;
// Interrupted: 130), which tt-data prints. tt-data installs the Ctrl-C handlers first, so a long
// tool polls tt::interrupt_requested().
using DataToolRun = std::function<int(const std::vector<std::string>& args)>;

struct DataTool {
  std::string name;
  std::string description;  // one line, for tt-data's list
  DataToolRun run;
  std::string origin;  // "built-in" or the .so it came from
};

// The first part `plugin` needs that `model` declares it has not ("" when none is missing, or
// when the model declares nothing).
TT_API std::string missing_part(const ModelComponent& model, const PluginComponent& plugin);
// False only when `model` declares its abilities and `ability` is not among them.
TT_API bool may_have_ability(const ModelComponent& model, const std::string& ability);

enum class Kind { Model, Dataset, Plugin, Optimizer, Schedule };
TT_API const char* kind_name(Kind k);  // "model", "dataset", ...

class TT_API Registry {
 public:
  static Registry& global();

  void add_model(std::string name, std::string description, Schema schema, ModelFactory f,
                 std::optional<std::vector<std::string>> parts = std::nullopt,
                 std::optional<std::vector<std::string>> abilities = std::nullopt);
  void add_dataset(std::string name, std::string description, Schema schema, DatasetFactory f);
  // A planner offer's options are checked against the schema here: a module whose offer names
  // an unknown key or a wrong type is refused at load time.
  void add_plugin(std::string name, std::string description, Schema schema, PluginFactory f,
                  PlannerOffer planner = {}, Repeats repeats = Repeats::Once, std::vector<std::string> needs = {});
  void add_optimizer(std::string name, std::string description, Schema schema, OptimizerFactory f,
                     OptimizerStateBytes state_bytes = {});
  void add_schedule(std::string name, std::string description, Schema schema, ScheduleFactory f);
  // A name is refused when empty, when it starts with '-' or holds a space (tt-data could not
  // tell it from an option), or when another module registered it.
  void add_data_tool(std::string name, std::string description, DataToolRun run);

  // Look-ups load modules on demand; unknown names throw with the list of what exists.
  const ModelComponent& model(const std::string& name);
  const Component<DatasetFactory>& dataset(const std::string& name);
  const PluginComponent& plugin(const std::string& name);
  const OptimizerComponent& optimizer(const std::string& name);
  const Component<ScheduleFactory>& schedule(const std::string& name);
  // A data tool lives in the module of the models it serves, not in a file named after it: an
  // unregistered name loads every module on the search path, then throws (ConfigError) with the
  // list of what exists and the modules refused.
  const DataTool& data_tool(const std::string& name);
  std::vector<DataTool> data_tools() const;  // by name; loads nothing

  std::vector<std::string> names(Kind k) const;
  struct Entry {
    std::string name, description, origin;
    const Schema* schema;
  };
  std::vector<Entry> entries(Kind k) const;

  // Set by the module loader while a module registers, so entries know their origin.
  void set_current_origin(std::string origin) { origin_ = std::move(origin); }
  // Removes every entry `origin` registered (a module the loader refused after it registered:
  // what it added is neither listed nor used).
  void remove_origin(const std::string& origin);

 private:
  Registry();
  template <class C>
  const C& find(std::map<std::string, C>& table, Kind kind, const std::string& name);
  std::map<std::string, ModelComponent> models_;
  std::map<std::string, Component<DatasetFactory>> datasets_;
  std::map<std::string, PluginComponent> plugins_;
  std::map<std::string, OptimizerComponent> optimizers_;
  std::map<std::string, Component<ScheduleFactory>> schedules_;
  std::string origin_ = "built-in";
  std::map<std::string, DataTool> data_tools_;
};

}  // namespace tt
