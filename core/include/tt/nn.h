#pragma once
// Hookable building blocks: the layers models are built from so that technique plugins can
// act on them. Plugins find them by walking the model (Module::named_modules) under stable
// dotted names, e.g. "blocks.3.attn.qkv".
//
// Extension points
//   Linear      adapters: add_adapter(name, adapter) adds adapter(x) to the layer's output
//               (LoRA); the base weight can be frozen independently of the adapters.
//   Attention   kernel: set_kernel(kernel) swaps how softmax(q k^T / sqrt(d) + mask) v is
//               computed (naive here; chunked/fused kernels come as plugins).
//   BlockStack  runner: set_runner(runner) swaps how each block is called (activation
//               checkpointing re-runs blocks in backward instead of keeping activations).
// Plus the plain pieces: Embedding, LayerNorm, RMSNorm, MLP (GELU).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tt/export.h"

namespace tt::nn {

// A pattern names a module by its dotted name (shell wildcards), a whole subtree
// ("blocks.0.attn" covers blocks.0.attn.qkv), or, without a dot, the last part of any name
// ("head", "ln*" for every LayerNorm named ln1/ln2/ln_f, "qkv"). Used by plugins' layer lists
// (amp's keep_fp32, LoRA's targets).
TT_API bool name_matches(const std::string& pattern, const std::string& name);

// ---------------------------------------------------------------- Linear with adapters

// Something added to a Linear's output: y = W x + b + sum_a a(x).
class TT_API LinearAdapter : public torch::nn::Module {
 public:
  ~LinearAdapter() override;
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // False while the adapter is folded into the layer's weight (LoRA's merge): not called then.
  virtual bool active() const { return true; }
};

class TT_API LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
  at::Tensor forward(const at::Tensor& x);
  // The adapter becomes the submodule "adapter_<name>" (its parameters are the model's).
  void add_adapter(const std::string& name, std::shared_ptr<LinearAdapter> adapter);
  void remove_adapter(const std::string& name);  // no-op when absent
  const std::vector<std::pair<std::string, std::shared_ptr<LinearAdapter>>>& adapters() const { return adapters_; }

  int64_t in_features, out_features;
  at::Tensor weight, bias;  // weight [out, in] (torch's layout), bias [out] or undefined
  bool keep_fp32 = false;   // run in float32 with autocast off (amp's keep_fp32)

 private:
  std::vector<std::pair<std::string, std::shared_ptr<LinearAdapter>>> adapters_;
};
TORCH_MODULE(Linear);

// The output projection of tied embeddings: y = x W^T where W is another module's weight (the
// token embedding), not a parameter of this one. keep_fp32 as Linear's (the LM head is where
// bf16 rounding of the logits costs most).
class TT_API TiedLinearImpl : public torch::nn::Module {
 public:
  explicit TiedLinearImpl(at::Tensor tied_weight) : weight(std::move(tied_weight)) {}
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  bool keep_fp32 = false;
};
TORCH_MODULE(TiedLinear);

// ---------------------------------------------------------------- Attention with a kernel

struct AttentionInputs {
  at::Tensor q, k, v;      // [B, H, T, D]
  bool causal = true;      // position i attends to j <= i
  at::Tensor key_padding;  // optional bool [B, T]: true = a real token, false = padding
  double dropout = 0;      // attention-probability dropout (training only)
  bool training = false;
};

class TT_API AttentionKernel {
 public:
  virtual ~AttentionKernel();
  virtual std::string name() const = 0;
  virtual at::Tensor forward(const AttentionInputs& in) = 0;  // [B, H, T, D]
};

// softmax(q k^T / sqrt(D) + mask) v with the T x T score matrix materialized.
class TT_API NaiveAttentionKernel : public AttentionKernel {
 public:
  std::string name() const override { return "naive"; }
  at::Tensor forward(const AttentionInputs& in) override;
};

// Multi-head self-attention: fused qkv projection ("qkv"), output projection ("proj"),
// optional rotary position embedding on q and k.
class TT_API AttentionImpl : public torch::nn::Module {
 public:
  struct Options {
    int64_t d_model = 128, n_heads = 4;
    bool causal = true, rotary = false, bias = true;
    double dropout = 0;
    double rotary_base = 10000;
  };
  explicit AttentionImpl(const Options& o);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& key_padding = {});  // x [B, T, d_model]
  void set_kernel(std::shared_ptr<AttentionKernel> kernel);
  AttentionKernel& kernel() const { return *kernel_; }

  Linear qkv{nullptr}, proj{nullptr};
  Options options;

 private:
  std::shared_ptr<AttentionKernel> kernel_;
};
TORCH_MODULE(Attention);

// Rotary position embedding (RoPE, rotate-half form) on x [B, H, T, D] at positions 0..T-1.
TT_API at::Tensor apply_rotary(const at::Tensor& x, double base = 10000);

// ---------------------------------------------------------------- norms, MLP, embedding

class TT_API RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-6);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
  bool keep_fp32 = false;  // output float32 with autocast off (amp's keep_fp32)
};
TORCH_MODULE(RMSNorm);

class TT_API LayerNormImpl : public torch::nn::Module {
 public:
  explicit LayerNormImpl(int64_t dim, double eps = 1e-5);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;
  double eps;
  bool keep_fp32 = false;  // run in float32 with autocast off (amp's keep_fp32)
};
TORCH_MODULE(LayerNorm);

// fc1 -> GELU -> fc2 (both tt Linear, so adapters apply), with dropout after fc2.
class TT_API MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(int64_t d_model, int64_t d_ff, double dropout = 0, bool bias = true);
  at::Tensor forward(const at::Tensor& x);
  Linear fc1{nullptr}, fc2{nullptr};
  double dropout;
  // Keep only fc1's output for backward and recompute GELU from it in fc2's backward, instead
  // of also keeping GELU's output (d_ff wide): one [B, T, d_ff] tensor less per block, for one
  // elementwise GELU more. The checkpoint plugin turns it on in the blocks it recomputes.
  // Applies when fc2 is a plain Linear (no adapters, no keep_fp32) and dropout is 0.
  bool recompute_activation = false;
  // Set by the checkpoint plugin while it re-runs a block for backward when this MLP's output is
  // only added into the block's output (Block::residual_mlp): that value is never read, only
  // the gradient flows through it, so with recompute_activation the re-run skips GELU and fc2's
  // product and returns an uninitialized tensor of the output's shape and dtype whose backward
  // is fc2's and GELU's as usual.
  bool skip_output = false;
};
TORCH_MODULE(MLP);

// Mean cross-entropy of logits [N, C] (any float dtype) against class ids [N], as
// torch.nn.functional.cross_entropy computes it, with less memory: the log-softmax is formed in
// float32 a block of rows at a time and only the logits and each row's log-sum-exp are kept, so
// forward and backward together hold the logits and their gradient, where log_softmax + nll_loss
// also keep the float32 log-probabilities and a separate gradient of them.
TT_API at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& target);

class TT_API EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t count, int64_t dim, double init_std = 0.02);
  at::Tensor forward(const at::Tensor& ids);
  at::Tensor weight;  // [count, dim]
};
TORCH_MODULE(Embedding);

// ---------------------------------------------------------------- block stack with a runner

// One block of a stack: a tensor in, a tensor of the same shape out.
class TT_API Block : public torch::nn::Module {
 public:
  ~Block() override;
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // The MLP whose output the block's last step adds into its result (forward(x) = r + mlp(...)),
  // where that output is read by nothing else; nullptr when there is none. Lets a re-run for
  // backward skip computing a value nobody reads (MLPImpl::skip_output).
  virtual MLPImpl* residual_mlp() { return nullptr; }
};

// How a stack calls its blocks. The default calls block.forward(x).
class TT_API BlockRunner {
 public:
  virtual ~BlockRunner();
  virtual std::string name() const = 0;
  virtual at::Tensor run(int64_t index, Block& block, const at::Tensor& x) = 0;
};

class TT_API BlockStackImpl : public torch::nn::Module {
 public:
  BlockStackImpl() = default;
  // Registered as "<index>": dotted names are "<stack name>.<index>.<...>".
  void push_back(std::shared_ptr<Block> block);
  at::Tensor forward(const at::Tensor& x);
  void set_runner(std::shared_ptr<BlockRunner> runner);  // nullptr: the default
  BlockRunner* runner() const { return runner_.get(); }
  std::shared_ptr<BlockRunner> shared_runner() const { return runner_; }  // to wrap it
  size_t size() const { return blocks_.size(); }
  Block& operator[](size_t i) const { return *blocks_.at(i); }

 private:
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<BlockRunner> runner_;
};
TORCH_MODULE(BlockStack);

// Every module of `root` of type T with its dotted name (for plugins: "all Linear layers
// whose name ends in qkv").
template <class T>
std::vector<std::pair<std::string, std::shared_ptr<T>>> find_modules(torch::nn::Module& root) {
  std::vector<std::pair<std::string, std::shared_ptr<T>>> out;
  for (const auto& item : root.named_modules("", /*include_self=*/false))
    if (auto m = std::dynamic_pointer_cast<T>(item.value())) out.emplace_back(item.key(), m);
  return out;
}

}  // namespace tt::nn
