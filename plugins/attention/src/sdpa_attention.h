#pragma once
// LibTorch's fused attention, at::scaled_dot_product_attention (LibTorch 2.0 and later): on
// CUDA it picks FlashAttention or the memory-efficient kernel where the inputs allow, else
// its math path. The masks are NaiveAttentionKernel's: causal tril(S - T) (is_causal alone
// when S == T and nothing is padded, which keeps the fused kernels eligible), padded keys
// excluded, a row with no visible key outputs 0 (gradient 0, no NaN). Dropout is LibTorch's.
#include <string>

#include "tt/nn.h"

namespace tt::attn {

// Whether this build has the fused kernel (LibTorch >= 2.0).
bool sdpa_available();
// "LibTorch 1.13.1" (the version this was built against), for messages.
std::string torch_version();

// The kernel the plugin installs for `kernel: sdpa` where sdpa_available(); forward throws
// tt::Error elsewhere.
class SdpaAttentionKernel : public tt::nn::AttentionKernel {
 public:
  std::string name() const override { return "sdpa"; }
  at::Tensor forward(const tt::nn::AttentionInputs& in) override;
};

}  // namespace tt::attn
