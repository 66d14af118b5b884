#include "poisson_loss.h"

#include <ATen/Parallel.h>

#include <cmath>

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
    const auto P = torch::softmax(L_raw.index_select(0, index), 1).contiguous();  // B x k
    const auto Q = torch::softmax(F_raw, 1);                                      // k x m
    const auto QT = Q.t().contiguous();                                           // m x k
    const int64_t k = P.size(1), nnz = vals.numel();
    auto xhat = torch::empty({nnz}, vals.options());
    const float* p = P.data_ptr<float>();
    const float* qt = QT.data_ptr<float>();
    const int64_t* r = rows.data_ptr<int64_t>();
    const int64_t* c = cols.data_ptr<int64_t>();
    const float* v = vals.data_ptr<float>();
    float* xh = xhat.data_ptr<float>();
    double log_term = 0;
    // Each non-zero: xhat = P[r] . Q[:, c];  accumulate x log(max(xhat, 1e-10)) in double.
    log_term = at::parallel_reduce(
        0, nnz, 4096, 0.0,
        [&](int64_t b, int64_t e, double acc) {
          for (int64_t i = b; i < e; ++i) {
            const float* pr = p + r[i] * k;
            const float* qc = qt + c[i] * k;
            float s = 0;
            for (int64_t t = 0; t < k; ++t) s += pr[t] * qc[t];
            xh[i] = s;
            acc += static_cast<double>(v[i]) * std::log(static_cast<double>(std::max(s, kFloor)));
          }
          return acc;
        },
        std::plus<double>());
    // sum_ij Xhat_ij: each row of P sums to 1 against Q's rows that sum to 1.
    const double mass = P.matmul(Q.sum(1)).sum().item<double>();
    ctx->save_for_backward({P, QT, index, rows, cols, vals, xhat});
    ctx->saved_data["n"] = L_raw.size(0);
    ctx->saved_data["sparse"] = sparse_grad;
    return torch::tensor(mass - log_term, L_raw.options());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto &P = saved[0], &QT = saved[1], &index = saved[2], &rows = saved[3], &cols = saved[4],
               &vals = saved[5], &xhat = saved[6];
    const int64_t n = ctx->saved_data["n"].toInt();
    const bool sparse = ctx->saved_data["sparse"].toBool();
    const float go = grad_out[0].item<float>();
    const int64_t B = P.size(0), k = P.size(1), m = QT.size(0), nnz = vals.numel();
    // d loss / d xhat = -x / xhat where xhat > 1e-10 (the clamp passes no gradient below it);
    // the mass term's gradient is exactly zero (see the header). The softmax backward below
    // subtracts nearly equal numbers, so the sums are kept in double.
    auto dopt = P.options().dtype(torch::kDouble);
    auto gP = torch::zeros({B, k}, dopt);
    auto gQT = torch::zeros({m, k}, P.options());  // ~B non-zeros per column: float is plenty
    const float* p = P.data_ptr<float>();
    const float* qt = QT.data_ptr<float>();
    const int64_t* r = rows.data_ptr<int64_t>();
    const int64_t* c = cols.data_ptr<int64_t>();
    const float* v = vals.data_ptr<float>();
    const float* xh = xhat.data_ptr<float>();
    double* gp = gP.data_ptr<double>();
    float* gqt = gQT.data_ptr<float>();
    for (int64_t i = 0; i < nnz; ++i) {
      if (xh[i] < kFloor) continue;
      const double g = -static_cast<double>(go) * v[i] / xh[i];
      const float* pr = p + r[i] * k;
      const float* qc = qt + c[i] * k;
      double* gpr = gp + r[i] * k;
      float* gqc = gqt + c[i] * k;
      const float gf = static_cast<float>(g);
      for (int64_t t = 0; t < k; ++t) {
        gpr[t] += g * qc[t];
        gqc[t] += gf * pr[t];
      }
    }
    // softmax backward: dz = s * (ds - sum(ds * s))
    auto Pd = P.to(torch::kDouble);
    auto gL_rows = (Pd * (gP - (gP * Pd).sum(1, true))).to(torch::kFloat);
    // F's softmax backward in two passes over the m x k layout: per-topic sums, then
    // gF[t][j] = Q[t][j] (gQ[t][j] - sum_j' gQ[t][j'] Q[t][j']), in double.
    std::vector<double> dot(static_cast<size_t>(k), 0.0);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t t = 0; t < k; ++t) dot[t] += static_cast<double>(gqt[j * k + t]) * qt[j * k + t];
    auto gF = torch::empty({k, m}, P.options());
    float* gf = gF.data_ptr<float>();
    for (int64_t j = 0; j < m; ++j)
      for (int64_t t = 0; t < k; ++t)
        gf[t * m + j] = static_cast<float>(qt[j * k + t] * (static_cast<double>(gqt[j * k + t]) - dot[t]));
    torch::Tensor gL;
    if (sparse) {
      gL = torch::sparse_coo_tensor(index.unsqueeze(0), gL_rows, {n, k});
    } else {
      gL = torch::zeros({n, k}, P.options()).index_add_(0, index, gL_rows);
    }
    return {gL, gF, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

BatchCounts nonzeros_of(const torch::Tensor& x) {
  // One scan (torch's nonzero + gather took ~10x longer on 16 x 5000 batches).
  const auto xc = x.to(torch::kFloat).contiguous();
  const int64_t B = xc.size(0), m = xc.size(1);
  const float* px = xc.data_ptr<float>();
  int64_t nnz = 0;
  for (int64_t i = 0; i < B * m; ++i) nnz += px[i] != 0.0f;
  BatchCounts b;
  b.rows = torch::empty({nnz}, torch::kLong);
  b.cols = torch::empty({nnz}, torch::kLong);
  b.vals = torch::empty({nnz}, torch::kFloat);
  int64_t* r = b.rows.data_ptr<int64_t>();
  int64_t* c = b.cols.data_ptr<int64_t>();
  float* v = b.vals.data_ptr<float>();
  int64_t q = 0;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < m; ++j) {
      const float val = px[i * m + j];
      if (val != 0.0f) r[q] = i, c[q] = j, v[q++] = val;
    }
  return b;
}

torch::Tensor poisson_nmf_loss(const torch::Tensor& L_raw, const torch::Tensor& F_raw, const torch::Tensor& index,
                               const BatchCounts& counts, bool sparse_grad) {
  return PoissonNmfLoss::apply(L_raw, F_raw, index, counts.rows, counts.cols, counts.vals,
                               sparse_grad);
}

torch::Tensor poisson_nmf_loss_reference(const torch::Tensor& L_raw, const torch::Tensor& F_raw,
                                         const torch::Tensor& index, const torch::Tensor& x) {
  auto xhat = torch::softmax(L_raw.index_select(0, index), 1).mm(torch::softmax(F_raw, 1));
  return (xhat - x * torch::log(torch::clamp_min(xhat, 1e-10))).sum();
}

}  // namespace tt::topic
