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
                               const torch::Tensor& vals, int64_t batch_rows, bool sparse_grad) {
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
    (void)batch_rows;
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
    auto gQT = torch::zeros({m, k}, dopt);
    const float* p = P.data_ptr<float>();
    const float* qt = QT.data_ptr<float>();
    const int64_t* r = rows.data_ptr<int64_t>();
    const int64_t* c = cols.data_ptr<int64_t>();
    const float* v = vals.data_ptr<float>();
    const float* xh = xhat.data_ptr<float>();
    double* gp = gP.data_ptr<double>();
    double* gqt = gQT.data_ptr<double>();
    for (int64_t i = 0; i < nnz; ++i) {
      if (xh[i] < kFloor) continue;
      const double g = -static_cast<double>(go) * v[i] / xh[i];
      const float* pr = p + r[i] * k;
      const float* qc = qt + c[i] * k;
      double* gpr = gp + r[i] * k;
      double* gqc = gqt + c[i] * k;
      for (int64_t t = 0; t < k; ++t) {
        gpr[t] += g * qc[t];
        gqc[t] += g * pr[t];
      }
    }
    // softmax backward: dz = s * (ds - sum(ds * s))
    auto Pd = P.to(torch::kDouble);
    auto gL_rows = (Pd * (gP - (gP * Pd).sum(1, true))).to(torch::kFloat);
    auto Qd = QT.t().to(torch::kDouble);
    auto gQ = gQT.t();
    auto gF = (Qd * (gQ - (gQ * Qd).sum(1, true))).to(torch::kFloat).contiguous();
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
  BatchCounts b;
  auto xc = x.contiguous();
  auto nz = xc.nonzero();  // [nnz, 2], row-major order
  b.rows = nz.select(1, 0).contiguous();
  b.cols = nz.select(1, 1).contiguous();
  b.vals = xc.index({b.rows, b.cols}).to(torch::kFloat).contiguous();
  b.batch_rows = x.size(0);
  return b;
}

torch::Tensor poisson_nmf_loss(const torch::Tensor& L_raw, const torch::Tensor& F_raw, const torch::Tensor& index,
                               const BatchCounts& counts, bool sparse_grad) {
  return PoissonNmfLoss::apply(L_raw, F_raw, index, counts.rows, counts.cols, counts.vals, counts.batch_rows,
                               sparse_grad);
}

torch::Tensor poisson_nmf_loss_reference(const torch::Tensor& L_raw, const torch::Tensor& F_raw,
                                         const torch::Tensor& index, const torch::Tensor& x) {
  auto xhat = torch::softmax(L_raw.index_select(0, index), 1).mm(torch::softmax(F_raw, 1));
  return (xhat - x * torch::log(torch::clamp_min(xhat, 1e-10))).sum();
}

}  // namespace tt::topic
