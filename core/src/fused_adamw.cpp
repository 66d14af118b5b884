#include "tt/fused_adamw.h"
#include "tt/helper.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include <type_traits>

#include "tt/compat.h"
#include "tt/error.h"

namespace tt {
namespace {

using Coeffs = FusedAdamW::Coefficients;

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

// The closed form of s zero-gradient steps from a row's last update (see the header): the
// scalars of steps from+1 .. from+s, accumulated in double from the float coefficients the
// dense loop would have used.
struct Catchup {
  int64_t steps = 0;
  double B1 = 1, B2 = 1, D = 1, K0 = 0, K1 = 0, K2 = 0, amin = std::numeric_limits<double>::infinity();
  void push(const Coeffs& c) {
    ++steps;
    B1 *= c.beta1;
    B2 *= c.beta2;
    const double a = std::sqrt(B2) * c.inv_sqrt_bc2;  // sqrt(v_k) = sqrt(v_0) sqrt(b2^k), over sqrt(bc2)
    const double coef = c.neg_step_size * B1 / a;     // -lr/bc1 * b1^k / a_k, times m_0 / sqrt(v_0)
    D *= c.decay;
    K0 = K0 * c.decay + coef;
    K1 = K1 * c.decay + coef / a;
    K2 = K2 * c.decay + coef / (a * a);
    amin = std::min(amin, a);
  }
};

// The closed form for `count` elements at p, m, v (in float, vectorized); elements whose eps is
// not small against sqrt(v) are left as they were and flagged in `slow` (returns their count).
__attribute__((target_clones("avx512f", "avx2", "default"))) int64_t closed_form(
    float* __restrict p, float* __restrict m, float* __restrict v, int64_t count, const float D, const float K0,
    const float K1, const float K2, const float B1, const float B2, const float eps, const float w_min,
    uint8_t* __restrict slow) {
  int64_t n_slow = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float u = m[i], vv = v[i];
    const float w = std::sqrt(vv);
    const bool moving = u != 0.0f;
    const bool fallback = moving && w < w_min;
    const float r = moving && !fallback ? u / w : 0.0f;  // m_0 / sqrt(v_0)
    const float e = moving && !fallback ? eps / w : 0.0f;
    const float closed = p[i] * D + r * (K0 - e * K1 + e * e * K2);
    p[i] = fallback ? p[i] : closed;
    m[i] = fallback ? u : u * B1;
    v[i] = fallback ? vv : vv * B2;
    slow[i] = fallback;
    n_slow += fallback;
  }
  return n_slow;
}

// `count` elements at p, m, v: k.steps zero-gradient steps with coefficients cs[0..steps).
void catch_up_block(float* p, float* m, float* v, int64_t count, const Catchup& k, const Coeffs* cs) {
  if (k.steps == 0) return;
  const float eps = cs[0].eps;
  // the series in e = eps / sqrt(v) holds to float precision while e <= a / 256
  const float w_min = static_cast<float>(256 * static_cast<double>(eps) / k.amin);
  constexpr int64_t kChunk = 1024;
  uint8_t slow[kChunk];
  for (int64_t b = 0; b < count; b += kChunk) {
    const int64_t n = std::min(kChunk, count - b);
    if (closed_form(p + b, m + b, v + b, n, static_cast<float>(k.D), static_cast<float>(k.K0),
                    static_cast<float>(k.K1), static_cast<float>(k.K2), static_cast<float>(k.B1),
                    static_cast<float>(k.B2), eps, w_min, slow) == 0)
      continue;
    for (int64_t i = 0; i < n; ++i)  // step by step, as the dense loop
      if (slow[i])
        for (int64_t j = 0; j < k.steps; ++j) adamw_loop<true>(p + b + i, nullptr, m + b + i, v + b + i, 1, cs[j]);
  }
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

// A deferred parameter: every row is current at least to step `base`; a row touched since is
// current to last[row] (> base). hist holds the coefficients of steps base+1 .. base+hist.size(),
// from_base their closed form from `base`.
struct FusedAdamW::Deferred {
  torch::Tensor param;
  int64_t base = 0;
  std::vector<int64_t> last;
  std::vector<Coeffs> hist;
  Catchup from_base;
  int64_t current() const { return base + static_cast<int64_t>(hist.size()); }
  void reset(int64_t step) {
    base = step;
    std::fill(last.begin(), last.end(), int64_t{0});
    hist.clear();
    from_base = Catchup();
  }
};

void FusedAdamW::defer_rows(const torch::Tensor& p) {
  dense_rows(p);
  auto d = std::make_shared<Deferred>();
  d->param = p;
  d->last.assign(static_cast<size_t>(p.size(0)), 0);
  deferred_[p.unsafeGetTensorImpl()] = std::move(d);
}

FusedAdamW::Deferred* FusedAdamW::deferred_of(const torch::Tensor& p) {
  auto it = deferred_.find(p.unsafeGetTensorImpl());
  if (it == deferred_.end()) return nullptr;
  Deferred& d = *it->second;
  auto& st = state_of(p);
  // A loaded or fresh state: everything it holds is current (flush() precedes every save).
  if (d.current() != st.step()) d.reset(st.step());
  return &d;
}

// Catch one row up to the deferred parameter's current step.
void FusedAdamW::catch_up_row(Deferred& d, int64_t row, float* p, float* m, float* v, int64_t width) {
  const int64_t from = std::max(d.base, d.last[row]), to = d.current();
  if (from >= to) return;
  const int64_t off = row * width;
  if (from == d.base) {
    catch_up_block(p + off, m + off, v + off, width, d.from_base, d.hist.data());
  } else {
    Catchup k;
    for (int64_t j = from - d.base; j < to - d.base; ++j) k.push(d.hist[j]);
    catch_up_block(p + off, m + off, v + off, width, k, d.hist.data() + (from - d.base));
  }
  d.last[row] = to;
}

void FusedAdamW::catch_up_rows(const torch::Tensor& p, const torch::Tensor& rows) {
  torch::NoGradGuard no_grad;
  // Before the parameter's first step there is nothing to catch up; looking its state up would
  // allocate it here, in the model's forward, where the meter counts it as activations.
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  if (state_.find(compat::optimizer_state_key<Key>(p.unsafeGetTensorImpl())) == state_.end()) return;
  Deferred* d = deferred_of(p);
  if (!d || d->hist.empty()) return;
  auto& st = state_of(p);
  const auto r = rows.to(torch::kLong).contiguous();
  const int64_t* id = r.data_ptr<int64_t>();
  const int64_t width = p.size(1), n = p.size(0);
  float* pp = p.data_ptr<float>();
  float* mm = st.exp_avg().data_ptr<float>();
  float* vv = st.exp_avg_sq().data_ptr<float>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    TT_CHECK(id[i] >= 0 && id[i] < n, "adamw: row ", id[i], " out of range for a parameter of ", n, " rows");
    catch_up_row(*d, id[i], pp, mm, vv, width);
  }
}

void FusedAdamW::flush_one(Deferred& d) {
  if (d.hist.empty()) return;
  auto& st = state_of(d.param);
  const int64_t width = d.param.size(1), n = d.param.size(0);
  float* pp = d.param.data_ptr<float>();
  float* mm = st.exp_avg().data_ptr<float>();
  float* vv = st.exp_avg_sq().data_ptr<float>();
  tt::parallel_for(0, n, std::max<int64_t>(1, 4096 / width), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e;) {
      if (d.last[row] > d.base) {  // touched since the last full catch-up: its own window
        catch_up_row(d, row, pp, mm, vv, width);
        ++row;
        continue;
      }
      int64_t end = row + 1;  // a run of rows current at `base` shares from_base
      while (end < e && d.last[end] <= d.base) ++end;
      catch_up_block(pp + row * width, mm + row * width, vv + row * width, (end - row) * width, d.from_base,
                     d.hist.data());
      row = end;
    }
  });
  d.reset(d.current());
}

void FusedAdamW::flush() {
  torch::NoGradGuard no_grad;
  for (auto& [key, d] : deferred_) {
    if (deferred_of(d->param)) flush_one(*d);
  }
}

void FusedAdamW::save(torch::serialize::OutputArchive& archive) const {
  const_cast<FusedAdamW*>(this)->flush();  // the saved state is the dense one
  torch::optim::AdamW::save(archive);
}

void FusedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::optim::AdamW::load(archive);
  for (auto& [key, d] : deferred_) d->reset(-1);  // re-based on the loaded step at next use
}

// A step of 2-D p whose gradient is zero outside `rows` (ascending, distinct), their gradients g:
// deferred (d, from deferred_of before the step count's increment), dense semantics
// (dense_rows) or lazy (only those rows).
void FusedAdamW::rows_step(const torch::Tensor& p, Deferred* d, const int64_t* r, const float* gv, int64_t nrows,
                           const Coeffs& c) {
  auto& st = state_of(p);
  float* pp = p.data_ptr<float>();
  float* mm = st.exp_avg().data_ptr<float>();
  float* vv = st.exp_avg_sq().data_ptr<float>();
  const int64_t width = p.size(1);
  if (d) {
    // Deferred dense semantics: the gradient's rows catch up to the previous step and take
    // this one; the other rows' zero-gradient step is recorded (see the header).
    for (int64_t i = 0; i < nrows; ++i) catch_up_row(*d, r[i], pp, mm, vv, width);
    d->hist.push_back(c);
    d->from_base.push(c);
    for (int64_t i = 0; i < nrows; ++i) {
      const int64_t off = r[i] * width;
      adamw_dense(pp + off, gv + i * width, mm + off, vv + off, width, c);
      d->last[r[i]] = d->current();
    }
    if (static_cast<int64_t>(d->hist.size()) >= kDeferWindow) flush_one(*d);
    return;
  }
  if (has_dense_rows(p)) {
    // Dense semantics: walk all rows; rows of the gradient (ascending) get theirs.
    tt::parallel_for(0, p.size(0), std::max<int64_t>(1, (int64_t{1} << 15) / width), [&](int64_t b, int64_t e) {
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
    return;
  }
  // Lazy: only the rows named by the sparse gradient's indices.
  tt::parallel_for(0, nrows, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t off = r[i] * width;
      adamw_dense(pp + off, gv + i * width, mm + off, vv + off, width, c);
    }
  });
}

const torch::optim::AdamWOptions* FusedAdamW::options_of(const torch::Tensor& p) const {
  for (const auto& group : param_groups_)
    for (const auto& q : group.params())
      if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl())
        return &static_cast<const torch::optim::AdamWOptions&>(group.options());
  return nullptr;
}

bool FusedAdamW::fusable(const torch::Tensor& p) const {
  const auto* o = options_of(p);
  return o && tt::fusable(p, *o);
}

void FusedAdamW::DenseStep::apply(int64_t begin, const float* g, int64_t count) const {
  adamw_dense(p_ + begin, g, m_ + begin, v_ + begin, count, c_);
}

FusedAdamW::DenseStep FusedAdamW::begin_dense_step(const torch::Tensor& p) {
  const auto* o = options_of(p);
  TT_CHECK(o && tt::fusable(p, *o), "adamw: begin_dense_step needs a contiguous float32 CPU parameter of this optimizer");
  Deferred* d = deferred_of(p);
  if (d) flush_one(*d);  // every row updated: bring them all up to date first
  auto& st = state_of(p);
  st.step(st.step() + 1);
  DenseStep s;
  s.c_ = coeffs_for(*o, st.step());
  s.p_ = p.data_ptr<float>();
  s.m_ = st.exp_avg().data_ptr<float>();
  s.v_ = st.exp_avg_sq().data_ptr<float>();
  return s;
}

void FusedAdamW::step_rows(const torch::Tensor& p, const int64_t* rows, const float* g, int64_t count) {
  torch::NoGradGuard no_grad;
  const auto* o = options_of(p);
  TT_CHECK(o && tt::fusable(p, *o) && p.dim() == 2 && has_dense_rows(p),
           "adamw: step_rows needs a 2-D contiguous float32 CPU parameter of this optimizer marked with dense_rows or "
           "defer_rows");
  for (int64_t i = 0; i < count; ++i)
    TT_CHECK(rows[i] >= 0 && rows[i] < p.size(0) && (i == 0 || rows[i] > rows[i - 1]),
             "adamw: step_rows needs ascending distinct rows within the parameter's ", p.size(0));
  Deferred* d = deferred_of(p);  // before this step's count (re-based on a loaded state)
  auto& st = state_of(p);
  st.step(st.step() + 1);
  rows_step(p, d, rows, g, count, coeffs_for(*o, st.step()));
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
      if (!tt::fusable(p, o)) {
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
      Deferred* d = deferred_of(p);
      if (d && !grad.is_sparse()) {  // a dense gradient updates every row: bring them all up to date first
        flush_one(*d);
        d = nullptr;
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
        rows_step(p, d, rows.data_ptr<int64_t>(), vals.data_ptr<float>(), rows.numel(), c);
        continue;
      }
      auto g = grad.contiguous();
      const float* gg = g.data_ptr<float>();
      tt::parallel_for(0, p.numel(), 1 << 15, [&](int64_t b, int64_t e) {
        adamw_dense(pp + b, gg + b, mm + b, vv + b, e - b, c);
      });
    }
  }
  return loss;
}

}  // namespace tt
