// A well-formed test plugin: counts the batches it saw into the metrics (test_good_batches, or
// test_good_batches_TAG). It declares repeats meaningful: each entry counts under its own tag.
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
class Good final : public tt::Plugin {
 public:
  Good(int64_t bonus, const std::string& tag)
      : bonus_(bonus), key_(tag.empty() ? "test_good_batches" : "test_good_batches_" + tag) {}
  void on(tt::Event e, tt::State& s) override {
    if (e == tt::Event::BATCH_END) s.metrics[key_] = static_cast<double>(++batches_ + bonus_);
  }

 private:
  int64_t bonus_, batches_ = 0;
  std::string key_;
};

void reg(tt::Registry& r) {
  r.add_plugin("test-good", "test plugin that counts batches",
               tt::Schema()
                   .add("bonus", tt::Type::Int, "0", "added to the count")
                   .add("tag", tt::Type::String, "~", "the metric's suffix: test_good_batches_TAG"),
               [](const tt::Options& o) {
                 return std::make_unique<Good>(o.get_int("bonus"), o.is_set("tag") ? o.get_string("tag") : "");
               },
               {}, tt::Repeats::Allowed);
}
}  // namespace

TT_MODULE("plugin", "test-good", "a good test plugin", reg)
