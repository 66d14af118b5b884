// Its file name and TT_MODULE say "test-wrong-registration", but its register function adds
// the plugin "test-registered-name".
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"

namespace {
void reg(tt::Registry& r) {
  r.add_plugin("test-registered-name", "test plugin registered under another name than its module's",
               tt::Schema(), [](const tt::Options&) { return std::make_unique<tt::Plugin>(); });
}
}  // namespace

TT_MODULE("plugin", "test-wrong-registration", "a plugin registering another name than its own", reg)
