// A test plugin that crashes its process (SIGSEGV) when training starts: tt-run's compare
// mode must report such a variant as crashed and go on with the others. `how: bad-call` crashes
// by calling through a function pointer that points nowhere (the unwinder then finds no frame
// past the signal: the crash report must still say where the call came from); `how: null-write`
// writes through a null pointer.
#include <csignal>
#include <cstdint>
#include <string>

#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
class Crash final : public tt::Plugin {
 public:
  explicit Crash(std::string how) : how_(std::move(how)) {}
  void on(tt::Event e, tt::State&) override {
    if (e != tt::Event::FIT_START) return;
    if (how_ == "raise") std::raise(SIGSEGV);
    if (how_ == "null-write") {
      volatile int* volatile null = nullptr;  // volatile both: the store is neither dropped nor proven null
      *null = 1;
    }
    // a volatile pointer: the compiler can neither see the call is undefined nor drop it
    void (*volatile nowhere)() = reinterpret_cast<void (*)()>(std::uintptr_t{0x10});
    nowhere();
    calls_ = calls_ + 1;  // work after the call: a call, not a tail jump (the plugin stays on the stack)
  }

 private:
  std::string how_;
  volatile int calls_ = 0;
};

void reg(tt::Registry& r) {
  r.add_plugin("test-crash", "test plugin that crashes at FIT_START",
               tt::Schema()
                   .add("how", tt::Type::String, "raise",
                        "raise: raise(SIGSEGV); bad-call: call the address 0x10; null-write: write through null")
                   .choices({"raise", "bad-call", "null-write"}),
               [](const tt::Options& o) { return std::make_unique<Crash>(o.get_string("how")); });
}
}  // namespace

TT_MODULE("plugin", "test-crash", "a test plugin that crashes", reg)
