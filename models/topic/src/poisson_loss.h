#pragma once
// The topic model's loss with its gradient computed directly, never materializing the
// b x m reconstruction.
//
//   loss = sum_ij Xhat_ij - X_ij log(max(Xhat_ij, 1e-10)),   Xhat = softmax(L_raw[B]) softmax(F_raw)
//
// Rows of softmax x softmax sum to 1, so the first term is the number of rows up to rounding
// and its gradient is exactly zero; the second term only involves the non-zeros of X. The
// forward and backward therefore cost O(nnz k + k m) instead of several b x m passes.
// The result equals tinytopics' dense formula to float rounding (tests/topic_model checks it).
#include <torch/torch.h>

#include <vector>

namespace tt::topic {

// Non-zeros of a batch of document-term counts: rows (within the batch), cols, vals.
struct BatchCounts {
  torch::Tensor rows, cols, vals;  // int64 [nnz], int64 [nnz], float32 [nnz]
};
BatchCounts nonzeros_of(const torch::Tensor& x);  // from dense float32 [B, m]

// Scalar loss; differentiable w.r.t. L_raw and F_raw. With `sparse_grad`, L_raw's gradient
// is a sparse COO tensor holding only the batch's rows (for the lazy optimizer update).
torch::Tensor poisson_nmf_loss(const torch::Tensor& L_raw, const torch::Tensor& F_raw, const torch::Tensor& index,
                               const BatchCounts& counts, bool sparse_grad);

// The loss's passes over plain buffers, shared by the autograd function above and the model's
// fused step (TopicModel::fused_step), so the two compute the same values the same way.
// Forward: P [B x k] = softmax(L_raw[idx]), Q [k x m] = softmax(F_raw) with its rows' sums
// qsum [k], xhat [nnz] at the non-zeros and w [nnz] = d loss / d xhat; returns the loss.
double loss_forward(const float* L_raw, const float* F_raw, const int64_t* idx, int64_t B, int64_t k, int64_t m,
                    const int64_t* rows, const int64_t* cols, const float* vals, int64_t nnz, float* P, float* Q,
                    double* qsum, float* xhat, double* w);
// Backward, topic by topic (kernels::topic_grads, then kernels::softmax_backward_rows on F's
// row), then L's rows: the B rows of L_raw's gradient [B x k] from P's gradient gP (k x B,
// topic-major, double).
void rows_backward(const float* P, const double* gP, int64_t B, int64_t k, float* gL);
// The batch rows' gradients gL [B x k] of documents id[0..B) as L's rows: the distinct
// documents ascending, a document twice in the batch taking the sum of its rows.
struct RowGradients {
  std::vector<int64_t> rows;
  std::vector<float> values;  // rows.size() x k
};
RowGradients row_gradients(const int64_t* id, const float* gL, int64_t B, int64_t k);

// The same loss over the non-zeros in LibTorch operations through autograd, on any device (the
// model's loss off the CPU, where the kernels above do not run): P's rows gathered at the
// non-zeros' rows times Q's columns at their columns, O(nnz k + k m) memory like the kernels,
// not the b x m reconstruction of the dense formula below. The non-zeros of a dense batch come
// from nonzeros_on_device.
torch::Tensor poisson_nmf_loss_nonzeros(const torch::Tensor& L_raw, const torch::Tensor& F_raw,
                                        const torch::Tensor& index, const BatchCounts& counts);
BatchCounts nonzeros_on_device(const torch::Tensor& x);  // from dense [B, m] on any device

// The same loss by tinytopics' dense formula through autograd (reference).
torch::Tensor poisson_nmf_loss_reference(const torch::Tensor& L_raw, const torch::Tensor& F_raw,
                                         const torch::Tensor& index, const torch::Tensor& x);

}  // namespace tt::topic
