#include "topic_kernels.h"

#include <algorithm>
#include <cmath>

#define TT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace tt::topic::kernels {

TT_CLONES void softmax_rows(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    float* y = out + r * cols;
    float mx = x[0];
    for (int64_t j = 1; j < cols; ++j) mx = std::max(mx, x[j]);
    // The sum in double: a float sum's rounding (which depends on how the compiler orders it:
    // an -O1 build's serial sum was ~3x less exact than -O3's vectorized one) scales a whole
    // row, and the gradients' softmax backward amplifies it by subtracting nearly equal numbers.
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) {
      y[j] = std::exp(x[j] - mx);
      sum += y[j];
    }
    const double inv = 1.0 / sum;
    for (int64_t j = 0; j < cols; ++j) y[j] = static_cast<float>(y[j] * inv);
  }
}

void softmax_gather(const float* L, const int64_t* id, int64_t B, int64_t k, float* out) {
  for (int64_t r = 0; r < B; ++r) softmax_rows(L + id[r] * k, out + r * k, 1, k);
}

// The non-zeros' loops are scalar: k is small and the reads of Q are strided, which GCC's
// vectorizer turns into insert/extract sequences slower than plain loads.
#define TT_SCALAR __attribute__((optimize("no-tree-vectorize")))

TT_CLONES TT_SCALAR void xhat(const float* P, const float* Q, const int64_t* r, const int64_t* c, float* xh, int64_t b,
                    int64_t e, int64_t k, int64_t m) {
  for (int64_t i = b; i < e; ++i) {
    const float* pr = P + r[i] * k;
    const float* qc = Q + c[i];
    float s = 0;
    for (int64_t t = 0; t < k; ++t) s += pr[t] * qc[t * m];
    xh[i] = s;
  }
}

TT_CLONES double weighted_log(const float* v, const float* xh, int64_t b, int64_t e, float floor) {
  double s = 0;
  for (int64_t i = b; i < e; ++i) s += static_cast<double>(v[i] * std::log(std::max(xh[i], floor)));
  return s;
}

TT_CLONES double row_sum(const float* x, int64_t n) {
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j];
  return s;
}

TT_CLONES void loss_weights(const float* v, const float* xh, double* w, int64_t b, int64_t e, float floor) {
  for (int64_t i = b; i < e; ++i) w[i] = xh[i] < floor ? 0.0 : -static_cast<double>(v[i]) / xh[i];
}

TT_CLONES TT_SCALAR void topic_grads(double go, const float* P, const float* Q, const int64_t* r, const int64_t* c,
                                     const double* w, int64_t nnz, int64_t t, int64_t k, int64_t m, float* gq,
                                     double* gp) {
  const float* qt = Q + t * m;
  for (int64_t i = 0; i < nnz; ++i) {
    const double g = go * w[i];
    gq[c[i]] += static_cast<float>(g) * P[r[i] * k + t];
    gp[r[i]] += g * qt[c[i]];
  }
}

TT_CLONES void softmax_backward_rows(float* g, const float* s, int64_t b, int64_t e, int64_t cols) {
  for (int64_t r = b; r < e; ++r) {
    float* gr = g + r * cols;
    const float* sr = s + r * cols;
    double dot = 0;
    for (int64_t j = 0; j < cols; ++j) dot += static_cast<double>(gr[j]) * sr[j];
    for (int64_t j = 0; j < cols; ++j) gr[j] = static_cast<float>(sr[j] * (static_cast<double>(gr[j]) - dot));
  }
}

}  // namespace tt::topic::kernels
