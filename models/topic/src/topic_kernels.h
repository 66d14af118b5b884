#pragma once
// The topic loss's inner loops, in a file of their own compiled with -O3 -ffast-math and
// cloned for AVX-512 / AVX2 / baseline x86-64 (picked at load time): fast-math lets GCC
// vectorize the reductions and call glibc's vector exp/log (libmvec, <= 4 ulp). None of
// these loops needs IEEE corner cases: inputs are finite and logs are of values >= 1e-10.
// Plain pointers, no torch: poisson_loss.cpp does the tensors and threads. The non-zeros'
// loops read Q (k x m) at column c for k rows: the batches come ordered by column blocks
// (nonzeros.h), so those reads sweep each row of Q forwards.
#include <cstdint>

namespace tt::topic::kernels {

// out[r] = softmax(in[r]) for `rows` rows of `cols` (out may be in).
void softmax_rows(const float* in, float* out, int64_t rows, int64_t cols);
// out[r] = softmax(L[id[r]]) for r < B, rows of k.
void softmax_gather(const float* L, const int64_t* id, int64_t B, int64_t k, float* out);
// xh[i] = P[r[i]] . Q[:, c[i]] (Q is k x m) for the non-zeros [b, e).
void xhat(const float* P, const float* Q, const int64_t* r, const int64_t* c, float* xh, int64_t b, int64_t e,
          int64_t k, int64_t m);
// sum_i v[i] log(max(xh[i], floor)) over [b, e), in double.
double weighted_log(const float* v, const float* xh, int64_t b, int64_t e, float floor);
// sum_j x[j] over n values, in double.
double row_sum(const float* x, int64_t n);
// w[i] = d(-v log max(xh, floor)) / d xh = -v[i] / xh[i], or 0 where xh[i] < floor (the
// clamp passes no gradient), over the non-zeros [b, e).
void loss_weights(const float* v, const float* xh, double* w, int64_t b, int64_t e, float floor);
// Topic t's share of the gradients of go * sum_i (-v log xh): over all non-zeros,
// gq[c[i]] += go w[i] P[r[i]][t] (gq: row t of the k x m gradient) and
// gp[r[i]] += go w[i] Q[t][c[i]] (gp: topic t's B values, double). Topics are independent,
// so threads split them without sharing a cache line of output.
void topic_grads(double go, const float* P, const float* Q, const int64_t* r, const int64_t* c, const double* w,
                 int64_t nnz, int64_t t, int64_t k, int64_t m, float* gq, double* gp);
// Softmax backward in place for rows [b, e) of `cols`: g = s * (g - sum(g * s)), the sum in double.
void softmax_backward_rows(float* g, const float* s, int64_t b, int64_t e, int64_t cols);

}  // namespace tt::topic::kernels
