#include "chunked_attention.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tt/error.h"
#include "tt/log.h"

namespace tt::attn {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Which keys a query sees: causal (key j visible to query i when j <= i + offset, offset =
// S - T, as tril(S - T)) and padding ([B, 1, 1, S], true = padding; undefined without).
struct Masking {
  bool causal = false;
  int64_t offset = 0;
  at::Tensor padded;

  // End (exclusive) of the keys any of the queries [i0, i1) sees: blocks from here on are skipped.
  int64_t key_end(int64_t i1, int64_t S) const { return causal ? std::clamp<int64_t>(i1 + offset, 0, S) : S; }

  // Sets the masked scores of the tile (queries [i0, i1), keys [j0, j1)) to -inf.
  void apply(at::Tensor& scores, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (causal && j1 - 1 > i0 + offset) {  // the tile crosses the diagonal
      auto opts = torch::dtype(torch::kLong).device(scores.device());
      auto last_visible = torch::arange(i0 + offset, i1 + offset, opts).unsqueeze(1);  // [cq, 1]
      auto key = torch::arange(j0, j1, opts).unsqueeze(0);                              // [1, ck]
      scores.masked_fill_(key > last_visible, -kInf);
    }
    if (padded.defined()) scores.masked_fill_(padded.slice(3, j0, j1), -kInf);
  }
};

Masking masking(bool causal, int64_t T, int64_t S, const at::Tensor& key_padding) {
  Masking m;
  m.causal = causal;
  m.offset = S - T;
  if (key_padding.defined()) m.padded = key_padding.logical_not().view({key_padding.size(0), 1, 1, S});
  return m;
}

at::Tensor as_float(const at::Tensor& x) { return x.to(torch::kFloat).contiguous(); }

struct ChunkedAttentionFunction : public torch::autograd::Function<ChunkedAttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const c10::optional<at::Tensor>& key_padding, bool causal, int64_t chunk_q,
                            int64_t chunk_k) {
    // float32 math whatever autocast says (it would round the tiles' matmuls to bf16/fp16)
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const at::Tensor padding = key_padding.has_value() ? *key_padding : at::Tensor();
    const Masking mask = masking(causal, T, S, padding);
    const auto qf = as_float(q), kf = as_float(k), vf = as_float(v);
    const auto opts = qf.options();

    auto out = torch::empty({B, H, T, D}, opts);
    auto lse = torch::empty({B, H, T}, opts);
    for (int64_t i0 = 0; i0 < T; i0 += chunk_q) {
      const int64_t i1 = std::min(i0 + chunk_q, T), rows = i1 - i0;
      const auto qc = qf.slice(2, i0, i1);
      // running row max (the lowest finite float until a key is seen: exp stays NaN-free), row sum
      auto row_max = torch::full({B, H, rows, 1}, std::numeric_limits<float>::lowest(), opts);
      auto row_sum = torch::zeros({B, H, rows, 1}, opts);
      auto acc = torch::zeros({B, H, rows, D}, opts);
      const int64_t key_end = mask.key_end(i1, S);
      for (int64_t j0 = 0; j0 < key_end; j0 += chunk_k) {
        const int64_t j1 = std::min(j0 + chunk_k, key_end);
        auto p = torch::matmul(qc, kf.slice(2, j0, j1).transpose(-2, -1)).mul_(scale);  // scores [B,H,cq,ck]
        mask.apply(p, i0, i1, j0, j1);
        auto new_max = torch::maximum(row_max, std::get<0>(p.max(-1, /*keepdim=*/true)));
        auto rescale = (row_max - new_max).exp_();
        p.sub_(new_max).exp_();
        row_sum.mul_(rescale).add_(p.sum(-1, /*keepdim=*/true));
        acc.mul_(rescale).add_(torch::matmul(p, vf.slice(2, j0, j1)));
        row_max = std::move(new_max);
      }
      // a row that saw no key: output 0 and LSE +inf, so that backward's P = exp(S - LSE) is 0
      auto none = row_sum.eq(0);
      out.slice(2, i0, i1).copy_(acc.div_(row_sum.masked_fill(none, 1)));
      lse.slice(2, i0, i1).copy_(row_max.add_(row_sum.log()).masked_fill_(none, kInf).squeeze(-1));
    }
    auto result = out.to(q.scalar_type());
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["chunk_q"] = chunk_q;
    ctx->saved_data["chunk_k"] = chunk_k;
    ctx->save_for_backward({q, k, v, result, lse, padding});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const bool causal = ctx->saved_data["causal"].toBool();
    const int64_t chunk_q = ctx->saved_data["chunk_q"].toInt(), chunk_k = ctx->saved_data["chunk_k"].toInt();
    const int64_t T = q.size(2), D = q.size(3), S = k.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const Masking mask = masking(causal, T, S, saved[5]);
    const auto qf = as_float(q), kf = as_float(k), vf = as_float(v), dout = as_float(grad_outputs.at(0));
    const auto lse = saved[4].unsqueeze(-1);                           // [B,H,T,1]
    const auto delta = (dout * saved[3].to(torch::kFloat)).sum(-1, true);  // D_i = rowsum(dO * O)

    auto dq = torch::zeros_like(qf), dk = torch::zeros_like(kf), dv = torch::zeros_like(vf);
    for (int64_t i0 = 0; i0 < T; i0 += chunk_q) {
      const int64_t i1 = std::min(i0 + chunk_q, T);
      const auto qc = qf.slice(2, i0, i1), doc = dout.slice(2, i0, i1);
      const auto lse_c = lse.slice(2, i0, i1), delta_c = delta.slice(2, i0, i1);
      auto dqc = dq.slice(2, i0, i1);
      const int64_t key_end = mask.key_end(i1, S);
      for (int64_t j0 = 0; j0 < key_end; j0 += chunk_k) {
        const int64_t j1 = std::min(j0 + chunk_k, key_end);
        const auto kb = kf.slice(2, j0, j1), vb = vf.slice(2, j0, j1);
        auto p = torch::matmul(qc, kb.transpose(-2, -1)).mul_(scale);
        mask.apply(p, i0, i1, j0, j1);
        p.sub_(lse_c).exp_();                                          // P, 0 where masked
        dv.slice(2, j0, j1).add_(torch::matmul(p.transpose(-2, -1), doc));
        auto ds = torch::matmul(doc, vb.transpose(-2, -1)).sub_(delta_c).mul_(p);  // P * (dP - D_i)
        dqc.add_(torch::matmul(ds, kb), scale);
        dk.slice(2, j0, j1).add_(torch::matmul(ds.transpose(-2, -1), qc), scale);
      }
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()),
            at::Tensor(),           at::Tensor(),           at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                             const at::Tensor& key_padding, int64_t chunk_q, int64_t chunk_k) {
  TT_CHECK(chunk_q > 0 && chunk_k > 0, "chunked attention: chunk sizes must be positive (got ", chunk_q, ", ", chunk_k,
           ")");
  TT_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "chunked attention: q, k, v must be [B, H, T, D], got ",
           q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TT_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3),
           "chunked attention: q ", q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(), " do not match");
  c10::optional<at::Tensor> padding;
  if (key_padding.defined()) {
    TT_CHECK(key_padding.dim() == 2 && key_padding.size(0) == k.size(0) && key_padding.size(1) == k.size(2),
             "chunked attention: key_padding must be [B, S] = [", k.size(0), ", ", k.size(2), "], got ",
             key_padding.sizes());
    padding = key_padding.to(torch::kBool);
  }
  return ChunkedAttentionFunction::apply(q, k, v, padding, causal, chunk_q, chunk_k);
}

std::vector<at::Tensor> saved_for_backward(const at::Tensor& out) {
  auto* node = dynamic_cast<torch::autograd::CppNode<ChunkedAttentionFunction>*>(out.grad_fn().get());
  if (node == nullptr) return {};
  return node->ctx_.get_saved_variables();
}

ChunkedAttentionKernel::ChunkedAttentionKernel(int64_t chunk_q, int64_t chunk_k) : chunk_q_(chunk_q), chunk_k_(chunk_k) {
  TT_CHECK(chunk_q > 0 && chunk_k > 0, "chunked attention: chunk sizes must be positive (got ", chunk_q, ", ", chunk_k,
           ")");
}

at::Tensor ChunkedAttentionKernel::forward(const tt::nn::AttentionInputs& in) {
  if (in.dropout > 0 && in.training) {
    if (!warned_.exchange(true))
      tt::log().warn(
          "attention: kernel chunked has no attention-probability dropout; training calls with dropout {} use the "
          "naive kernel (T x S scores) instead",
          in.dropout);
    return naive_.forward(in);
  }
  return chunked_attention(in.q, in.k, in.v, in.causal, in.key_padding, chunk_q_, chunk_k_);
}

}  // namespace tt::attn
