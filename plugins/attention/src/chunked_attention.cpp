#include "chunked_attention.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
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
// S - T, as tril(S - T)) and padding (bool [B, S], true = padding; undefined without).
struct Masking {
  bool causal = false;
  int64_t offset = 0;
  at::Tensor padded;

  // End (exclusive) of the keys any of the queries [i0, i1) sees: blocks from here on are skipped.
  int64_t key_end(int64_t i1, int64_t S) const { return causal ? std::clamp<int64_t>(i1 + offset, 0, S) : S; }

  // Sets the masked scores of the tile of batch row b (queries [i0, i1), keys [j0, j1)) to -inf.
  void apply(at::Tensor& scores, int64_t b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (causal && j1 - 1 > i0 + offset) {  // the tile crosses the diagonal
      auto opts = torch::dtype(torch::kLong).device(scores.device());
      auto last_visible = torch::arange(i0 + offset, i1 + offset, opts).unsqueeze(1);  // [cq, 1]
      auto key = torch::arange(j0, j1, opts).unsqueeze(0);                              // [1, ck]
      scores.masked_fill_(key > last_visible, -kInf);
    }
    if (padded.defined()) scores.masked_fill_(padded[b].slice(0, j0, j1).unsqueeze(0), -kInf);
  }
};

Masking masking(bool causal, int64_t T, int64_t S, const at::Tensor& key_padding) {
  Masking m;
  m.causal = causal;
  m.offset = S - T;
  if (key_padding.defined()) m.padded = key_padding.logical_not().contiguous();
  return m;
}

// [B, H, N, D] as float32 [B * H, N, D], contiguous (a copy only where needed).
at::Tensor flat_float(const at::Tensor& x) {
  return x.detach().to(torch::kFloat).contiguous().view({x.size(0) * x.size(1), x.size(2), x.size(3)});
}

// The work is split over (batch x head, query chunk) items, each done with serial 2-D ops on
// one head's tiles (at::parallel_for runs the ATen ops inside it on one thread): no fork/join
// per small op, and a head's [chunk_q, chunk_k] tile stays in the core's cache. A worker
// thread takes the caller's thread-local state (inference mode, dispatch keys, ...), then
// turns autocast and autograd off. CUDA tensors are walked on the calling thread, in order:
// their kernels go to the caller's current stream (for speed on a GPU use kernel: sdpa).
template <class Body>
void for_each_item(const at::Tensor& like, int64_t items, const Body& body) {
  auto run = [&](int64_t begin, int64_t end) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    at::NoGradGuard no_grad;
    for (int64_t i = begin; i < end; ++i) body(i);
  };
  if (!like.is_cpu()) {
    run(0, items);
    return;
  }
  const at::ThreadLocalState caller;
  at::parallel_for(0, items, 1, [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard same_state(caller);
    run(begin, end);
  });
}

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
    const auto qs = flat_float(q).mul(scale), kf = flat_float(k), vf = flat_float(v);  // q pre-scaled
    const auto opts = qs.options();

    auto out = torch::empty({B * H, T, D}, opts);
    auto lse = torch::empty({B * H, T}, opts);
    const int64_t chunks = (T + chunk_q - 1) / chunk_q;
    for_each_item(qs, B * H * chunks, [&](int64_t item) {
      const int64_t bh = item / chunks, i0 = (item % chunks) * chunk_q, i1 = std::min(i0 + chunk_q, T);
      const int64_t rows = i1 - i0;
      const auto qc = qs[bh].slice(0, i0, i1), kh = kf[bh], vh = vf[bh];
      // running row max (the lowest finite float until a key is seen: exp stays NaN-free), row sum
      auto row_max = torch::full({rows, 1}, std::numeric_limits<float>::lowest(), opts);
      auto row_sum = torch::zeros({rows, 1}, opts);
      auto acc = torch::zeros({rows, D}, opts);
      const int64_t key_end = mask.key_end(i1, S);
      for (int64_t j0 = 0; j0 < key_end; j0 += chunk_k) {
        const int64_t j1 = std::min(j0 + chunk_k, key_end);
        auto p = torch::mm(qc, kh.slice(0, j0, j1).t());  // scores [cq, ck]
        mask.apply(p, bh / H, i0, i1, j0, j1);
        auto new_max = torch::maximum(row_max, std::get<0>(p.max(-1, /*keepdim=*/true)));
        auto rescale = (row_max - new_max).exp_();
        p.sub_(new_max).exp_();
        row_sum.mul_(rescale).add_(p.sum(-1, /*keepdim=*/true));
        acc.mul_(rescale).addmm_(p, vh.slice(0, j0, j1));
        row_max = std::move(new_max);
      }
      // a row that saw no key: output 0 and LSE +inf, so that backward's P = exp(S - LSE) is 0
      auto none = row_sum.eq(0);
      out[bh].slice(0, i0, i1).copy_(acc.div_(row_sum.masked_fill(none, 1)));
      lse[bh].slice(0, i0, i1).copy_(row_max.add_(row_sum.log()).masked_fill_(none, kInf).squeeze(-1));
    });
    auto result = out.view({B, H, T, D}).to(q.scalar_type());
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
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const Masking mask = masking(causal, T, S, saved[5]);
    const auto qs = flat_float(q).mul(scale), kf = flat_float(k), vf = flat_float(v);
    const auto dout = flat_float(grad_outputs.at(0));
    const auto lse = saved[4].unsqueeze(-1);                                        // [BH, T, 1]
    const auto delta = (dout * flat_float(saved[3])).sum(-1, true);                 // D_i = rowsum(dO * O)

    auto dq = torch::zeros_like(qs), dk = torch::zeros_like(kf), dv = torch::zeros_like(vf);
    // One item per batch x head: it owns its rows of dq, dk and dv.
    for_each_item(qs, B * H, [&](int64_t bh) {
      const auto qh = qs[bh], kh = kf[bh], vh = vf[bh], doh = dout[bh], lseh = lse[bh], deltah = delta[bh];
      auto dqh = dq[bh], dkh = dk[bh], dvh = dv[bh];
      for (int64_t i0 = 0; i0 < T; i0 += chunk_q) {
        const int64_t i1 = std::min(i0 + chunk_q, T);
        const auto qc = qh.slice(0, i0, i1), doc = doh.slice(0, i0, i1);
        const auto lse_c = lseh.slice(0, i0, i1), delta_c = deltah.slice(0, i0, i1);
        auto dqc = dqh.slice(0, i0, i1);
        const int64_t key_end = mask.key_end(i1, S);
        for (int64_t j0 = 0; j0 < key_end; j0 += chunk_k) {
          const int64_t j1 = std::min(j0 + chunk_k, key_end);
          const auto kb = kh.slice(0, j0, j1), vb = vh.slice(0, j0, j1);
          auto p = torch::mm(qc, kb.t());
          mask.apply(p, bh / H, i0, i1, j0, j1);
          p.sub_(lse_c).exp_();                                            // P, 0 where masked
          dvh.slice(0, j0, j1).addmm_(p.t(), doc);
          auto ds = torch::mm(doc, vb.t()).sub_(delta_c).mul_(p);          // P * (dP - D_i)
          dqc.addmm_(ds, kb, /*beta=*/1, /*alpha=*/scale);
          dkh.slice(0, j0, j1).addmm_(ds.t(), qc);                         // qc carries the scale
        }
      }
    });
    auto shape = [&](const at::Tensor& g, const at::Tensor& like) {
      return g.view(like.sizes()).to(like.scalar_type());
    };
    return {shape(dq, q), shape(dk, k), shape(dv, v), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
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
