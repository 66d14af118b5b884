#pragma once
// Fires events at the plugins and then at the built-in callbacks, and attributes anything a
// handler throws to its plugin, event and step. Knows nothing of what they do (Composer's
// Engine.run_event).
#include <memory>
#include <string>
#include <vector>

#include "tt/event.h"
#include "tt/plugin.h"

namespace tt {

struct State;

class PluginHost {
  // Marks `plugin` as the one calling() names while it lives.
  struct Calling {
    explicit Calling(const Plugin& plugin);
    ~Calling();
    const Plugin* previous;
  };

 public:
  // Plugins run in the order added; AFTER_* and *_END events in reverse.
  void add_plugin(std::unique_ptr<Plugin> plugin);
  // Callbacks run after every plugin, in the order added, for every event.
  void add_callback(std::unique_ptr<Plugin> callback);

  // Checks the plugins' must_come_after declarations against the list (ConfigError naming
  // both); must_wrap_the_final_optimizer is checked when OPTIMIZER fires.
  void check_ordering() const;
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
};

}  // namespace tt
