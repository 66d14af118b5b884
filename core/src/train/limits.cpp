// What setup decides about the training loop's limits beside building it: the memory cap, and
// the settings that would change nothing in this run.
#include <fmt/format.h>

#include <algorithm>

#include "train/run.h"
#include "train/setup.h"
#include "tt/log.h"
#include "tt/schedule.h"

namespace tt {

void cap_memory(Run& run) {
  const Options& T = run.pipeline.trainer;
  int64_t cap = 0;
  if (T.is_set("memory_cap")) {
    cap = T.get_bytes("memory_cap");
  } else if (T.is_set("memory_budget")) {  // tt-run plans a budget; a Trainer made directly only caps
    log().warn("trainer.memory_budget is planned by tt-run (tt-run --budget); here it only caps memory");
    cap = parse_budget(T.get_string("memory_budget"));
  }
  run.memory_cap = cap;
  run.set_capping(true);
}

// Settings that would change nothing in this run, said once before it trains: a schedule that
// never brings the learning rate above half of optimizer.lr (a warm-up longer than the run) and
// evaluations with nothing to evaluate. (Left silent, a 10-step run with warmup_steps 500 trained
// at 2% of its rate.)
void warn_of_unused_settings(const Run& run) {
  const State& s = run.state;
  const Pipeline& p = run.pipeline;
  if (s.total_steps > 0 && run.base_lr > 0) {
    double highest = 0;  // over the run's steps, up to 10000 of them evenly spread
    const int64_t stride = std::max<int64_t>(1, s.total_steps / 10000);
    const auto per_epoch = static_cast<double>(std::max<int64_t>(1, s.batches_per_epoch));
    for (int64_t k = 0; k < s.total_steps; k += stride) {
      const double epoch = static_cast<double>(k) / per_epoch;
      highest = std::max(highest, run.schedule->lr({k, s.total_steps, epoch, run.base_lr}));
    }
    const Options& S = p.schedule.options;
    const int64_t warmup = S.is_set("warmup_steps") ? S.get_int("warmup_steps") : 0;
    if (highest < 0.5 * run.base_lr)
      log().warn("schedule ({}): the learning rate never rises above {:.3g} ({:.2g}% of optimizer.lr {:.3g}) in "
                 "this run's {} steps{}",
                 p.schedule.name, highest, 100 * highest / run.base_lr, run.base_lr, s.total_steps,
                 warmup >= s.total_steps
                     ? fmt::format(": schedule.warmup_steps ({}) is not shorter than the run; lower it", warmup)
                     : std::string());
  }
  if (p.trainer.is_set("eval_every") && !run.data.validation)
    log().warn("trainer.eval_every is set, but data ({}) has no validation set: nothing is evaluated (give the data "
               "its validation option, or remove eval_every)", p.data.name);
}

}  // namespace tt
