#include "tt/fused_adamw.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tt/compat.h"
#include "tt/error.h"

namespace tt {
namespace {

struct Coeffs {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, neg_step_size;
};

// One element at a time in the order torch's kernels round: p*decay; m*b1 + (1-b1)*g;
// v*b2 + (1-b2)*g*g; p + (-step) * m / (sqrt(v)/sqrt(bc2) + eps). With kZeroGrad the
// gradient is a literal zero (a row absent from a sparse gradient under dense semantics):
// without -ffast-math x*0 and x+0 are still computed, so every value rounds exactly as a
// materialized zero gradient would.
template <bool kZeroGrad>
inline __attribute__((always_inline)) void adamw_loop(float* __restrict p, const float* __restrict g,
                                                      float* __restrict m, float* __restrict v, int64_t n,
                                                      const Coeffs c) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = kZeroGrad ? 0.0f : g[i];
    const float pi = p[i] * c.decay;
    const float mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    const float vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + c.neg_step_size * mi / denom;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_dense(float* p, const float* g, float* m,
                                                                              float* v, int64_t n, const Coeffs c) {
  adamw_loop<false>(p, g, m, v, n, c);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_zero_grad(float* p, float* m, float* v,
                                                                                  int64_t n, const Coeffs c) {
  adamw_loop<true>(p, nullptr, m, v, n, c);
}

Coeffs coeffs_for(const torch::optim::AdamWOptions& o, int64_t step) {
  const double b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas());
  const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(step));
  Coeffs c;
  c.decay = static_cast<float>(1 - o.lr() * o.weight_decay());
  c.beta1 = static_cast<float>(b1);
  c.one_minus_beta1 = static_cast<float>(1 - b1);
  c.beta2 = static_cast<float>(b2);
  c.one_minus_beta2 = static_cast<float>(1 - b2);
  // torch divides by sqrt(bc2); multiplying by its float reciprocal differs by an ulp at most
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.eps = static_cast<float>(o.eps());
  c.neg_step_size = static_cast<float>(-(o.lr() / bc1));
  return c;
}

bool fusable(const torch::Tensor& p, const torch::optim::AdamWOptions& o) {
  return p.device().is_cpu() && p.scalar_type() == torch::kFloat && p.is_contiguous() && !o.amsgrad();
}

}  // namespace

torch::optim::AdamWParamState& FusedAdamW::state_of(const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  const Key key = compat::optimizer_state_key<Key>(p.unsafeGetTensorImpl());
  auto it = state_.find(key);
  if (it == state_.end()) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(0);
    s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = state_.emplace(key, std::move(s)).first;
  }
  return static_cast<torch::optim::AdamWParamState&>(*it->second);
}

void FusedAdamW::dense_rows(const torch::Tensor& p) {
  TT_CHECK(p.dim() == 2, "adamw: dense_rows needs a 2-D parameter");
  dense_rows_.insert(p.unsafeGetTensorImpl());
}

bool FusedAdamW::has_dense_rows(const torch::Tensor& p) const {
  return dense_rows_.count(p.unsafeGetTensorImpl()) != 0;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      if (!fusable(p, o)) {
        TT_CHECK(!grad.is_sparse(), "adamw: sparse gradients need a contiguous float32 CPU parameter");
        // LibTorch AdamW's arithmetic, op by op, on the same state.
        auto& st = state_of(p);
        st.step(st.step() + 1);
        const double b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas());
        const double bc1 = 1 - std::pow(b1, st.step()), bc2 = 1 - std::pow(b2, st.step());
        if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
        st.exp_avg().mul_(b1).add_(grad, 1 - b1);
        st.exp_avg_sq().mul_(b2).addcmul_(grad, grad, 1 - b2);
        torch::Tensor denom;
        if (o.amsgrad()) {
          if (!st.max_exp_avg_sq().defined()) st.max_exp_avg_sq(torch::zeros_like(p));
          torch::max_out(st.max_exp_avg_sq(), st.exp_avg_sq(), st.max_exp_avg_sq());
          denom = (st.max_exp_avg_sq().sqrt() / std::sqrt(bc2)).add_(o.eps());
        } else {
          denom = (st.exp_avg_sq().sqrt() / std::sqrt(bc2)).add_(o.eps());
        }
        p.addcdiv_(st.exp_avg(), denom, -o.lr() / bc1);
        continue;
      }
      auto& st = state_of(p);
      st.step(st.step() + 1);
      const Coeffs c = coeffs_for(o, st.step());
      float* pp = p.data_ptr<float>();
      float* mm = st.exp_avg().data_ptr<float>();
      float* vv = st.exp_avg_sq().data_ptr<float>();
      if (grad.is_sparse()) {
        TT_CHECK(p.dim() == 2, "adamw: sparse gradients are supported for 2-D parameters (rows)");
        auto g = grad.is_coalesced() ? grad : grad.coalesce();
        auto rows = g._indices()[0].contiguous();
        auto vals = g._values().contiguous().to(torch::kFloat);
        const int64_t width = p.size(1), nrows = rows.numel();
        const int64_t* r = rows.data_ptr<int64_t>();
        const float* gv = vals.data_ptr<float>();
        if (has_dense_rows(p)) {
          // Dense semantics: walk all rows; rows of the gradient (ascending) get theirs.
          at::parallel_for(0, p.size(0), std::max<int64_t>(1, (int64_t{1} << 15) / width), [&](int64_t b, int64_t e) {
            int64_t q = std::lower_bound(r, r + nrows, b) - r;
            for (int64_t row = b; row < e;) {
              const int64_t next = (q < nrows && r[q] < e) ? r[q] : e;
              adamw_zero_grad(pp + row * width, mm + row * width, vv + row * width, (next - row) * width, c);
              if (next == e) break;
              adamw_dense(pp + next * width, gv + q * width, mm + next * width, vv + next * width, width, c);
              row = next + 1;
              ++q;
            }
          });
          continue;
        }
        // Lazy: only the rows named by the sparse gradient's indices.
        at::parallel_for(0, nrows, 64, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t off = r[i] * width;
            adamw_dense(pp + off, gv + i * width, mm + off, vv + off, width, c);
          }
        });
        continue;
      }
      auto g = grad.contiguous();
      const float* gg = g.data_ptr<float>();
      at::parallel_for(0, p.numel(), 1 << 15, [&](int64_t b, int64_t e) {
        adamw_dense(pp + b, gg + b, mm + b, vv + b, e - b, c);
      });
    }
  }
  return loss;
}

}  // namespace tt
