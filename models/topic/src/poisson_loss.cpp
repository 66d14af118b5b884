#include "poisson_loss.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "nonzeros.h"
#include "topic_kernels.h"
#include "tt/helper.h"
#include "tt/error.h"

namespace tt::topic {
namespace {

constexpr float kFloor = 1e-10f;

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class PoissonNmfLoss : public torch::autograd::Function<PoissonNmfLoss> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& L_raw, const torch::Tensor& F_raw,
                               const torch::Tensor& index, const torch::Tensor& rows, const torch::Tensor& cols,
                               const torch::Tensor& vals, bool sparse_grad) {
    torch::NoGradGuard no_grad;
    TT_CHECK(L_raw.scalar_type() == torch::kFloat && F_raw.scalar_type() == torch::kFloat && L_raw.is_contiguous() &&
                 F_raw.is_contiguous() && L_raw.device().is_cpu(),
             "topic loss: the fused path needs contiguous float32 CPU parameters (set model.fused: false otherwise)");
    const auto idx = index.to(torch::kLong).contiguous();
    const int64_t B = idx.numel(), k = L_raw.size(1), m = F_raw.size(1), nnz = vals.numel();
    auto P = torch::empty({B, k}, L_raw.options());
    auto Q = torch::empty({k, m}, F_raw.options());
    auto xhat = torch::empty({nnz}, vals.options());
    auto w = torch::empty({nnz}, vals.options().dtype(torch::kDouble));
    std::vector<double> qsum(static_cast<size_t>(k));
    const double loss = loss_forward(L_raw.data_ptr<float>(), F_raw.data_ptr<float>(), idx.data_ptr<int64_t>(), B, k,
                                     m, rows.data_ptr<int64_t>(), cols.data_ptr<int64_t>(), vals.data_ptr<float>(),
                                     nnz, P.data_ptr<float>(), Q.data_ptr<float>(), qsum.data(),
                                     xhat.data_ptr<float>(), w.data_ptr<double>());
    ctx->save_for_backward({P, Q, idx, rows, cols, w});
    ctx->saved_data["n"] = L_raw.size(0);
    ctx->saved_data["sparse"] = sparse_grad;
    return torch::tensor(loss, L_raw.options());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto &P = saved[0], &Q = saved[1], &index = saved[2], &rows = saved[3], &cols = saved[4], &w = saved[5];
    const int64_t n = ctx->saved_data["n"].toInt();
    const bool sparse = ctx->saved_data["sparse"].toBool();
    const double go = grad_out[0].item<double>();
    const int64_t B = P.size(0), k = P.size(1), m = Q.size(1), nnz = w.numel();
    std::vector<double> gP(static_cast<size_t>(k * B), 0.0);  // topic-major: k x B
    // empty, each row zeroed by its thread: an n-element zeros() would wake an OpenMP team beside
    // the helper thread (tt/helper.h), which costs more than the fill
    auto gF = torch::empty({k, m}, P.options());
    const float* p = P.data_ptr<float>();
    const float* q = Q.data_ptr<float>();
    float* gf = gF.data_ptr<float>();
    // d loss / d xhat = -x / xhat where xhat > 1e-10 (the weights w); the mass term's gradient
    // is exactly zero (see the header). Topic by topic: scatter into row t of F's gradient and
    // topic t of P's (kept in double: the softmax backward below subtracts nearly equal
    // numbers), then row t's softmax backward. Topics write disjoint rows, so they run in
    // parallel with nothing to combine.
    tt::parallel_for(0, k, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        std::fill(gf + t * m, gf + (t + 1) * m, 0.0f);
        kernels::topic_grads(go, p, q, rows.data_ptr<int64_t>(), cols.data_ptr<int64_t>(), w.data_ptr<double>(), nnz,
                             t, k, m, gf + t * m, gP.data() + t * B);
        kernels::softmax_backward_rows(gf, q, t, t + 1, m);
      }
    });
    auto gL_rows = torch::empty({B, k}, P.options());
    rows_backward(p, gP.data(), B, k, gL_rows.data_ptr<float>());
    return {l_gradient(index, gL_rows, n, sparse), gF, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

  // L_raw's gradient from its B rows: a sparse COO tensor of the distinct rows ascending
  // (coalesced), or the dense n x k tensor.
  static torch::Tensor l_gradient(const torch::Tensor& index, const torch::Tensor& g_rows, int64_t n, bool sparse) {
    const int64_t k = g_rows.size(1);
    if (!sparse) return torch::zeros({n, k}, g_rows.options()).index_add_(0, index, g_rows);
    RowGradients rg = row_gradients(index.data_ptr<int64_t>(), g_rows.data_ptr<float>(), index.numel(), k);
    const int64_t count = static_cast<int64_t>(rg.rows.size());
    auto ind = torch::from_blob(rg.rows.data(), {1, count}, torch::kLong).clone();
    auto val = torch::from_blob(rg.values.data(), {count, k}, torch::kFloat).clone();
    auto g = at::_sparse_coo_tensor_unsafe(ind, val, {n, k});
    g._coalesced_(true);
    return g;
  }
};

}  // namespace

double loss_forward(const float* L_raw, const float* F_raw, const int64_t* idx, int64_t B, int64_t k, int64_t m,
                    const int64_t* r, const int64_t* c, const float* v, int64_t nnz, float* P, float* Q, double* qsum,
                    float* xh, double* pw) {
  kernels::softmax_gather(L_raw, idx, B, k, P);
  // F's softmax topic by topic, each topic's sum kept for the reconstruction's mass
  tt::parallel_for(0, k, 1, [&](int64_t t0, int64_t t1) {
    kernels::softmax_rows(F_raw + t0 * m, Q + t0 * m, t1 - t0, m);
    for (int64_t t = t0; t < t1; ++t) qsum[t] = kernels::row_sum(Q + t * m, m);
  });
  // Each non-zero: xhat = P[r] . Q[:, c]; the loss term x log(max(xhat, 1e-10)) summed in
  // double per chunk, the chunks' sums added in chunk order (the same whoever ran them);
  // and the weight -x / xhat the backward scatters.
  constexpr int64_t kGrain = 1024;
  std::vector<double> logs(static_cast<size_t>(tt::parallel_chunks(0, nnz, kGrain)), 0.0);
  const int64_t chunk_size = nnz > 0 ? tt::parallel_chunk(0, nnz, kGrain, 0).second : 1;
  tt::parallel_for(0, nnz, kGrain, [&](int64_t b, int64_t e) {
    kernels::xhat(P, Q, r, c, xh, b, e, k, m);
    kernels::loss_weights(v, xh, pw, b, e, kFloor);
    logs[static_cast<size_t>(b / chunk_size)] = kernels::weighted_log(v, xh, b, e, kFloor);
  });
  double log_term = 0;
  for (double l : logs) log_term += l;
  // sum_ij Xhat_ij = sum_t (sum_i P[i][t]) (sum_j Q[t][j]): rows of P and Q sum to 1.
  double mass = 0;
  for (int64_t t = 0; t < k; ++t) {
    double psum = 0;
    for (int64_t i = 0; i < B; ++i) psum += P[i * k + t];
    mass += psum * qsum[t];
  }
  return mass - log_term;
}

// softmax backward of the B rows: dz = s * (ds - sum(ds * s))
void rows_backward(const float* p, const double* gP, int64_t B, int64_t k, float* gl) {
  for (int64_t i = 0; i < B; ++i) {
    double dot = 0;
    for (int64_t t = 0; t < k; ++t) dot += gP[t * B + i] * p[i * k + t];
    for (int64_t t = 0; t < k; ++t) gl[i * k + t] = static_cast<float>(p[i * k + t] * (gP[t * B + i] - dot));
  }
}

RowGradients row_gradients(const int64_t* id, const float* gL, int64_t B, int64_t k) {
  std::vector<int64_t> order(static_cast<size_t>(B));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return id[a] < id[b]; });
  RowGradients out;
  out.rows.reserve(static_cast<size_t>(B));
  out.values.reserve(static_cast<size_t>(B * k));
  for (int64_t i : order) {
    const float* src = gL + i * k;
    if (!out.rows.empty() && out.rows.back() == id[i]) {
      float* dst = out.values.data() + (out.rows.size() - 1) * static_cast<size_t>(k);
      for (int64_t t = 0; t < k; ++t) dst[t] += src[t];
      continue;
    }
    out.rows.push_back(id[i]);
    out.values.insert(out.values.end(), src, src + k);
  }
  return out;
}

BatchCounts nonzeros_of(const torch::Tensor& x) {
  const auto xc = x.to(torch::kFloat).contiguous();
  const int64_t B = xc.size(0), m = xc.size(1);
  const float* px = xc.data_ptr<float>();
  int64_t nnz = 0;
  for (int64_t i = 0; i < B; ++i) nnz += count_nonzeros(px + i * m, m);
  BatchCounts b;
  b.rows = torch::empty({nnz + 8}, torch::kLong);  // room for the gather's overrun, then trimmed
  b.cols = torch::empty({nnz + 8}, torch::kLong);
  b.vals = torch::empty({nnz + 8}, torch::kFloat);
  int64_t* r = b.rows.data_ptr<int64_t>();
  int64_t* c = b.cols.data_ptr<int64_t>();
  float* v = b.vals.data_ptr<float>();
  std::vector<const float*> src(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) src[static_cast<size_t>(i)] = px + i * m;
  const int64_t gathered = gather_nonzeros(src.data(), B, m, r, c, v);
  TT_CHECK(gathered == nnz, "topic loss: counted ", nnz, " non-zeros but gathered ", gathered);
  b.rows = b.rows.narrow(0, 0, nnz);
  b.cols = b.cols.narrow(0, 0, nnz);
  b.vals = b.vals.narrow(0, 0, nnz);
  return b;
}

torch::Tensor poisson_nmf_loss(const torch::Tensor& L_raw, const torch::Tensor& F_raw, const torch::Tensor& index,
                               const BatchCounts& counts, bool sparse_grad) {
  return PoissonNmfLoss::apply(L_raw, F_raw, index, counts.rows, counts.cols, counts.vals,
                               sparse_grad);
}

BatchCounts nonzeros_on_device(const torch::Tensor& x) {
  const auto nz = x.nonzero();  // [nnz, 2], row-major order
  BatchCounts b;
  b.rows = nz.select(1, 0).contiguous();
  b.cols = nz.select(1, 1).contiguous();
  b.vals = x.index({b.rows, b.cols}).to(torch::kFloat);
  return b;
}

torch::Tensor poisson_nmf_loss_nonzeros(const torch::Tensor& L_raw, const torch::Tensor& F_raw,
                                        const torch::Tensor& index, const BatchCounts& counts) {
  // In double: L's gradient comes out of P's softmax backward, which subtracts nearly equal
  // numbers, so float rounding in P or Q is amplified there (the kernels sum in double too). P is
  // B x k and Q k x m, small beside a B x m reconstruction; the nnz x k products follow them.
  const auto P = torch::softmax(L_raw.index_select(0, index).to(torch::kDouble), 1);  // B x k
  const auto Q = torch::softmax(F_raw.to(torch::kDouble), 1);                        // k x m
  // xhat at each non-zero: P[r] . Q[:, c]
  const auto xhat = (P.index_select(0, counts.rows) * Q.index_select(1, counts.cols).t()).sum(1);
  // sum_ij Xhat_ij = sum_t (sum_i P[i][t]) (sum_j Q[t][j]), as the kernels compute it; rows of
  // P and Q sum to 1, so its gradient is exactly zero and it is left out of the graph (through
  // autograd it would only add the softmax backward's rounding)
  const auto mass = (P.detach().sum(0) * Q.detach().sum(1)).sum();
  return (mass - (counts.vals * torch::log(torch::clamp_min(xhat, kFloor))).sum()).to(L_raw.scalar_type());
}

torch::Tensor poisson_nmf_loss_reference(const torch::Tensor& L_raw, const torch::Tensor& F_raw,
                                         const torch::Tensor& index, const torch::Tensor& x) {
  auto xhat = torch::softmax(L_raw.index_select(0, index), 1).mm(torch::softmax(F_raw, 1));
  return (xhat - x * torch::log(torch::clamp_min(xhat, 1e-10))).sum();
}

}  // namespace tt::topic
