#pragma once
// Fires events at the plugins and then at the built-in callbacks, and attributes anything a
// handler throws to its plugin, event and step. Knows nothing of what they do (Composer's
// Engine.run_event).
#include <memory>
#include <string>
#include <vector>

#include "tt/event.h"
#include "tt/pipeline.h"
#include "tt/plugin.h"

namespace tt {

struct State;

class PluginHost {
 public:
  // Marks `plugin` as the one calling() names while it lives (its handlers, and the hooks it
  // registered while they run).
  struct Calling {
    explicit Calling(const Plugin& plugin);
    ~Calling();
    Calling(const Calling&) = delete;
    Calling& operator=(const Calling&) = delete;
    const Plugin* previous;
  };

  // Plugins run in the order added; AFTER_* and *_END events in reverse.
  void add_plugin(std::unique_ptr<Plugin> plugin);
  // Callbacks run after every plugin, in the order added, for every event.
  void add_callback(std::unique_ptr<Plugin> callback);

  // The pipeline's plugins, built by their factories and named, in list order: what a factory
  // throws other than a ConfigError (its own check of its options), or a null plugin, is a
  // ModuleError naming the plugin and its module.
  void add_pipeline_plugins(const std::vector<ComponentSpec>& plugins);
  // Checks the plugins' declared order against the list (ConfigError naming both):
  // must_come_after, and must_wrap_the_final_optimizer against the plugins that declare they
  // assign the optimizer. When OPTIMIZER fires, the plugins that did assign it are checked too.
  // And a plugin that takes the step in backward against what cannot be beside it: `trainer`'s
  // grad_clip, a wrapper of the final optimizer, a plugin that may skip steps, a second one.
  // And runs_only_on against `trainer`'s device.
  void check_declarations(const Options& trainer) const;
  void fire(Event event, State& state);
  // Every plugin's forward scope, entered in list order; destroy back to front to exit.
  std::vector<std::unique_ptr<Scope>> enter_forward_scopes(State& state);
  // Runs `f` as `plugin`'s work "in WHAT" (e.g. "save_state"), with the same attribution.
  template <class F>
  void run_as(const Plugin& plugin, const std::string& what, const State& state, F&& f) {
    try {
      const Calling in(plugin);
      f();
    } catch (...) {
      rethrow_attributed(plugin, what, state);
    }
  }

  const std::vector<std::unique_ptr<Plugin>>& plugins() const { return plugins_; }
  // The plugins that assigned state.optimizer when OPTIMIZER fired, in list order ("" when none):
  // the run's optimizer is then theirs, not the pipeline's optimizer: section alone.
  const std::string& optimizer_assigned_by() const { return optimizer_assigned_by_; }
  // The plugin that set state.stop (ended the fit before its step or epoch limit), "" if none.
  const std::string& stopped_by() const { return stopped_by_; }
  void set_stopped_by(std::string name) { stopped_by_ = std::move(name); }  // another rank's plugin
  // The plugin that set state.skip_step on the last BEFORE_STEP, "" if none.
  const std::string& vetoed_by() const { return vetoed_by_; }
  // The plugin that last put another tensor in state.loss since AFTER_LOSS began ("" when none).
  const std::string& loss_replaced_by() const { return loss_replaced_by_; }
  // The plugin that declares it takes the optimizer step in backward, nullptr if none.
  const Plugin* steps_in_backward() const;
  std::string names() const;  // "a,b" in list order

  // The plugin whose handler runs on this thread now (nullptr outside one): the hooks it adds
  // there (tt/extension.h: loss, gradient-ready) are attributed to it when they throw.
  static const Plugin* calling();
  // The exception being handled, thrown again with `plugin` and "in WHAT" named (its kind kept).
  [[noreturn]] static void rethrow_attributed(const Plugin& plugin, const std::string& what, const State& state);

 private:
  void check_optimizer_order(const std::vector<size_t>& replacers) const;
  std::vector<std::unique_ptr<Plugin>> plugins_;
  std::vector<std::unique_ptr<Plugin>> callbacks_;
  std::string optimizer_assigned_by_;
  std::string stopped_by_;
  std::string vetoed_by_;
  std::string loss_replaced_by_;
};

}  // namespace tt
