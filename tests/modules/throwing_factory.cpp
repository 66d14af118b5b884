// Registers fine; its factory throws when a pipeline instantiates the plugin.
#include <stdexcept>

#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"

namespace {
void reg(tt::Registry& r) {
  r.add_plugin("test-throwing-factory", "throws from its factory", tt::Schema(),
               [](const tt::Options&) -> std::unique_ptr<tt::Plugin> {
                 throw std::runtime_error("boom from the factory");
               });
}
}  // namespace

TT_MODULE("plugin", "test-throwing-factory", "a plugin whose factory throws", reg)
