// oom-guard: survives out-of-memory errors during a batch by halving the micro-batch.
//
// The trainer catches the error (the meter's cap on CPU, the CUDA allocator's on a GPU), frees
// what the batch held (its activations, gradients and the allocator's cache), puts the random
// generator back where the batch started, and fires OOM. This plugin then halves
// state.micro_batch_size and asks for the same batch again: the batch size is unchanged (the
// smaller micro-batches accumulate to it), the step count and data position do not move, so
// nothing is skipped or counted twice. The size that worked stays for the rest of the run and
// is stored in checkpoints (trainer/micro_batch_size). Below min_micro_batch it stops with a
// clear error instead. From a retry on, each metrics.jsonl step line has
// oom_guard_peak_tensor_bytes: the tensor peak since that retry (CPU meter), the size that fits
// without the failed attempt, whose bytes stay in the run's peak_tensor_bytes.
#include <torch/serialize/archive.h>

#include "tt/error.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

class OomGuard final : public tt::Plugin {
 public:
  explicit OomGuard(int64_t min_micro) : min_micro_(min_micro) {}

  void on(tt::Event event, tt::State& s) override {
    if (event == tt::Event::OOM) shrink(s);
    // The tensor peak since the last retry: the micro-batch that fits, without the attempt that
    // ran out (the run's peak_tensor_bytes keeps that). Measured by the CPU meter; on CUDA the
    // caching allocator keeps one peak only, the run's, and there is none of this.
    if (event == tt::Event::BATCH_END && retries_ > 0 && marked_ && !s.device.is_cuda())
      s.metrics["oom_guard_peak_tensor_bytes"] = static_cast<double>(tt::Meter::global().peak_since_mark());
    if (event == tt::Event::BATCH_END && pending_report_) {
      pending_report_ = false;
      const int64_t micro_batches = (s.batch_size + s.micro_batch_size - 1) / s.micro_batch_size;
      tt::log().info("oom-guard: micro-batch {} fits (batch {} as {} accumulated micro-batches); kept from now on",
                     s.micro_batch_size, s.batch_size, micro_batches);
      s.metrics["oom_guard_micro_batch_size"] = static_cast<double>(s.micro_batch_size);
      s.metrics["oom_guard_retries"] = static_cast<double>(retries_);
    }
  }

  void save_state(torch::serialize::OutputArchive& ar) const override {
    ar.write("retries", c10::IValue(retries_));
  }
  void load_state(torch::serialize::InputArchive& ar) override {
    c10::IValue v;
    ar.read("retries", v);
    retries_ = v.toInt();
  }

 private:
  void shrink(tt::State& s) {
    const int64_t now = s.micro_batch_size, next = now / 2;
    if (next < min_micro_) {
      TT_FAIL_AS(OutOfMemory, "oom-guard: out of memory at step ", s.step + 1, " even with micro-batch ", now,
                 " (plugins.oom-guard.min_micro_batch is ", min_micro_, "): ", s.oom_message,
                 ". Fixes: raise trainer.memory_cap (or free device memory), ",
                 min_micro_ > 1 ? "lower min_micro_batch, " : "", "or add "
                 "[checkpoint] / [amp] / [adam8bit] to need less memory per example");
    }
    ++retries_;
    // the trainer has freed what the failed attempt held: the retry's own peak starts here
    tt::Meter::global().mark_peak();
    marked_ = tt::Meter::global().installed();
    s.micro_batch_size = next;
    s.retry_batch = true;
    pending_report_ = true;
    tt::log().warn("oom-guard: out of memory at step {} with micro-batch {} ({}); retrying the batch with micro-batch {}",
                   s.step + 1, now, s.oom_message, next);
  }

  int64_t min_micro_;
  int64_t retries_ = 0;
  bool pending_report_ = false;
  bool marked_ = false;  // this process marked the meter's peak at a retry
};

struct OomGuardOptions {
  int64_t min_micro_batch;
};

void register_oom_guard(tt::Registry& r) {
  r.add_plugin("oom-guard",
               "on out-of-memory during a batch: free it, halve the micro-batch (the batch is kept through "
               "gradient accumulation) and run the same batch again; the size that worked is kept",
               tt::Schema()
                   .field("min_micro_batch", &OomGuardOptions::min_micro_batch, 1,
                          "stop with an error rather than go below this micro-batch size")
                   .range(tt::ge(1)),
               [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
                 return std::make_unique<OomGuard>(o.to<OomGuardOptions>().min_micro_batch);
               });
}

}  // namespace

TT_MODULE("plugin", "oom-guard", "halve the micro-batch and retry the batch on out-of-memory", register_oom_guard)
