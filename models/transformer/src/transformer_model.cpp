#include "transformer_model.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <vector>

#include "text_stream.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/text_file.h"
#include "tt/runtime.h"
#include "tt/state.h"

namespace tt::lm {

std::string Shape::to_string() const {
  return detail::cat("d_model ", d_model, ", ", n_layers, " layers, ", n_heads, " heads, d_ff ", d_ff, ", seq_len ",
                     seq_len, ", vocab ", vocab, learned_positions ? ", learned positions" : ", rotary positions",
                     tie_embeddings ? ", tied embeddings" : "", rms_norm ? ", RMSNorm" : "");
}

int64_t count_parameters(const Shape& s) {
  const int64_t d = s.d_model, f = s.d_ff, b = s.bias ? 1 : 0;
  const int64_t norm = s.rms_norm ? d : 2 * d;
  const int64_t block = 2 * norm + (3 * d * d + b * 3 * d) + (d * d + b * d) + (d * f + b * f) + (f * d + b * d);
  int64_t n = s.vocab * d + s.n_layers * block + norm;
  if (s.learned_positions) n += s.seq_len * d;
  if (!s.tie_embeddings) n += s.vocab * d;  // head (no bias)
  return n;
}

namespace {
// Heads for a width: head dimension 64 (32 below d_model 256), else the divisor of d_model
// whose head dimension comes closest.
int64_t heads_for(int64_t d) {
  const int64_t want = d < 256 ? 32 : 64;
  int64_t best = 1;
  for (int64_t h = 1; h <= d; ++h)
    if (d % h == 0 && std::abs(d / h - want) < std::abs(d / best - want)) best = h;
  return best;
}
}  // namespace

std::optional<Shape> shape_for_parameters(int64_t target, Shape base) {
  // Among shapes whose count is within 5% of the target (or as close as any gets), the one
  // nearest a small-GPT width/depth ratio: d_model about 32 x layers, 64 x above 20M.
  const double aspect = target < 20'000'000 ? 32.0 : 64.0;
  struct Candidate {
    Shape s;
    double miss, shape;
  };
  std::vector<Candidate> all;
  double best_miss = std::numeric_limits<double>::infinity();
  for (int64_t layers = 1; layers <= 96; ++layers)
    for (int64_t d = 16; d <= 8192; d += d < 256 ? 8 : 32) {
      Shape s = base;
      s.n_layers = layers;
      s.d_model = d;
      s.n_heads = heads_for(d);
      s.d_ff = 4 * d;
      if (!s.learned_positions && (d / s.n_heads) % 2 != 0) continue;
      const double miss = std::abs(std::log(static_cast<double>(count_parameters(s)) / static_cast<double>(target)));
      if (!(miss <= 0.5)) continue;  // NaN too (a target <= 0): no shape comes near it
      best_miss = std::min(best_miss, miss);
      all.push_back({s, miss, std::abs(std::log(static_cast<double>(d) / (aspect * static_cast<double>(layers))))});
    }
  if (all.empty()) return std::nullopt;
  const double tolerance = std::max(best_miss, std::log(1.05));
  const Candidate* pick = nullptr;
  for (const auto& c : all)
    if (c.miss <= tolerance && (!pick || c.shape < pick->shape)) pick = &c;
  return pick->s;
}

// ---------------------------------------------------------------- block

TransformerBlock::TransformerBlock(const Shape& s) : rms_(s.rms_norm) {
  auto make_norm = [&]() -> std::shared_ptr<torch::nn::Module> {
    if (rms_) return tt::nn::RMSNorm(s.d_model).ptr();
    return tt::nn::LayerNorm(s.d_model).ptr();
  };
  ln1 = register_module("ln1", make_norm());
  tt::nn::AttentionImpl::Options a;
  a.d_model = s.d_model;
  a.n_heads = s.n_heads;
  a.causal = true;
  a.rotary = !s.learned_positions;
  a.bias = s.bias;
  a.dropout = s.dropout;
  attn = register_module("attn", tt::nn::Attention(a));
  ln2 = register_module("ln2", make_norm());
  mlp = register_module("mlp", tt::nn::MLP(s.d_model, s.d_ff, s.dropout, s.bias));
}

at::Tensor TransformerBlock::norm(torch::nn::Module& m, const at::Tensor& x) const {
  if (rms_) return static_cast<tt::nn::RMSNormImpl&>(m).forward(x);
  return static_cast<tt::nn::LayerNormImpl&>(m).forward(x);
}

at::Tensor TransformerBlock::forward(const at::Tensor& x) {
  at::Tensor a = attn->forward(norm(*ln1, x));
  if (attn->options.dropout > 0) a = torch::dropout(a, attn->options.dropout, is_training());
  at::Tensor h = x + a;
  return h + mlp->forward(norm(*ln2, h));
}

// ---------------------------------------------------------------- model

TransformerLM::TransformerLM(const Shape& s, std::shared_ptr<Tokenizer> tokenizer, Sampling sampling,
                             std::string sample_prompt)
    : s_(s), tokenizer_(std::move(tokenizer)), sampling_(sampling), sample_prompt_(std::move(sample_prompt)) {
  tok = register_module("tok", tt::nn::Embedding(s.vocab, s.d_model));
  if (s.learned_positions) pos = register_module("pos", tt::nn::Embedding(s.seq_len, s.d_model));
  blocks = register_module("blocks", tt::nn::BlockStack());
  for (int64_t i = 0; i < s.n_layers; ++i) blocks->push_back(std::make_shared<TransformerBlock>(s));
  ln_f = register_module("ln_f", s.rms_norm ? tt::nn::RMSNorm(s.d_model).ptr()
                                            : std::shared_ptr<torch::nn::Module>(tt::nn::LayerNorm(s.d_model).ptr()));
  if (s.tie_embeddings)
    tied_head = register_module("head", tt::nn::TiedLinear(tok->weight));
  else
    head = register_module("head", tt::nn::Linear(s.d_model, s.vocab, false));

  // GPT-2 initialisation: N(0, 0.02) weights, zero biases, residual projections / sqrt(2 L).
  torch::NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(s.n_layers));
  for (auto& [name, lin] : tt::nn::find_modules<tt::nn::LinearImpl>(*this)) {
    const bool residual = name.size() > 5 && (name.rfind(".proj") == name.size() - 5 || name.rfind(".fc2") == name.size() - 4);
    lin->weight.normal_(0.0, residual ? resid_std : 0.02);
    if (lin->bias.defined()) lin->bias.zero_();
  }
}

at::Tensor TransformerLM::hidden(const at::Tensor& ids) {
  TT_CHECK(ids.dim() == 2, "transformer: token ids must be [batch, time], got ", ids.sizes());
  const int64_t T = ids.size(1);
  TT_CHECK(T <= s_.seq_len || !s_.learned_positions, "transformer: ", T,
           " tokens exceed the model's seq_len ", s_.seq_len, " (learned positions)");
  at::Tensor x = tok->forward(ids);
  if (s_.learned_positions) x = x + pos->forward(torch::arange(T, torch::dtype(torch::kLong).device(ids.device())));
  if (s_.dropout > 0) x = torch::dropout(x, s_.dropout, is_training());
  x = blocks->forward(x);
  return s_.rms_norm ? static_cast<tt::nn::RMSNormImpl&>(*ln_f).forward(x)
                     : static_cast<tt::nn::LayerNormImpl&>(*ln_f).forward(x);
}

at::Tensor TransformerLM::project(const at::Tensor& h) {
  return s_.tie_embeddings ? tied_head->forward(h) : head->forward(h);
}

at::Tensor TransformerLM::logits(const at::Tensor& ids) { return project(hidden(ids)); }

OutputHead TransformerLM::output_head(const Batch& batch) {
  const at::Tensor& target = batch.at("target");
  OutputHead h;
  h.hidden = hidden(batch.at("input")).reshape({-1, s_.d_model});
  h.target = target.reshape({-1});
  h.weight = s_.tie_embeddings ? tied_head->weight : head->weight;
  h.project = [this](const at::Tensor& rows) { return project(rows); };
  h.plain = s_.tie_embeddings || head->adapters().empty();
  h.reduction = Reduction::Mean;
  h.items = target.numel();
  return h;
}

ModelOutput TransformerLM::forward_loss(const Batch& batch) {
  OutputHead h = output_head(batch);
  ModelOutput o;
  o.loss = tt::nn::cross_entropy(h.project(h.hidden), h.target);
  o.reduction = h.reduction;
  o.items = h.items;
  return o;
}

std::string TransformerLM::data_identity() const {
  return tokenizer_ ? "tokenizer " + tokenizer_->identity() : std::string();
}

std::map<std::string, std::string> TransformerLM::derived_options() const {
  return {{"target_params", "~"},
          {"d_model", std::to_string(s_.d_model)},
          {"n_layers", std::to_string(s_.n_layers)},
          {"n_heads", std::to_string(s_.n_heads)},
          {"d_ff", std::to_string(s_.d_ff)},
          {"seq_len", std::to_string(s_.seq_len)},
          {"vocab", std::to_string(s_.vocab)}};
}

std::map<std::string, double> TransformerLM::evaluate(Dataset& data, int64_t batch_size) {
  auto* stream = dynamic_cast<TextStream*>(&data);
  if (!stream) return Model::evaluate(data, batch_size);
  torch::NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  double nll = 0;
  int64_t tokens = 0;
  const auto device = tok->weight.device();
  stream->start_epoch(0);
  // A chunk of rows at a time: evaluation's peak is one chunk's logits and their log-softmax,
  // not the whole batch's (training's loss hooks may avoid them; evaluation must not undo that).
  const int64_t rows = eval_rows_per_chunk > 0 ? eval_rows_per_chunk : std::max<int64_t>(1, (4 << 20) / (4 * s_.vocab));
  for (Batch b = stream->next(batch_size); b.size > 0; b = stream->next(batch_size)) {
    tt::stop_if_interrupted();  // a periodic evaluation gives way to an interrupt's checkpoint
    b = b.to(device);
    const at::Tensor h = hidden(b.at("input")).reshape({-1, s_.d_model});
    const at::Tensor target = b.at("target").reshape({-1});
    for (int64_t i = 0; i < h.size(0); i += rows) {
      const int64_t e = std::min(h.size(0), i + rows);
      nll += torch::nn::functional::cross_entropy(project(h.slice(0, i, e)), target.slice(0, i, e),
                                                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                 .item<double>();
    }
    tokens += target.numel();
  }
  train(was_training);
  TT_CHECK(tokens > 0, "the validation stream ", stream->describe(), " produced no windows");
  const double nats = nll / static_cast<double>(tokens);
  // The whole validation text's tokens per character converts nats/token to bits/char.
  const double tokens_per_char =
      static_cast<double>(stream->total_tokens()) / static_cast<double>(std::max<int64_t>(1, stream->total_chars()));
  return {{"val_loss", nats},
          {"val_bits_per_char", nats / std::log(2.0) * tokens_per_char},
          {"val_perplexity", std::exp(nats)},
          {"val_tokens", static_cast<double>(tokens)}};
}

std::string TransformerLM::sample(const std::string& prompt, const Sampling& o, int64_t* produced) {
  TT_CHECK_AS(ConfigError, tokenizer_, "transformer: no tokenizer to encode the prompt with");
  torch::NoGradGuard no_grad;
  std::vector<int32_t> ids = tokenizer_->encode(prompt);
  if (ids.empty()) ids.push_back(tokenizer_->encode("\n").at(0));  // start from a line break
  const size_t prompt_len = ids.size();
  auto gen = at::detail::createCPUGenerator(o.seed);
  const auto device = tok->weight.device();
  for (int64_t i = 0; i < o.tokens && !interrupt_requested(); ++i) {  // Ctrl-C: the sample so far
    const size_t from = ids.size() > static_cast<size_t>(s_.seq_len) ? ids.size() - s_.seq_len : 0;
    std::vector<int64_t> window(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
    at::Tensor x = torch::tensor(window, torch::kLong).view({1, -1}).to(device);
    // [V], cut to the tokenizer's ids: a model.vocab above it (padded, as nanoGPT's 50304 for
    // GPT-2's 50257) has rows no text ever gives, which the tokenizer could not decode
    at::Tensor last = logits(x).select(1, x.size(1) - 1).squeeze(0).to(torch::kCPU, torch::kFloat);
    last = last.narrow(0, 0, std::min(last.size(0), tokenizer_->vocab_size()));
    TT_CHECK_AS(NumericError, torch::isfinite(last).all().item<bool>(), "transformer: the model's output for the prompt "
                "is not finite (NaN/inf): its weights no longer give finite numbers, so there is nothing to sample; "
                "sample from an earlier checkpoint's weights (model.init_from=CHECKPOINT trainer.max_steps=0)");
    int64_t next;
    if (o.temperature <= 0) {
      next = last.argmax().item<int64_t>();
    } else {
      last = last / o.temperature;
      if (o.top_k > 0 && o.top_k < last.size(0)) {
        const double kth = std::get<0>(last.topk(o.top_k)).min().item<double>();
        last = last.masked_fill(last < kth, -std::numeric_limits<float>::infinity());
      }
      next = torch::multinomial(torch::softmax(last, 0), 1, false, gen).item<int64_t>();
    }
    ids.push_back(static_cast<int32_t>(next));
  }
  if (produced) *produced = static_cast<int64_t>(ids.size() - prompt_len);
  return prompt + tokenizer_->decode(std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt_len), ids.end()));
}

std::string TransformerLM::generate(const std::string& prompt, const GenerateOptions& o) {
  Sampling s{};
  s.tokens = o.tokens;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.seed = o.seed;
  return sample(prompt, s);
}

int64_t TransformerLM::estimate_activation_bytes(int64_t micro_batch_size) const {
  // What autograd keeps per block for backward (fp32), per token: the norms' outputs (2 d),
  // qkv's output (3 d), the attention output made contiguous for proj (d), the residual
  // sum (d), the block output (d), fc1's output and GELU's (2 d_ff), and per head one row
  // of softmax probabilities (T); then the logits (vocab: tt::nn::cross_entropy keeps them
  // alone and recomputes the softmax in backward).
  const double B = static_cast<double>(micro_batch_size), T = static_cast<double>(s_.seq_len);
  const double d = static_cast<double>(s_.d_model), f = static_cast<double>(s_.d_ff);
  const double per_token_block = 8 * d + 2 * f + static_cast<double>(s_.n_heads) * T;
  const double per_token = static_cast<double>(s_.n_layers) * per_token_block + 2 * d /* embedding sum, ln_f */ +
                           static_cast<double>(s_.vocab);
  return static_cast<int64_t>(B * T * per_token * 4.0);
}

void TransformerLM::write_outputs(const std::filesystem::path& run_dir, State& state) {
  if (!tokenizer_ || sampling_.tokens <= 0) return;
  int64_t produced = 0;
  const std::string text = sample(sample_prompt_, sampling_, &produced);
  const bool cut = produced < sampling_.tokens;
  state.metrics["sample_tokens"] = static_cast<double>(produced);  // the summary's model_metrics
  std::ofstream out(run_dir / "samples.txt", std::ios::app);
  out << "--- prompt: " << sample_prompt_ << " (end of training, step " << state.step << ", temperature "
      << sampling_.temperature << ", top_k " << sampling_.top_k << (cut ? "; cut short by an interrupt" : "") << ")\n"
      << text << "\n";
  log().info("sample ({} tokens, temperature {}): {}", sampling_.tokens, sampling_.temperature,
             printable_text(text.size() > 400 ? text.substr(0, 400) + " ..." : text));
}

std::string TransformerLM::describe() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return detail::cat("transformer LM: ", n, " parameters (", s_.to_string(), ")");
}

// ---------------------------------------------------------------- options

namespace {
// The shape's checks that need no data, run when the pipeline is read (the factory adds those
// against the tokenizer and the data's seq_len).
void check_shape(const Options& o) {
  const auto a = o.to<ModelOptions>();
  if (a.target_params) {
    for (const char* k : {"d_model", "n_layers", "n_heads", "d_ff"})
      o.check(!o.is_set(k), k, "cannot be set together with target_params (which picks the shape); drop one");
    return;
  }
  const int64_t d_model = a.d_model.value_or(Shape{}.d_model), n_heads = a.n_heads.value_or(heads_for(d_model));
  o.check(d_model % n_heads == 0, "n_heads", detail::cat("(", n_heads, ") must divide d_model (", d_model, ")"));
  o.check(a.positions == "learned" || (d_model / n_heads) % 2 == 0, "positions",
          "rotary needs an even head dimension (d_model / n_heads)");
}
}  // namespace

Schema model_schema() {
  const Shape base;  // d_model's and n_layers' defaults when neither they nor target_params are set
  return Schema()
      .field("target_params", &ModelOptions::target_params, std::nullopt,
             "pick d_model, n_layers, n_heads, d_ff for about this many parameters")
      .range(gt(0))
      .field("d_model", &ModelOptions::d_model, std::nullopt, detail::cat("width (default ", base.d_model, ")"))
      .range(ge(1))
      .field("n_layers", &ModelOptions::n_layers, std::nullopt, detail::cat("blocks (default ", base.n_layers, ")"))
      .range(ge(1))
      .field("n_heads", &ModelOptions::n_heads, std::nullopt,
             "attention heads (default: heads of 64 dimensions, 32 below d_model 256)")
      .range(ge(1))
      .architecture()
      .field("d_ff", &ModelOptions::d_ff, std::nullopt, "MLP hidden size (default 4 d_model)").range(ge(1))
      .field("seq_len", &ModelOptions::seq_len, std::nullopt, "longest context (default: the data's seq_len)")
      .range(ge(1))
      .field("vocab", &ModelOptions::vocab, std::nullopt, "vocabulary size (default: the tokenizer's)").range(ge(1))
      .field("positions", &ModelOptions::positions, "learned", "learned or rotary position encoding")
      .choices({"learned", "rotary"})
      .field("tie_embeddings", &ModelOptions::tie_embeddings, true, "the output layer shares the token embedding")
      .field("norm", &ModelOptions::norm, "layernorm", "LayerNorm or RMSNorm").choices({"layernorm", "rmsnorm"})
      .field("bias", &ModelOptions::bias, true, "biases in the Linear layers")
      .field("dropout", &ModelOptions::dropout, 0.0,
             "dropout on embeddings, attention probabilities, residual branches")
      .range(ge(0), lt(1))
      .field("sample_prompt", &ModelOptions::sample_prompt, "The ",
             "text sampled at the end of training starts with this")
      .field("sample_tokens", &ModelOptions::sample_tokens, 200, "tokens sampled at the end (0: none)").range(ge(0))
      .field("temperature", &ModelOptions::temperature, 0.8, "sampling temperature (0: greedy)").range(ge(0))
      .field("top_k", &ModelOptions::top_k, 40, "sample among the k most likely tokens (0: all)").range(ge(0))
      .validate(check_shape);
}

std::shared_ptr<Model> make_model(const Options& o, const Datasets& data) {
  auto text = std::dynamic_pointer_cast<TextStream>(data.train);
  TT_CHECK_AS(ConfigError, text, "model (transformer) needs a text dataset (data: {name: text, train: FILES}); "
              "this dataset is not one");
  const auto a = o.to<ModelOptions>();
  Shape s;
  const int64_t data_vocab = text->tokenizer().vocab_size();
  const int64_t data_seq = text->options().seq_len;
  s.vocab = a.vocab.value_or(data_vocab);
  o.check(s.vocab >= data_vocab, "vocab",
          detail::cat("(", s.vocab, ") is smaller than the tokenizer's vocabulary (", data_vocab, ", ",
                      text->tokenizer().describe(), "): leave it unset to take the tokenizer's"));
  s.seq_len = a.seq_len.value_or(data_seq);
  o.check(data_seq <= s.seq_len, "seq_len",
          detail::cat("(", s.seq_len, ") is smaller than the data's seq_len (", data_seq,
                      "): windows would not fit the model's context; make them equal or leave the model's unset"));
  s.learned_positions = a.positions == "learned";
  s.tie_embeddings = a.tie_embeddings;
  s.rms_norm = a.norm == "rmsnorm";
  s.bias = a.bias;
  s.dropout = a.dropout;

  if (a.target_params) {  // the shape's own checks ran when the options were read (check_shape)
    const int64_t target = *a.target_params;
    const auto picked = shape_for_parameters(target, s);
    o.check(picked.has_value(), "target_params",
            detail::cat(target, " is out of reach for vocab ", s.vocab, " and seq_len ", s.seq_len,
                        " (the embeddings alone are larger, or the target is huge)"));
    s = *picked;
    log().info("transformer: target_params {} -> {} parameters ({})", target, count_parameters(s), s.to_string());
  } else {
    s.d_model = a.d_model.value_or(s.d_model);
    s.n_layers = a.n_layers.value_or(s.n_layers);
    s.n_heads = a.n_heads.value_or(heads_for(s.d_model));
    s.d_ff = a.d_ff.value_or(4 * s.d_model);
  }
  Sampling sampling{};
  sampling.tokens = a.sample_tokens;
  sampling.temperature = a.temperature;
  sampling.top_k = a.top_k;
  return std::make_shared<TransformerLM>(s, text->tokenizer_ptr(), sampling, a.sample_prompt);
}

}  // namespace tt::lm
