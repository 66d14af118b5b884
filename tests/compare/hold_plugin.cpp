// A test plugin that holds `bytes` of tensor memory from FIT_START to FIT_END, as a plugin with
// state of its own does (EMA weights, buffers): tt-run's compare mode must show those bytes in
// the rest of the peak, beside parameters, gradients, optimizer state and activations.
// step_sleep_ms makes each step that much slower (a slow run's figures). report: true reports them
// (tt::report_held), so that they are named apart from the rest.
#include <torch/torch.h>

#include <chrono>
#include <thread>

#include "tt/extension.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {
class Hold final : public tt::Plugin {
 public:
  Hold(int64_t bytes, int64_t sleep_ms, bool report) : bytes_(bytes), sleep_ms_(sleep_ms), report_(report) {}
  void on(tt::Event e, tt::State& s) override {
    if (e == tt::Event::BEFORE_STEP && sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (e == tt::Event::FIT_START) held_ = torch::ones({bytes_}, torch::kUInt8);
    if (e == tt::Event::FIT_START && report_) tt::report_held(s, "buffer", bytes_, tt::Held::Tensors);
    if (e == tt::Event::FIT_END) held_ = at::Tensor();
  }

 private:
  int64_t bytes_, sleep_ms_;
  bool report_;
  at::Tensor held_;
};

void reg(tt::Registry& r) {
  r.add_plugin("test-hold", "test plugin that holds tensor memory during the fit",
               tt::Schema()
                   .add("bytes", tt::Type::Bytes, "4MiB", "tensor bytes held from FIT_START to FIT_END")
                   .add("step_sleep_ms", tt::Type::Int, "0", "milliseconds each step sleeps")
                   .add("report", tt::Type::Bool, "false", "report the bytes held (tt::report_held)"),
               [](const tt::Options& o) {
                 return std::make_unique<Hold>(o.get_bytes("bytes"), o.get_int("step_sleep_ms"), o.get_bool("report"));
               });
}
}  // namespace

TT_MODULE("plugin", "test-hold", "a test plugin that holds tensor memory", reg)
