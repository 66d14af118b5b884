#include "checkpoint.h"

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <mutex>

#include "tt/autocast.h"
#include "tt/error.h"

namespace tt::ckpt {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Generator generator_for(const at::Tensor& x) {
  return x.is_cuda() ? at::globalContext().defaultGenerator(x.device()) : at::detail::getDefaultCPUGenerator();
}

at::Tensor rng_state(at::Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(at::Generator& gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t block_address) {
    at::Generator gen = generator_for(x);
    ctx->saved_data["rng"] = rng_state(gen);
    ctx->saved_data["block"] = block_address;
    // autocast as the forward ran (amp): the recomputation in backward re-enters it
    const tt::amp::AutocastState ac = tt::amp::current_autocast();
    ctx->saved_data["ac_cpu"] = ac.cpu;
    ctx->saved_data["ac_cuda"] = ac.cuda;
    ctx->saved_data["ac_cpu_dtype"] = static_cast<int64_t>(ac.cpu_dtype);
    ctx->saved_data["ac_cuda_dtype"] = static_cast<int64_t>(ac.cuda_dtype);
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;  // nothing inside the block is recorded
    return reinterpret_cast<tt::nn::Block*>(block_address)->forward(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor x = ctx->get_saved_variables().at(0);
    auto* block = reinterpret_cast<tt::nn::Block*>(ctx->saved_data["block"].toInt());
    at::Generator gen = generator_for(x);
    const at::Tensor now = rng_state(gen);
    set_rng_state(gen, ctx->saved_data["rng"].toTensor());  // the forward's random draws again
    at::Tensor input = x.detach().requires_grad_(x.requires_grad());
    at::Tensor y;
    {
      torch::AutoGradMode grad(true);
      tt::amp::AutocastState ac;
      ac.cpu = ctx->saved_data["ac_cpu"].toBool();
      ac.cuda = ctx->saved_data["ac_cuda"].toBool();
      ac.cpu_dtype = static_cast<c10::ScalarType>(ctx->saved_data["ac_cpu_dtype"].toInt());
      ac.cuda_dtype = static_cast<c10::ScalarType>(ctx->saved_data["ac_cuda_dtype"].toInt());
      tt::amp::AutocastScope autocast(ac);
      y = block->forward(input);
    }
    set_rng_state(gen, now);
    torch::autograd::backward({y}, {grad_outputs.at(0)});
    return {x.requires_grad() ? input.grad() : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint(tt::nn::Block& block, const at::Tensor& x) {
  return CheckpointFunction::apply(x, reinterpret_cast<int64_t>(&block));
}

at::Tensor CheckpointRunner::run(int64_t index, tt::nn::Block& block, const at::Tensor& x) {
  if (!torch::GradMode::is_enabled() || which_.count(index) == 0) return block.forward(x);
  return checkpoint(block, x);
}

std::set<int64_t> select_blocks(const std::string& policy, int64_t n, int64_t every,
                                const std::vector<int64_t>& listed) {
  std::set<int64_t> out;
  if (policy == "all") {
    for (int64_t i = 0; i < n; ++i) out.insert(i);
  } else if (policy == "every") {
    TT_CHECK_AS(ConfigError, every >= 1, "plugins.checkpoint.every must be at least 1 (got ", every, ")");
    for (int64_t i = 0; i < n; i += every) out.insert(i);
  } else if (policy == "blocks") {
    TT_CHECK_AS(ConfigError, !listed.empty(), "plugins.checkpoint.blocks: give the block indices, e.g. [0, 2]");
    for (int64_t i : listed) {
      TT_CHECK_AS(ConfigError, i >= 0 && i < n, "plugins.checkpoint.blocks: block ", i, " does not exist (the stack has ",
                  n, " blocks: 0..", n - 1, ")");
      out.insert(i);
    }
  } else {
    TT_FAIL_AS(ConfigError, "plugins.checkpoint.policy: unknown policy '", policy, "' (all, every, blocks)");
  }
  return out;
}

}  // namespace tt::ckpt
