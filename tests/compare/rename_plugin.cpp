// A test plugin that renames the evaluation's metrics avg_<metric>, as the ema example does when it
// evaluates its average in place of the trained weights (docs/plugins.md): compare mode must show
// such a variant's avg_val_loss in the val_loss column, marked as the plugin's.
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
class Rename final : public tt::Plugin {
 public:
  void on(tt::Event e, tt::State& s) override {
    if (e != tt::Event::EVAL) return;
    std::map<std::string, double> renamed;
    for (const auto& [k, v] : s.metrics) renamed["avg_" + k] = v;
    s.metrics = std::move(renamed);
  }
};

void reg(tt::Registry& r) {
  r.add_plugin("test-rename-eval", "test plugin that renames the evaluation's metrics avg_<metric>", tt::Schema(),
               [](const tt::Options&) { return std::make_unique<Rename>(); });
}
}  // namespace

TT_MODULE("plugin", "test-rename-eval", "a test plugin that renames the evaluation's metrics", reg)
