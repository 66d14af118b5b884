// Built as tt_plugin_test-wrong-name.so but declares and registers "test-other-name": the
// registry looks a pipeline's "test-wrong-name" up in this file and would not find it.
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"

namespace {
void reg(tt::Registry& r) {
  r.add_plugin("test-other-name", "test plugin in a file named for another", tt::Schema(),
               [](const tt::Options&) { return std::make_unique<tt::Plugin>(); });
}
}  // namespace

TT_MODULE("plugin", "test-other-name", "a plugin in a file named for another", reg)
