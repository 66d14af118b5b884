// A test plugin that crashes its process (SIGSEGV) when training starts: tt-run's compare
// mode must report such a variant as crashed and go on with the others.
#include <csignal>

#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
class Crash final : public tt::Plugin {
 public:
  void on(tt::Event e, tt::State&) override {
    if (e == tt::Event::FIT_START) std::raise(SIGSEGV);
  }
};

void reg(tt::Registry& r) {
  r.add_plugin("test-crash", "test plugin that crashes at FIT_START", tt::Schema(),
               [](const tt::Options&) { return std::make_unique<Crash>(); });
}
}  // namespace

TT_MODULE("plugin", "test-crash", "a test plugin that crashes", reg)
