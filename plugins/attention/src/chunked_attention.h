#pragma once
// Memory-efficient attention for tt::nn::Attention: the same result as the naive kernel
// without ever holding a T x S score matrix.
//
// Forward walks query chunks and, inside each, key blocks with an online softmax (a running
// row max and row sum; the output accumulator is rescaled whenever the max grows), and keeps
// for backward only q, k, v, the output O and the per-row log-sum-exp LSE [B, H, T]. Backward
// recomputes each (query chunk, key block) tile of probabilities from q, k and LSE
// (P = exp(S - LSE)) and accumulates dQ, dK, dV tile by tile (FlashAttention's backward):
// extra memory is O(chunk_q * chunk_k) per tile instead of O(T * S).
// Masks follow NaiveAttentionKernel exactly: causal is tril(S - T) (key j visible to query i
// when j <= i + S - T), padded keys are excluded, and a row with no visible key outputs 0
// (gradient 0, no NaN). Key blocks entirely above the causal diagonal are skipped.
// Math is float32; bf16/fp16 inputs (autocast) are computed in float32 and returned in their
// own dtype.
#include <atomic>
#include <string>
#include <vector>

#include "tt/nn.h"

namespace tt::attn {

// softmax(q k^T / sqrt(D) + mask) v for q [B, H, T, D], k and v [B, H, S, D]; key_padding is
// undefined or bool [B, S] (true = a real token). Differentiable in q, k and v.
at::Tensor chunked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                             const at::Tensor& key_padding, int64_t chunk_q, int64_t chunk_k);

// The tensors a chunked_attention() result keeps for backward (empty for any other tensor,
// or without a graph). For tests: none of them is T x S.
std::vector<at::Tensor> saved_for_backward(const at::Tensor& out);

// The kernel the plugin installs for `kernel: chunked`. Attention-probability dropout in
// training is not implemented tile-wise: such calls go to the naive kernel (logged once).
class ChunkedAttentionKernel : public tt::nn::AttentionKernel {
 public:
  ChunkedAttentionKernel(int64_t chunk_q, int64_t chunk_k);
  std::string name() const override { return "chunked"; }
  at::Tensor forward(const tt::nn::AttentionInputs& in) override;
  int64_t chunk_q() const { return chunk_q_; }
  int64_t chunk_k() const { return chunk_k_; }

 private:
  int64_t chunk_q_, chunk_k_;
  tt::nn::NaiveAttentionKernel naive_;
  std::atomic<bool> warned_{false};
};

}  // namespace tt::attn
