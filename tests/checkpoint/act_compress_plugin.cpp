// A test plugin that compresses activations as a user's plugin would: on INIT it wraps every
// tt::nn::BlockStack's runner with one that opens tt::nn::SavedTensorHooks around each block's
// call, packing what autograd saves (leaves aside) to bfloat16 (pack: bf16) or keeping the
// tensor itself (pack: exact, the gradients unchanged). It counts the block calls and the
// packed tensors in the trainer's forward and backward and logs them on FIT_END:
//   test-act-compress: forward: C calls, P packed; backward: C calls, P packed
// Listed before checkpoint, its runner must run inside checkpoint's, in the backward re-run too.
#include <torch/torch.h>

#include "tt/extension.h"
#include "tt/log.h"
#include "tt/module.h"
#include "tt/nn.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

struct Counts {
  int64_t calls = 0, packed = 0;
};

class Compressing final : public tt::nn::BlockRunner {
 public:
  Compressing(std::shared_ptr<tt::nn::BlockRunner> inner, bool bf16, Counts* const* phase)
      : inner_(std::move(inner)), bf16_(bf16), phase_(phase) {}
  std::string name() const override { return "test-act-compress"; }
  at::Tensor run(int64_t index, tt::nn::Block& block, const at::Tensor& x) override {
    Counts* counts = *phase_;
    if (counts) ++counts->calls;
    tt::nn::SavedTensorHooks hooks([this, counts](const at::Tensor& saved, bool leaf) -> tt::nn::SavedTensorUnpack {
      if (leaf) return nullptr;
      if (counts) ++counts->packed;
      if (!bf16_ || !saved.is_floating_point()) return [saved] { return saved; };
      return [packed = saved.to(torch::kBFloat16), dtype = saved.scalar_type()] { return packed.to(dtype); };
    });
    return inner_ ? inner_->run(index, block, x) : block.forward(x);
  }

 private:
  std::shared_ptr<tt::nn::BlockRunner> inner_;
  bool bf16_;
  Counts* const* phase_;  // the plugin's current phase (nullptr: neither forward nor backward)
};

class ActCompress final : public tt::Plugin {
 public:
  explicit ActCompress(bool bf16) : bf16_(bf16) {}
  void on(tt::Event e, tt::State& s) override {
    switch (e) {
      case tt::Event::INIT:
        for (auto& [name, stack] : tt::nn::find_modules<tt::nn::BlockStackImpl>(*s.model))
          stack->set_runner(std::make_shared<Compressing>(stack->shared_runner(), bf16_, &phase_));
        break;
      case tt::Event::BEFORE_FORWARD: phase_ = &forward_; break;
      case tt::Event::BEFORE_BACKWARD: phase_ = &backward_; break;
      case tt::Event::AFTER_FORWARD:
      case tt::Event::AFTER_BACKWARD: phase_ = nullptr; break;
      case tt::Event::FIT_END:
        tt::log().info("test-act-compress: forward: {} calls, {} packed; backward: {} calls, {} packed", forward_.calls,
                       forward_.packed, backward_.calls, backward_.packed);
        break;
      default: break;
    }
  }

 private:
  bool bf16_;
  Counts forward_, backward_;
  Counts* phase_ = nullptr;
};

void reg(tt::Registry& r) {
  r.add_plugin("test-act-compress", "test plugin packing what blocks save for backward, counting calls and tensors",
               tt::Schema().add("pack", tt::Type::String, "bf16", "bf16 | exact").choices({"bf16", "exact"}),
               [](const tt::Options& o) { return std::make_unique<ActCompress>(o.get_string("pack") == "bf16"); });
}

}  // namespace

TT_MODULE("plugin", "test-act-compress", "a test plugin that compresses what blocks save for backward", reg)
