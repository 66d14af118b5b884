// test-step-in-backward: tests/support/step_in_backward.h as a plugin module, for runs of tt-run.
#include "../support/step_in_backward.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace {
void reg(tt::Registry& r) {
  r.add_plugin("test-step-in-backward", "test plugin: the optimizer step in backward (extension point 11)",
               tt::Schema(), [](const tt::Options&) { return std::make_unique<tt::test::StepInBackward>(); });
}
}  // namespace

TT_MODULE("plugin", "test-step-in-backward", "a test plugin that takes the optimizer step in backward", reg)
