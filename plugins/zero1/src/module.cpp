// zero1: ZeRO stage 1 for tt-run --nproc N (or a torchrun environment). On OPTIMIZER the
// pipeline's optimizer (or the one an earlier plugin made, e.g. adam8bit) is cut down to this
// rank's shard of the parameters and wrapped (zero1.h); the trainer then leaves the gradients
// to it (State::gradient_sync false): reduce-scatter, shard step, all-gather.
#include <torch/torch.h>

#include "tt/dist.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/module.h"
#include "tt/pipeline.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"
#include "zero1.h"

namespace {

class Zero1Plugin final : public tt::Plugin {
 public:
  Zero1Plugin() { must_wrap_the_final_optimizer("it shards the optimizer it is given across the ranks"); }
  void on(tt::Event event, tt::State& s) override {
    if (event == tt::Event::OPTIMIZER) wrap(s);
    if (event == tt::Event::AFTER_STEP && zero1_ && !s.skip_step && s.pipeline && s.pipeline->trainer.is_set("grad_clip"))
      s.last_step.grad_norm = zero1_->last_norm();
    if (event == tt::Event::AFTER_STEP && zero1_ && !reported_) {
      reported_ = true;
      s.metrics["zero1_owned_parameters"] = static_cast<double>(zero1_->owned_elements());
    }
  }

 private:
  void wrap(tt::State& s) {
    tt::dist::Context* ctx = tt::dist::context();
    if (!ctx) {
      tt::log().warn("zero1: a single process (no WORLD_SIZE): nothing to shard, the optimizer is left as it is");
      return;
    }
    zero1_ = std::make_shared<tt::zero1::Zero1>(s.optimizer, *ctx);
    if (s.pipeline && s.pipeline->trainer.is_set("grad_clip"))  // on the summed shards (the trainer leaves it)
      zero1_->set_max_norm(s.pipeline->trainer.get_float("grad_clip"));
    s.optimizer = zero1_;
    s.gradient_sync = false;
    tt::log().info("zero1: rank {} steps {} of {} parameters ({:.1f}%); gradients reduce-scattered, parameters "
                   "all-gathered", ctx->rank(), zero1_->owned_elements(), zero1_->total_elements(),
                   100.0 * zero1_->owned_elements() / std::max<int64_t>(1, zero1_->total_elements()));
  }

  std::shared_ptr<tt::zero1::Zero1> zero1_;
  bool reported_ = false;
};

void register_components(tt::Registry& r) {
  r.add_plugin("zero1", "ZeRO-1: optimizer state sharded across data-parallel ranks (tt-run --nproc N)",
               tt::Schema(), [](const tt::Options&) { return std::make_unique<Zero1Plugin>(); });
}

}  // namespace

TT_MODULE("plugin", "zero1", "ZeRO-1 optimizer state sharding for data-parallel runs", register_components)
