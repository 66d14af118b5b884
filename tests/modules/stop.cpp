// A test plugin that sets state.stop on one rank only, at BATCH_END or CHECKPOINT of a step or at
// an EPOCH_END: a data-parallel run must end on every rank there (the others would wait in the
// next step's all-reduce).
#include <string>
#include <utility>

#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
struct StopOptions {
  int64_t rank, at_step;
  std::string event;
};

class Stop final : public tt::Plugin {
 public:
  explicit Stop(StopOptions o) : o_(std::move(o)) {}
  void on(tt::Event e, tt::State& s) override {
    const bool here = (o_.event == "batch_end" && e == tt::Event::BATCH_END) ||
                      (o_.event == "checkpoint" && e == tt::Event::CHECKPOINT) ||
                      (o_.event == "epoch_end" && e == tt::Event::EPOCH_END);
    if (here && s.rank == o_.rank && s.step >= o_.at_step) s.stop = true;
  }

 private:
  StopOptions o_;
};

void reg(tt::Registry& r) {
  tt::Schema schema;
  schema.field("rank", &StopOptions::rank, int64_t{0}, "the rank that stops").range(tt::ge(0));
  schema.field("at_step", &StopOptions::at_step, int64_t{1}, "stop after this step").range(tt::ge(1));
  schema.field("event", &StopOptions::event, std::string("batch_end"), "where to stop")
      .choices({"batch_end", "checkpoint", "epoch_end"});
  r.add_plugin("test-stop", "test plugin that stops the fit on one rank", schema,
               [](const tt::Options& o) { return std::make_unique<Stop>(o.to<StopOptions>()); });
}
}  // namespace

TT_MODULE("plugin", "test-stop", "a test plugin that stops the fit on one rank", reg)
