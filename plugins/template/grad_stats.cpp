// grad-stats: an example tt plugin, and the template to copy for your own.
//
// It logs the global gradient L2 norm and the largest absolute gradient entry every
// `every` steps (columns grad_l2 and grad_max in metrics.jsonl), optionally stops the
// fit when the norm exceeds `stop_above`, and keeps a count of the steps it observed
// in checkpoints, so a resumed run continues the count.
//
// The three parts every plugin has:
//   1. a class deriving tt::Plugin that overrides on(Event, State&) (and, when it needs
//      them, forward_scope / save_state / load_state);
//   2. a Schema of its options: each declared once, bound to a field of an options struct,
//      with its default, allowed range or choices, and a doc line (tt-run --list shows them;
//      a pipeline giving a value outside them is refused naming the file, line and option);
//   3. TT_MODULE(...) naming the plugin and a function that registers its factory.
// and one it may have:
//   4. a tt::PlannerOffer: the settings tt-run's budget planner (--budget, --recommend) may
//      try. A memory technique offers the ones worth measuring (checkpoint offers policy all
//      and every 2); the planner probes each alone, then in combination with the others'.
//      grad-stats saves no memory and offers one setting only to show the declaration: a
//      plugin that saves nothing should offer nothing, as every alternative costs probe runs.
#include <torch/torch.h>

#include <cmath>

#include "tt/log.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

class GradStats final : public tt::Plugin {
 public:
  GradStats(int64_t every, double stop_above) : every_(every), stop_above_(stop_above) {}

  void on(tt::Event event, tt::State& s) override {
    // BEFORE_STEP: every micro-batch's gradient has been accumulated, none applied yet.
    if (event != tt::Event::BEFORE_STEP || (s.step + 1) % every_ != 0) return;
    double sq = 0, mx = 0;
    for (const auto& p : s.model->parameters()) {
      if (!p.grad().defined()) continue;
      auto g = p.grad().detach();
      sq += g.pow(2).sum().item<double>();
      mx = std::max(mx, g.abs().max().item<double>());
    }
    ++observed_;
    const double norm = std::sqrt(sq);
    s.metrics["grad_l2"] = norm;
    s.metrics["grad_max"] = mx;
    s.metrics["grad_stats_observed"] = static_cast<double>(observed_);
    if (stop_above_ > 0 && norm > stop_above_) {
      tt::log().warn("grad-stats: gradient norm {:.4g} > stop_above {:.4g}: stopping the fit", norm, stop_above_);
      s.stop = true;
    }
  }

  void save_state(torch::serialize::OutputArchive& ar) const override {
    ar.write("observed", c10::IValue(observed_));
  }
  void load_state(torch::serialize::InputArchive& ar) override {
    c10::IValue v;
    ar.read("observed", v);
    observed_ = v.toInt();
  }

 private:
  int64_t every_;
  double stop_above_;
  int64_t observed_ = 0;
};

struct GradStatsOptions {
  int64_t every;
  double stop_above;
};

void register_components(tt::Registry& r) {
  r.add_plugin("grad-stats", "logs gradient L2 norm and max |grad| to metrics (example plugin)",
               tt::Schema()
                   .field("every", &GradStatsOptions::every, 1, "log every N steps")
                   .range(tt::ge(1))
                   .field("stop_above", &GradStatsOptions::stop_above, 0.0,
                          "stop the fit when the norm exceeds this (0: never)")
                   .range(tt::ge(0)),
               [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
                 const auto g = o.to<GradStatsOptions>();  // checked against the schema already
                 return std::make_unique<GradStats>(g.every, g.stop_above);
               },
               // label, options (checked against the schema above when the module loads), and
               // optionally the device it is only for (tt::PlannerAlternative::Device::Cuda or Cpu);
               // then where the planner lists it among the plugins (tt's own take 10 to 50).
               tt::PlannerOffer{{{"grad-stats(every 4)", "{every: 4}"}}, 100});
}

}  // namespace

TT_MODULE("plugin", "grad-stats", "gradient statistics in metrics.jsonl (the plugin template)", register_components)
