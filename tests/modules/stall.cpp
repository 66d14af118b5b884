// A test plugin that stalls in one event without looking at interrupt requests, as a long
// set-up or a slow checkpoint write would: it writes `marker` when it starts, then sleeps;
// once: not when `marker` exists. `step`: every step (BATCH_END), a slow step, no marker; on
// `rank` only where that is set (a slow worker). `gate`: at the end of step `from_step` (and
// each after it) it writes `marker` and waits until the file `release` exists (up to `seconds`),
// so that a test can interrupt a run of one process at a step it knows, with no race against
// the steps (in a data-parallel run the ranks agree on a stop at the next step's all-reduce).
#include <chrono>
#include <fstream>
#include <thread>

#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
struct StallOptions {
  std::string event, marker, release;
  double seconds;
  int64_t from_step;
  int64_t rank;
};

class Stall final : public tt::Plugin {
 public:
  explicit Stall(StallOptions o) : o_(std::move(o)) {}
  void on(tt::Event e, tt::State& s) override {
    if (o_.event == "step") {
      if (e == tt::Event::BATCH_END && (o_.rank < 0 || o_.rank == s.rank)) std::this_thread::sleep_for(std::chrono::duration<double>(o_.seconds));
      return;
    }
    if (o_.event == "gate") {
      if (e != tt::Event::BATCH_END || s.step < o_.from_step) return;
      if (!o_.marker.empty()) std::ofstream(o_.marker) << s.step << "\n";
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o_.seconds);
      while (!std::ifstream(o_.release).good() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    const bool here = (o_.event == "init" && e == tt::Event::INIT) ||
                      (o_.event == "checkpoint" && e == tt::Event::CHECKPOINT && s.step >= o_.from_step);
    if (!here || (!o_.marker.empty() && std::ifstream(o_.marker).good())) return;  // once
    std::ofstream(o_.marker) << s.step << "\n";
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.seconds));
  }

 private:
  StallOptions o_;
};

void reg(tt::Registry& r) {
  tt::Schema schema;
  schema.field("event", &StallOptions::event, std::string("init"), "where to stall").choices({"init", "checkpoint", "step", "gate"});
  schema.field("seconds", &StallOptions::seconds, 60.0, "how long").range(tt::ge(0));
  schema.field("marker", &StallOptions::marker, std::string(), "file written when the stall starts");
  schema.field("from_step", &StallOptions::from_step, int64_t{0}, "checkpoint, gate: stall from this step on").range(tt::ge(0));
  schema.field("release", &StallOptions::release, std::string(), "gate: the file that ends the wait");
  schema.field("rank", &StallOptions::rank, int64_t{-1}, "step: stall on this rank only (-1: every rank)").range(tt::ge(-1));
  r.add_plugin("test-stall", "test plugin that stalls in an event", schema,
               [](const tt::Options& o) { return std::make_unique<Stall>(o.to<StallOptions>()); });
}
}  // namespace

TT_MODULE("plugin", "test-stall", "a test plugin that stalls", reg)
