#include "checkpoint.h"

#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <optional>

#include "tt/autocast.h"
#include "tt/error.h"
#include "tt/extension.h"
#include "tt/meter.h"

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

// The block's call: through the runner checkpoint wraps (the one it replaced), or directly.
at::Tensor call_block(tt::nn::BlockRunner* inner, int64_t index, tt::nn::Block& block, const at::Tensor& x) {
  return inner ? inner->run(index, block, x) : block.forward(x);
}

// autograd records a function only where one of its tensor inputs needs a gradient. Where the
// block's input needs none (the layers before it frozen: lora over a frozen embedding) and the
// block has trainable parameters of its own, an empty leaf that needs one is passed beside it, so
// that the backward runs and those parameters get their gradients; it gets none itself.
at::Tensor anchor_for(tt::nn::Block& block, const at::Tensor& x) {
  bool trainable = false;
  if (!x.requires_grad())
    for (const auto& p : block.parameters(/*recurse=*/true))
      if (p.requires_grad()) {
        trainable = true;
        break;
      }
  return torch::empty({0}, x.options().requires_grad(trainable));
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  // Addresses: the block, the runner it is called through (0: directly), the probing runner
  // that records the re-run's bytes (0: none). `anchor`: anchor_for's.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& /*anchor*/,
                            int64_t block_address, int64_t inner_address, int64_t probe_address, int64_t index,
                            bool recompute_activation) {
    ctx->saved_data["probe"] = probe_address;
    ctx->saved_data["lean"] = recompute_activation;
    ctx->saved_data["index"] = index;
    at::Generator gen = generator_for(x);
    ctx->saved_data["rng"] = rng_state(gen);
    ctx->saved_data["block"] = block_address;
    ctx->saved_data["inner"] = inner_address;
    // autocast as the forward ran (amp): the recomputation in backward re-enters it
    const tt::amp::AutocastState ac = tt::amp::current_autocast();
    ctx->saved_data["ac_cpu"] = ac.cpu;
    ctx->saved_data["ac_cuda"] = ac.cuda;
    ctx->saved_data["ac_cpu_dtype"] = static_cast<int64_t>(ac.cpu_dtype);
    ctx->saved_data["ac_cuda_dtype"] = static_cast<int64_t>(ac.cuda_dtype);
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;  // nothing inside the block is recorded
    return call_block(reinterpret_cast<tt::nn::BlockRunner*>(inner_address), index,
                      *reinterpret_cast<tt::nn::Block*>(block_address), x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor x = ctx->get_saved_variables().at(0);
    auto* block = reinterpret_cast<tt::nn::Block*>(ctx->saved_data["block"].toInt());
    auto* inner = reinterpret_cast<tt::nn::BlockRunner*>(ctx->saved_data["inner"].toInt());
    const int64_t index = ctx->saved_data["index"].toInt();
    at::Generator gen = generator_for(x);
    const at::Tensor now = rng_state(gen);
    set_rng_state(gen, ctx->saved_data["rng"].toTensor());  // the forward's random draws again
    at::Tensor input = x.detach().requires_grad_(x.requires_grad());
    torch::autograd::Edge root;  // the recomputed output's place in the graph
    {
      torch::AutoGradMode grad(true);
      tt::amp::AutocastState ac;
      ac.cpu = ctx->saved_data["ac_cpu"].toBool();
      ac.cuda = ctx->saved_data["ac_cuda"].toBool();
      ac.cpu_dtype = static_cast<c10::ScalarType>(ctx->saved_data["ac_cpu_dtype"].toInt());
      ac.cuda_dtype = static_cast<c10::ScalarType>(ctx->saved_data["ac_cuda_dtype"].toInt());
      tt::amp::AutocastScope autocast(ac);
      // With recompute_activation: the MLPs keep less, and the residual MLP's output, which
      // nothing in this re-run reads, is not computed (only its backward runs).
      std::optional<tt::nn::LeanRecompute> lean;
      if (ctx->saved_data["lean"].toBool()) lean.emplace(*block);
      const int64_t before = tt::Meter::global().foreground_current();
      // through the inner runner as in the forward: saved-tensor hooks it opens act on what this re-run saves
      at::Tensor y = call_block(inner, index, *block, input);
      if (auto* probe = reinterpret_cast<CheckpointRunner*>(ctx->saved_data["probe"].toInt()))
        probe->record(index, tt::Meter::global().foreground_current() - before, ctx->saved_data["lean"].toBool());
      TT_CHECK(y.requires_grad(), "checkpoint: block ", index, " recomputed an output that does not require grad");
      root = torch::autograd::impl::gradient_edge(y);
      // y's values are not needed for backward, only its graph: letting them go here keeps one
      // block output less alive through the block's backward (the graph holds no reference to them)
    }
    set_rng_state(gen, now);
    torch::autograd::Engine::get_default_engine().execute({root}, {grad_outputs.at(0)}, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true);
    return {x.requires_grad() ? input.grad() : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint(tt::nn::Block& block, const at::Tensor& x, bool recompute_activation, tt::nn::BlockRunner* inner,
                      int64_t index) {
  return CheckpointFunction::apply(x, anchor_for(block, x), reinterpret_cast<int64_t>(&block),
                                   reinterpret_cast<int64_t>(inner), int64_t{0}, index, recompute_activation);
}

at::Tensor CheckpointRunner::run(int64_t index, tt::nn::Block& block, const at::Tensor& x) {
  if (!torch::GradMode::is_enabled() || which_.count(index) == 0) return call_block(inner_.get(), index, block, x);
  if (probing_) {
    // the re-run in full first (what a block left alone keeps), then as checkpointed runs make it
    const bool lean = recompute_activation_ && kept_.at(static_cast<size_t>(index)) >= 0;
    return CheckpointFunction::apply(x, anchor_for(block, x), reinterpret_cast<int64_t>(&block),
                                     reinterpret_cast<int64_t>(inner_.get()), reinterpret_cast<int64_t>(this), index, lean);
  }
  return checkpoint(block, x, recompute_activation_, inner_.get(), index);
}

void CheckpointRunner::start_probe(int64_t n) {
  which_.clear();
  for (int64_t i = 0; i < n; ++i) which_.insert(i);
  recomputed_.assign(static_cast<size_t>(n), -1);
  kept_.assign(static_cast<size_t>(n), -1);
  probing_ = true;
}

bool CheckpointRunner::measured() const {
  auto known = [](const std::vector<int64_t>& v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](int64_t b) { return b >= 0; });
  };
  return known(recomputed_) && known(kept_);
}

void CheckpointRunner::record(int64_t index, int64_t bytes, bool lean) {
  if (index < 0 || index >= static_cast<int64_t>(kept_.size())) return;
  const auto i = static_cast<size_t>(index);
  bytes = std::max<int64_t>(0, bytes);
  if (lean) {
    recomputed_[i] = bytes;
  } else if (!recompute_activation_) {
    recomputed_[i] = kept_[i] = bytes;  // one re-run, in full either way
  } else {
    kept_[i] = bytes;
  }
  if (measured()) probing_ = false;
}

namespace {
std::vector<int64_t> by_size_descending(const std::vector<int64_t>& held) {
  std::vector<int64_t> order(held.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return held[a] > held[b]; });
  return order;
}
}  // namespace

std::set<int64_t> choose_selective(const std::vector<int64_t>& held, double fraction) {
  TT_CHECK(fraction > 0 && fraction <= 1, "choose_selective: fraction ", fraction, " is not in (0, 1]");
  const auto order = by_size_descending(held);
  const auto count = static_cast<size_t>(std::ceil(fraction * static_cast<double>(held.size()) - 1e-9));
  return std::set<int64_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(std::min(count, order.size())));
}

int64_t predict_peak(const std::vector<int64_t>& kept, const std::vector<int64_t>& recomputed, int64_t base,
                     const std::set<int64_t>& checkpointed) {
  int64_t held = 0, top = 0;  // bytes the blocks left alone keep so far; the highest point
  for (size_t i = 0; i < kept.size(); ++i) {
    if (checkpointed.count(static_cast<int64_t>(i)))
      top = std::max(top, held + recomputed[i]);
    else
      held += kept[i];
  }
  return base + std::max(top, held);
}

BudgetChoice choose_budget(const std::vector<int64_t>& kept, const std::vector<int64_t>& recomputed, int64_t base,
                           int64_t budget) {
  TT_CHECK(kept.size() == recomputed.size(), "choose_budget: ", kept.size(), " kept and ", recomputed.size(),
           " recomputed sizes");
  const size_t n = kept.size();
  const int64_t room = budget - base;
  // best[i][c]: over the first i blocks with c of them left alone, every re-run so far within
  // the room, the least bytes those c keep (less is never worse for the blocks after); -1 none.
  std::vector<std::vector<int64_t>> best(n + 1, std::vector<int64_t>(n + 1, -1));
  std::vector<std::vector<char>> alone(n + 1, std::vector<char>(n + 1, 0));
  if (room >= 0) best[0][0] = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t c = 0; c <= i; ++c) {
      const int64_t h = best[i][c];
      if (h < 0) continue;
      if (h + recomputed[i] <= room && (best[i + 1][c] < 0 || h < best[i + 1][c])) {
        best[i + 1][c] = h;
        alone[i + 1][c] = 0;
      }
      if (h + kept[i] <= room && (best[i + 1][c + 1] < 0 || h + kept[i] < best[i + 1][c + 1])) {
        best[i + 1][c + 1] = h + kept[i];
        alone[i + 1][c + 1] = 1;
      }
    }
  BudgetChoice choice;
  for (size_t i = 0; i < n; ++i) choice.which.insert(static_cast<int64_t>(i));
  for (size_t c = n + 1; c-- > 0;) {
    if (best[n][c] < 0) continue;
    choice.which.clear();
    for (size_t i = n, k = c; i > 0; --i) {
      if (alone[i][k])
        --k;
      else
        choice.which.insert(static_cast<int64_t>(i - 1));
    }
    choice.fits = true;
    break;
  }
  choice.predicted_peak = predict_peak(kept, recomputed, base, choice.which);
  return choice;
}

std::set<int64_t> select_blocks(const std::string& policy, int64_t n, int64_t every,
                                const std::vector<int64_t>& listed) {
  std::set<int64_t> out;
  if (policy == "all") {
    for (int64_t i = 0; i < n; ++i) out.insert(i);
  } else if (policy == "every") {
    TT_CHECK(every >= 1, "select_blocks: every ", every, " is below 1");
    for (int64_t i = 0; i < n; i += every) out.insert(i);
  } else if (policy == "blocks") {
    TT_CHECK(!listed.empty(), "select_blocks: policy blocks with no block listed");
    for (int64_t i : listed) {
      TT_CHECK(i >= 0 && i < n, "select_blocks: block ", i, " does not exist (the stack has ", n, " blocks)");
      out.insert(i);
    }
  } else {
    TT_FAIL("select_blocks: unknown policy '", policy, "' (all, every, blocks)");
  }
  return out;
}

}  // namespace tt::ckpt
