#pragma once
// A GPT-style decoder-only LM built from core's hookable blocks (tt/nn.h), so technique
// plugins act on it by name: "tok", "pos", "blocks.<i>.{ln1,attn.{qkv,proj},ln2,mlp.{fc1,fc2}}",
// "ln_f", "head" (with tied embeddings a parameterless tt::nn::TiedLinear over tok's weight).
// Pre-norm blocks: x + attn(norm1(x)), then x + mlp(norm2(x)); causal multi-head attention
// with a fused qkv projection; GELU MLP; learned or rotary positions; GPT-2 initialisation
// (N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layers)).
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "tokenizer.h"
#include "tt/dataset.h"
#include "tt/model.h"
#include "tt/nn.h"
#include "tt/options.h"

namespace tt::lm {

struct Shape {
  int64_t vocab = 256, d_model = 256, n_layers = 4, n_heads = 4, d_ff = 1024, seq_len = 256;
  bool learned_positions = true;  // false: rotary
  bool tie_embeddings = true;
  bool bias = true;
  bool rms_norm = false;  // false: LayerNorm
  double dropout = 0;
  std::string to_string() const;  // "d_model 256, 4 layers, 4 heads, d_ff 1024, seq_len 256, vocab 256"
};

// Exact number of parameters of a TransformerLM of this shape.
int64_t count_parameters(const Shape& s);
// A shape with about `target` parameters for the given vocab/seq_len/position/tying choices:
// d_model a multiple of 32 (heads of 32..64 dims), d_ff = 4 d_model, layers and width chosen
// for the closest count with a GPT-like width/depth ratio; nullopt when no shape comes within
// a factor e^0.5 of the target (the embeddings alone are larger, the target is huge, or <= 0).
std::optional<Shape> shape_for_parameters(int64_t target, Shape base);

class TransformerBlock : public tt::nn::Block {
 public:
  explicit TransformerBlock(const Shape& s);
  at::Tensor forward(const at::Tensor& x) override;
  tt::nn::MLPImpl* residual_mlp() override { return mlp.get(); }  // forward ends with h + mlp(ln2(h))
  std::shared_ptr<torch::nn::Module> ln1, ln2;  // tt::nn::LayerNorm or RMSNorm
  tt::nn::Attention attn{nullptr};
  tt::nn::MLP mlp{nullptr};

 private:
  at::Tensor norm(torch::nn::Module& m, const at::Tensor& x) const;
  bool rms_;
};

// How text is sampled: from the model options (sample_tokens, temperature, top_k, whose
// defaults are in model_schema()) or from GenerateOptions.
struct Sampling {
  int64_t tokens;
  double temperature;  // 0: greedy
  int64_t top_k;       // 0: the whole vocabulary
  uint64_t seed;
};

class TransformerLM : public Model {
 public:
  TransformerLM(const Shape& s, std::shared_ptr<Tokenizer> tokenizer, Sampling sampling, std::string sample_prompt);
  at::Tensor logits(const at::Tensor& ids);  // [B, T] -> [B, T, vocab]
  // The final hidden states (after ln_f) [B, T] -> [B, T, d_model], and the head on them.
  at::Tensor hidden(const at::Tensor& ids);
  at::Tensor project(const at::Tensor& hidden);
  ModelOutput forward_loss(const Batch& batch) override;  // mean cross-entropy over tokens (nats)
  // Over every position of the batch: hidden [B*T, d_model], target [B*T], the head's weight
  // [vocab, d_model] (tok's with tied embeddings), no bias.
  OutputHead output_head(const Batch& batch) override;
  // The shape (d_model, n_layers, n_heads, d_ff, seq_len, vocab) with target_params left unset.
  std::map<std::string, std::string> derived_options() const override;
  std::string data_identity() const override;  // "tokenizer " + its identity
  // Evaluation's rows (tokens) whose logits are formed at once; 0: as many as make 4 MiB of
  // float32 logits (never the whole [batch, T, vocab] at once).
  int64_t eval_rows_per_chunk = 0;
  // Over a text stream: val_loss (nats/token), val_bits_per_char, val_perplexity, val_tokens.
  std::map<std::string, double> evaluate(Dataset& data, int64_t batch_size) override;
  std::string generate(const std::string& prompt, const GenerateOptions& o) override;
  int64_t estimate_activation_bytes(int64_t micro_batch_size) const override;
  void write_outputs(const std::filesystem::path& run_dir, State& state) override;
  std::string describe() const override;

  const Shape& shape() const { return s_; }
  tt::nn::BlockStack blocks{nullptr};

 private:
  // `produced`, when given, receives the number of tokens sampled (fewer than asked after Ctrl-C).
  std::string sample(const std::string& prompt, const Sampling& o, int64_t* produced = nullptr);
  Shape s_;
  std::shared_ptr<Tokenizer> tokenizer_;
  Sampling sampling_;
  std::string sample_prompt_;
  tt::nn::Embedding tok{nullptr}, pos{nullptr};
  std::shared_ptr<torch::nn::Module> ln_f;
  tt::nn::Linear head{nullptr};
  tt::nn::TiedLinear tied_head{nullptr};  // "head" when the embeddings are tied
};

// The model's options as model_schema() binds them (defaults, ranges and docs are there). The
// shape options left unset are derived: from target_params, the data (seq_len, vocab), or
// Shape's defaults (d_model, n_layers), n_heads from d_model, d_ff = 4 d_model.
struct ModelOptions {
  std::optional<int64_t> target_params, d_model, n_layers, n_heads, d_ff, seq_len, vocab;
  std::string positions;  // learned | rotary
  bool tie_embeddings;
  std::string norm;  // layernorm | rmsnorm
  bool bias;
  double dropout;
  std::string sample_prompt;
  int64_t sample_tokens;
  double temperature;
  int64_t top_k;
};

Schema model_schema();
std::shared_ptr<Model> make_model(const Options& o, const Datasets& data);

}  // namespace tt::lm
