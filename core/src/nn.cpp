#include "tt/nn.h"

#include <fnmatch.h>

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

bool name_matches(const std::string& pattern, const std::string& name) {
  if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  if (name.rfind(pattern + ".", 0) == 0) return true;
  if (pattern.find('.') == std::string::npos) {
    const std::string last = name.substr(name.rfind('.') + 1);
    return fnmatch(pattern.c_str(), last.c_str(), 0) == 0;
  }
  return false;
}

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
  // aten::linear, as Python's F.linear: under autocast the bias is cast too. (The C++ frontend's
  // functional::linear adds a float32 bias in place to the bf16 product through a float32 copy.)
  auto y = at::linear(x, weight, bias);
  for (auto& [name, a] : adapters_)
    if (a->active()) y = y + a->forward(x);
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

namespace {

// out = softmax(scores, -1) @ v, keeping P = softmax(scores) and v for backward. Autograd's own
// softmax backward allocates dS beside P and dP: three N x N tensors live at once, the peak of a
// transformer's backward. Here dS = P * (dP - rowsum(P * dP)) replaces dP a block of rows at a
// time (softmax's own backward kernel on ~2 MiB of rows, then copied over them).
struct SoftmaxMatmul : torch::autograd::Function<SoftmaxMatmul> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& scores, const at::Tensor& v) {
    // v is usually a view into the fused qkv output: a contiguous copy of it alone lets that
    // [B, T, 3 d] tensor go, as autograd's matmul would (it saves its own reshaped copy)
    at::Tensor vc = v.contiguous();
    at::Tensor probs = torch::softmax(scores, -1);
    at::Tensor out = torch::matmul(probs, vc);
    // Under CUDA autocast softmax runs in float32 and the product in fp16: backward multiplies
    // in the product's dtype, as the forward did
    ctx->saved_data["dtype"] = static_cast<int64_t>(out.scalar_type());
    ctx->save_for_backward({probs, vc});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &probs = saved[0], &v = saved[1];
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    const at::Tensor d_out = grads[0].to(dtype);
    at::Tensor dv = torch::matmul(probs.to(dtype).transpose(-2, -1), d_out).to(v.scalar_type());
    // dP, turned into dS in place (in softmax's dtype)
    at::Tensor ds = torch::matmul(d_out, v.to(dtype).transpose(-2, -1)).to(probs.scalar_type());
    // float accumulation for bf16 rows, as autograd's softmax backward does
    const int64_t S = ds.size(-1), R = ds.numel() / std::max<int64_t>(1, S);
    const at::Tensor p_rows = probs.reshape({R, S});
    at::Tensor d_rows = ds.view({R, S});
    const int64_t block = std::max<int64_t>(1, (int64_t{1} << 19) / std::max<int64_t>(1, S));
    for (int64_t r = 0; r < R; r += block) {
      const int64_t n = std::min(block, R - r);
      at::Tensor d = d_rows.narrow(0, r, n);
      d.copy_(at::_softmax_backward_data(d, p_rows.narrow(0, r, n), 1, probs.scalar_type()));
    }
    return {ds, dv};
  }
};

}  // namespace

at::Tensor NaiveAttentionKernel::forward(const AttentionInputs& in) {
  const int64_t B = in.q.size(0), H = in.q.size(1), T = in.q.size(2), S = in.k.size(2), D = in.q.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // One [B,H,T,S] tensor per step where it can be: the scale goes into the product (baddbmm's
  // alpha) and the causal mask is an additive [T,S] bias (0 / -inf) in the same call, instead of
  // a product, a scaled copy and a masked copy (each N x N) in forward and again in backward.
  auto q = in.q.reshape({B * H, T, D}), kt = in.k.reshape({B * H, S, D}).transpose(1, 2);
  at::Tensor scores;
  auto causal_keep = [&] { return torch::ones({T, S}, torch::dtype(torch::kBool).device(in.q.device())).tril(S - T); };
  if (in.causal && T <= S && !in.key_padding.defined()) {
    auto bias = torch::zeros({T, S}, in.q.options().requires_grad(false))
                    .masked_fill_(causal_keep().logical_not(), -std::numeric_limits<float>::infinity());
    scores = torch::baddbmm(bias, q, kt, /*beta=*/1.0, /*alpha=*/scale);
  } else {
    scores = torch::bmm(q * scale, kt);
    // where a query can be left with no key (T > S, or padding), masked_fill's backward keeps
    // its gradient at zero where an additive -inf bias would carry softmax's NaN into dq and dk
    if (in.causal) scores = scores.masked_fill(causal_keep().logical_not(), -std::numeric_limits<float>::infinity());
  }
  scores = scores.view({B, H, T, S});
  if (in.key_padding.defined())
    scores = scores.masked_fill(in.key_padding.logical_not().view({B, 1, 1, S}),
                                -std::numeric_limits<float>::infinity());
  if (!in.key_padding.defined() && !(in.dropout > 0 && in.training)) return SoftmaxMatmul::apply(scores, in.v);
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
  // unbind, not three selects: its backward stacks the three gradients into one tensor where
  // each select's backward would fill a zero [3, B, H, T, D] tensor and the three be summed
  auto parts = qkv->forward(x).view({B, T, 3, H, D}).permute({2, 0, 3, 1, 4}).unbind(0);  // 3 x [B, H, T, D]
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
  // A bf16 input (autocast's output of a Linear) with float32 weights: LibTorch 1.13's CPU kernel
  // refuses the mix, 2.6's computes in float32 and returns the input's type (with autocast on
  // too); on both tt does the latter. (CUDA's autocast returns float32 there.)
  if ((x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf) && weight.scalar_type() == torch::kFloat)
    return torch::layer_norm(x.to(torch::kFloat), {weight.size(0)}, weight.to(torch::kFloat), bias.to(torch::kFloat), eps)
        .to(x.scalar_type());
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

MLPImpl::MLPImpl(int64_t d_model, int64_t d_ff, double drop, bool bias) : dropout(drop) {
  fc1 = register_module("fc1", Linear(d_model, d_ff, bias));
  fc2 = register_module("fc2", Linear(d_ff, d_model, bias));
}

namespace {

// y = linear(gelu(h), w, b) keeping h, not gelu(h), for backward. Backward holds two d_ff-wide
// tensors (h and the gradient, GELU's derivative applied in place) where autograd's
// linear + gelu hold four at once (h, gelu(h), and the gradients of both).
struct GeluLinear : torch::autograd::Function<GeluLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, const at::Tensor& w,
                            const at::Tensor& b, bool skip_output) {
    at::Tensor y;
    if (skip_output) {  // the value is never read (MLPImpl::skip_output): its shape and dtype only
      const amp::AutocastState ac = amp::current_autocast();
      // autocast casts float inputs of linear to its dtype and leaves double alone
      const bool cast = (h.is_cuda() ? ac.cuda : (h.is_cpu() && ac.cpu)) && h.scalar_type() != at::kDouble;
      std::vector<int64_t> shape(h.sizes().begin(), h.sizes().end());
      shape.back() = w.size(0);
      y = at::empty(shape, h.options().dtype(cast ? (h.is_cuda() ? ac.cuda_dtype : ac.cpu_dtype)
                                                  : at::result_type(h, w)));
    } else {
      y = at::linear(torch::gelu(h), w, b);
    }
    // the dtype the product ran in (bf16 under autocast): backward multiplies in it too
    ctx->saved_data["dtype"] = static_cast<int64_t>(y.scalar_type());
    ctx->save_for_backward({h, w});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &w = saved[1];
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    const at::Tensor dy = grads[0].to(dtype).reshape({-1, w.size(0)});
    const at::Tensor h2 = h.reshape({-1, w.size(1)});
    at::Tensor dw = torch::mm(dy.t(), torch::gelu(h2).to(dtype)).to(w.scalar_type());
    at::Tensor db = dy.sum(0).to(w.scalar_type());
    at::Tensor dg = torch::mm(dy, w.to(dtype)).to(h.scalar_type());
    at::gelu_backward_out(dg, dg, h2);  // in place: dL/dh in dL/dg's storage, no third d_ff-wide tensor
    return {dg.view(h.sizes()), dw, db, at::Tensor()};
  }
};

}  // namespace

at::Tensor MLPImpl::forward(const at::Tensor& x) {
  if (recompute_activation && dropout == 0 && fc2->adapters().empty() && !fc2->keep_fp32 && fc2->bias.defined() &&
      torch::GradMode::is_enabled())
    return GeluLinear::apply(fc1->forward(x), fc2->weight, fc2->bias, skip_output);
  auto y = fc2->forward(torch::gelu(fc1->forward(x)));
  return dropout > 0 ? torch::dropout(y, dropout, is_training()) : y;
}

EmbeddingImpl::EmbeddingImpl(int64_t count, int64_t dim, double init_std) {
  TT_CHECK(count > 0 && dim > 0, "Embedding: sizes must be positive");
  weight = register_parameter("weight", torch::randn({count, dim}) * init_std);
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return torch::embedding(weight, ids); }

// ---------------------------------------------------------------- loss

namespace {

// Rows of logits converted to float32 at a time: about 1 MiB of them, at least 64 rows.
int64_t loss_row_block(int64_t classes) { return std::max<int64_t>(64, (int64_t{1} << 18) / std::max<int64_t>(1, classes)); }

struct CrossEntropy : torch::autograd::Function<CrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& target) {
    const int64_t N = logits.size(0), rows = loss_row_block(logits.size(1));
    at::Tensor lse = torch::empty({N}, logits.options().dtype(torch::kFloat));
    at::Tensor total = torch::zeros({}, logits.options().dtype(torch::kDouble));
    for (int64_t r = 0; r < N; r += rows) {
      const int64_t n = std::min(rows, N - r);
      at::Tensor x = logits.narrow(0, r, n).to(torch::kFloat);
      at::Tensor l = torch::logsumexp(x, 1);
      lse.narrow(0, r, n).copy_(l);
      total += (l - x.gather(1, target.narrow(0, r, n).unsqueeze(1)).squeeze(1)).sum(torch::kDouble);
    }
    ctx->save_for_backward({logits, target, lse});
    return (total / static_cast<double>(N)).to(torch::kFloat);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &target = saved[1], &lse = saved[2];
    const int64_t N = logits.size(0), rows = loss_row_block(logits.size(1));
    const at::Tensor scale = grads[0].to(torch::kFloat) / static_cast<double>(N);
    at::Tensor d = torch::empty_like(logits);
    for (int64_t r = 0; r < N; r += rows) {
      const int64_t n = std::min(rows, N - r);
      // softmax - one-hot, in float32 (a bf16 row minus a float32 log-sum-exp promotes)
      at::Tensor p = torch::sub(logits.narrow(0, r, n), lse.narrow(0, r, n).unsqueeze(1)).exp_();
      p.scatter_add_(1, target.narrow(0, r, n).unsqueeze(1), torch::full({n, 1}, -1.0, p.options()));
      d.narrow(0, r, n).copy_(p.mul_(scale));
    }
    return {d, at::Tensor()};
  }
};

}  // namespace

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& target) {
  TT_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0), "cross_entropy: logits must be [N, C] and target [N], got ",
           logits.sizes(), " and ", target.sizes());
  TT_CHECK(at::isFloatingType(logits.scalar_type()), "cross_entropy: logits must be floating point, got ",
           logits.scalar_type());
  TT_CHECK(logits.size(0) > 0, "cross_entropy: no rows");
  const at::Tensor t = target.to(torch::kLong);
  const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
  TT_CHECK(lo >= 0 && hi < logits.size(1), "cross_entropy: class ids must lie in [0, ", logits.size(1), "), got [", lo,
           ", ", hi, "]");
  return CrossEntropy::apply(logits, t);
}

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
