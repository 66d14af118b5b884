#include "sdpa_attention.h"

#include <torch/torch.h>

#include "tt/compat.h"
#include "tt/error.h"

namespace tt::attn {

bool sdpa_available() { return TT_TORCH_AT_LEAST(2, 0); }

std::string torch_version() { return "LibTorch " TT_TORCH_VERSION_STRING; }

at::Tensor SdpaAttentionKernel::forward(const tt::nn::AttentionInputs& in) {
#if TT_TORCH_AT_LEAST(2, 0)
  const int64_t B = in.q.size(0), T = in.q.size(2), S = in.k.size(2);
  const double dropout = in.training ? in.dropout : 0.0;
  if (!in.key_padding.defined() && (!in.causal || S == T))
    return at::scaled_dot_product_attention(in.q, in.k, in.v, {}, dropout, in.causal);
  // an explicit boolean mask (true = take part), [B, 1, T, S]
  auto opts = torch::dtype(torch::kBool).device(in.q.device());
  auto keep = in.causal ? torch::ones({T, S}, opts).tril(S - T).view({1, 1, T, S}) : torch::ones({1, 1, T, S}, opts);
  if (in.key_padding.defined()) keep = keep.logical_and(in.key_padding.to(torch::kBool).view({B, 1, 1, S}));
  // rows with no visible key would be NaN: let them see every key, then zero them
  auto live = keep.any(-1, /*keepdim=*/true);  // [B or 1, 1, T, 1]
  auto out = at::scaled_dot_product_attention(in.q, in.k, in.v, keep.logical_or(live.logical_not()), dropout, false);
  return out * live.to(out.scalar_type());
#else
  (void)in;
  TT_FAIL("attention: kernel sdpa needs LibTorch 2.0 or later (at::scaled_dot_product_attention); this build has ",
          torch_version());
#endif
}

}  // namespace tt::attn
