#include "tt/nn.h"

#include "tt/autocast.h"

#include <torch/torch.h>

#include <cmath>

#include "tt/error.h"

namespace tt::nn {

LinearAdapter::~LinearAdapter() = default;
AttentionKernel::~AttentionKernel() = default;
Block::~Block() = default;
BlockRunner::~BlockRunner() = default;

// ---------------------------------------------------------------- Linear

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  TT_CHECK(in > 0 && out > 0, "Linear: sizes must be positive (", in, " -> ", out, ")");
  // torch.nn.Linear's initialisation: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", torch::empty({out, in}).uniform_(-bound, bound));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}).uniform_(-bound, bound));
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  if (keep_fp32 && (x.scalar_type() != torch::kFloat || amp::current_autocast().any())) {
    amp::NoAutocast off;  // with autocast off and a float32 input, the call below runs plainly
    return forward(x.to(torch::kFloat));
  }
  auto y = torch::nn::functional::linear(x, weight, bias);
  for (auto& [name, a] : adapters_) y = y + a->forward(x);
  return y;
}

at::Tensor TiedLinearImpl::forward(const at::Tensor& x) {
  if (keep_fp32 && (x.scalar_type() != torch::kFloat || amp::current_autocast().any())) {
    amp::NoAutocast off;
    return torch::matmul(x.to(torch::kFloat), weight.t());
  }
  return torch::matmul(x, weight.t());
}

void LinearImpl::add_adapter(const std::string& name, std::shared_ptr<LinearAdapter> adapter) {
  TT_CHECK(adapter, "Linear: adapter '", name, "' is null");
  for (const auto& [n, a] : adapters_) TT_CHECK(n != name, "Linear: an adapter named '", name, "' is already attached");
  register_module("adapter_" + name, adapter);
  adapters_.emplace_back(name, std::move(adapter));
}

void LinearImpl::remove_adapter(const std::string& name) {
  for (auto it = adapters_.begin(); it != adapters_.end(); ++it)
    if (it->first == name) {
      unregister_module("adapter_" + name);
      adapters_.erase(it);
      return;
    }
}

// ---------------------------------------------------------------- attention

at::Tensor NaiveAttentionKernel::forward(const AttentionInputs& in) {
  const int64_t T = in.q.size(2), S = in.k.size(2), D = in.q.size(3);
  auto scores = torch::matmul(in.q, in.k.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));  // [B,H,T,S]
  if (in.causal) {
    auto keep = torch::ones({T, S}, torch::dtype(torch::kBool).device(in.q.device())).tril(S - T);
    scores = scores.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
  }
  if (in.key_padding.defined())
    scores = scores.masked_fill(in.key_padding.logical_not().view({in.q.size(0), 1, 1, S}),
                                -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores, -1);
  // a row with every key masked (only possible with padding) gives NaN: make it attend nowhere
  if (in.key_padding.defined()) probs = torch::nan_to_num(probs, 0.0);
  if (in.dropout > 0 && in.training) probs = torch::dropout(probs, in.dropout, true);
  return torch::matmul(probs, in.v);
}

at::Tensor apply_rotary(const at::Tensor& x, double base) {
  const int64_t T = x.size(-2), D = x.size(-1);
  TT_CHECK(D % 2 == 0, "rotary positions need an even head dimension (got ", D, ")");
  auto opts = torch::dtype(torch::kFloat).device(x.device());
  auto inv_freq = torch::pow(base, -torch::arange(0, D, 2, opts) / static_cast<double>(D));  // [D/2]
  auto angles = torch::outer(torch::arange(T, opts), inv_freq);                                // [T, D/2]
  auto cos = torch::cat({angles.cos(), angles.cos()}, -1).to(x.scalar_type());                 // [T, D]
  auto sin = torch::cat({angles.sin(), angles.sin()}, -1).to(x.scalar_type());
  auto halves = x.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);
  return x * cos + rotated * sin;
}

AttentionImpl::AttentionImpl(const Options& o) : options(o) {
  TT_CHECK(o.n_heads > 0 && o.d_model % o.n_heads == 0, "Attention: d_model (", o.d_model,
           ") must be a multiple of n_heads (", o.n_heads, ")");
  qkv = register_module("qkv", Linear(o.d_model, 3 * o.d_model, o.bias));
  proj = register_module("proj", Linear(o.d_model, o.d_model, o.bias));
  kernel_ = std::make_shared<NaiveAttentionKernel>();
}

void AttentionImpl::set_kernel(std::shared_ptr<AttentionKernel> kernel) {
  kernel_ = kernel ? std::move(kernel) : std::make_shared<NaiveAttentionKernel>();
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& key_padding) {
  TT_CHECK(x.dim() == 3 && x.size(2) == options.d_model, "Attention: input must be [B, T, ", options.d_model,
           "], got ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), H = options.n_heads, D = options.d_model / H;
  auto parts = qkv->forward(x).view({B, T, 3, H, D}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, D]
  AttentionInputs in;
  in.q = parts[0];
  in.k = parts[1];
  in.v = parts[2];
  if (options.rotary) {
    in.q = apply_rotary(in.q, options.rotary_base);
    in.k = apply_rotary(in.k, options.rotary_base);
  }
  in.causal = options.causal;
  in.key_padding = key_padding;
  in.dropout = options.dropout;
  in.training = is_training();
  auto y = kernel_->forward(in);                                  // [B, H, T, D]
  y = y.transpose(1, 2).contiguous().view({B, T, options.d_model});
  return proj->forward(y);
}

// ---------------------------------------------------------------- norms, MLP, embedding

RMSNormImpl::RMSNormImpl(int64_t dim, double e) : eps(e) { weight = register_parameter("weight", torch::ones({dim})); }

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  auto xf = x.to(torch::kFloat);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
  if (keep_fp32) {
    amp::NoAutocast off;
    return y * weight;
  }
  return y.to(x.scalar_type()) * weight;
}

LayerNormImpl::LayerNormImpl(int64_t dim, double e) : eps(e) {
  weight = register_parameter("weight", torch::ones({dim}));
  bias = register_parameter("bias", torch::zeros({dim}));
}

at::Tensor LayerNormImpl::forward(const at::Tensor& x) {
  if (keep_fp32) {
    amp::NoAutocast off;
    return torch::layer_norm(x.to(torch::kFloat), {weight.size(0)}, weight, bias, eps);
  }
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

MLPImpl::MLPImpl(int64_t d_model, int64_t d_ff, double drop, bool bias) : dropout(drop) {
  fc1 = register_module("fc1", Linear(d_model, d_ff, bias));
  fc2 = register_module("fc2", Linear(d_ff, d_model, bias));
}

at::Tensor MLPImpl::forward(const at::Tensor& x) {
  auto y = fc2->forward(torch::gelu(fc1->forward(x)));
  return dropout > 0 ? torch::dropout(y, dropout, is_training()) : y;
}

EmbeddingImpl::EmbeddingImpl(int64_t count, int64_t dim, double init_std) {
  TT_CHECK(count > 0 && dim > 0, "Embedding: sizes must be positive");
  weight = register_parameter("weight", torch::randn({count, dim}) * init_std);
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return torch::embedding(weight, ids); }

// ---------------------------------------------------------------- block stack

void BlockStackImpl::push_back(std::shared_ptr<Block> block) {
  TT_CHECK(block, "BlockStack: null block");
  register_module(std::to_string(blocks_.size()), block);
  blocks_.push_back(std::move(block));
}

void BlockStackImpl::set_runner(std::shared_ptr<BlockRunner> runner) { runner_ = std::move(runner); }

at::Tensor BlockStackImpl::forward(const at::Tensor& x) {
  at::Tensor h = x;
  for (size_t i = 0; i < blocks_.size(); ++i)
    h = runner_ ? runner_->run(static_cast<int64_t>(i), *blocks_[i], h) : blocks_[i]->forward(h);
  return h;
}

}  // namespace tt::nn
