// A well-formed test plugin: counts the batches it saw into the metrics.
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
class Good final : public tt::Plugin {
 public:
  explicit Good(int64_t bonus) : bonus_(bonus) {}
  void on(tt::Event e, tt::State& s) override {
    if (e == tt::Event::BATCH_END) s.metrics["test_good_batches"] = static_cast<double>(++batches_ + bonus_);
  }

 private:
  int64_t bonus_, batches_ = 0;
};

void reg(tt::Registry& r) {
  r.add_plugin("test-good", "test plugin that counts batches",
               tt::Schema().add("bonus", tt::Type::Int, "0", "added to the count"),
               [](const tt::Options& o) { return std::make_unique<Good>(o.get_int("bonus")); });
}
}  // namespace

TT_MODULE("plugin", "test-good", "a good test plugin", reg)
