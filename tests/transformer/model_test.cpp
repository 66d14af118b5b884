// The transformer LM: causality, parameter counts and sizing, training through tt's trainer
// on a text stream (learning, bitwise resume of the stream, memory estimate vs meter),
// sampling, the errors a user meets first, its output head (extension point 10) and building a
// finished run's model again (tt::load_model).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "test_support.h"
#include "text_stream.h"
#include "tokenizer.h"
#include "transformer_model.h"
#include "tt/dataset.h"
#include "tt/error.h"
#include "tt/extension.h"
#include "tt/log.h"
#include "tt/nn.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/runtime.h"
#include "tt/trainer.h"
#include "tt/weights.h"

namespace fs = std::filesystem;
using tt::lm::Shape;
using tt::lm::TransformerLM;

namespace {

// The model and dataset in-process (the .so is the same code behind hidden symbols).
void register_lm() {
  static bool done = [] {
    auto& r = tt::Registry::global();
    r.add_model("transformer", "test", tt::lm::model_schema(), &tt::lm::make_model);
    r.add_dataset("text", "test", tt::lm::text_schema(), &tt::lm::make_text);
    return true;
  }();
  (void)done;
}

Shape small_shape() {
  Shape s;
  s.vocab = 50;
  s.d_model = 32;
  s.n_layers = 2;
  s.n_heads = 4;
  s.d_ff = 64;
  s.seq_len = 16;
  return s;
}

int64_t numel_of(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// Text with structure a small LM learns quickly (a short vocabulary of repeated phrases).
fs::path write_corpus(const fs::path& dir, const std::string& name, int lines, uint32_t seed) {
  static const char* words[] = {"the cat", "sat on", "a mat", "and the", "dog ran", "to the", "park", "today"};
  std::mt19937 rng(seed);
  fs::create_directories(dir);
  std::ofstream out(dir / name);
  for (int i = 0; i < lines; ++i) {
    for (int w = 0; w < 6; ++w) out << (w ? " " : "") << words[rng() % 8];
    out << ".\n";
  }
  return dir / name;
}

const char* kSmall = "d_model: 32, n_layers: 2, n_heads: 2";

std::string lm_yaml(const fs::path& dir, const std::string& trainer_extra, const std::string& model = kSmall,
                    const std::string& data_extra = "") {
  std::ostringstream y;
  y << "name: lm-test\nseed: 1\n"
    << "data: {name: text, train: " << (dir / "train.txt").string() << ", validation: " << (dir / "val.txt").string()
    << (data_extra.find("seq_len") == std::string::npos ? ", seq_len: 32" : "")  // a key once per map
    << ", shuffle_buffer: 64, chunk_bytes: 4096" << data_extra << "}\n"
    << "model: {name: transformer, sample_tokens: 20, " << model << "}\n"
    << "optimizer: {name: adamw, lr: 0.003}\n"
    << "trainer:\n  batch_size: 8\n  threads: 1\n  progress: off\n" << trainer_extra
    << "output:\n  dir: " << dir.string() << "\n  plots: false\n";
  return y.str();
}

class StopAt : public tt::Plugin {
 public:
  explicit StopAt(int64_t step) : step_(step) {}
  void on(tt::Event e, tt::State& s) override {
    if (e == tt::Event::AFTER_STEP && s.step == step_) tt::request_interrupt();
  }

 private:
  int64_t step_;
};

}  // namespace

TEST(TransformerLM, IsCausal) {
  for (bool learned : {true, false}) {
    torch::manual_seed(0);
    Shape s = small_shape();
    s.learned_positions = learned;
    TransformerLM m(s, nullptr, {}, "");
    m.eval();
    torch::NoGradGuard ng;
    auto ids = torch::randint(0, s.vocab, {2, s.seq_len}, torch::kLong);
    auto a = m.logits(ids);
    const int64_t t = 6;
    auto changed = ids.clone();
    changed.slice(1, t + 1) = (changed.slice(1, t + 1) + 1) % s.vocab;  // every token after t
    auto b = m.logits(changed);
    EXPECT_TRUE(torch::allclose(a.slice(1, 0, t + 1), b.slice(1, 0, t + 1), 1e-5, 1e-6))
        << (learned ? "learned" : "rotary") << ": logits up to t changed when only later tokens did";
    EXPECT_FALSE(torch::allclose(a.slice(1, t + 1), b.slice(1, t + 1), 1e-5, 1e-6));
  }
}

TEST(TransformerLM, ParameterCountIsExact) {
  for (int variant = 0; variant < 5; ++variant) {
    Shape s = small_shape();
    if (variant == 1) s.tie_embeddings = false;
    if (variant == 2) s.learned_positions = false;
    if (variant == 3) s.rms_norm = true;
    if (variant == 4) s.bias = false;
    TransformerLM m(s, nullptr, {}, "");
    EXPECT_EQ(tt::lm::count_parameters(s), numel_of(m)) << "variant " << variant;
  }
}

TEST(TransformerLM, TargetParamsPicksAShapeOfThatSize) {
  for (int64_t target : {200'000LL, 1'000'000LL, 10'000'000LL, 100'000'000LL}) {
    Shape base = small_shape();
    base.vocab = 1024;
    base.seq_len = 256;
    const auto picked = tt::lm::shape_for_parameters(target, base);
    ASSERT_TRUE(picked.has_value()) << target;
    const Shape s = *picked;
    const double ratio = static_cast<double>(tt::lm::count_parameters(s)) / static_cast<double>(target);
    EXPECT_NEAR(ratio, 1.0, 0.06) << target << ": " << s.to_string();
    EXPECT_EQ(s.d_model % s.n_heads, 0);
    if (target >= 1000000) {
      EXPECT_GE(s.n_layers, 2) << s.to_string();
    }
    EXPECT_EQ(s.d_ff, 4 * s.d_model);
  }
  // through the pipeline, the model reports the exact count it built
  register_lm();
  auto dir = tt::test::temp_dir("lm-target");
  write_corpus(dir, "train.txt", 200, 1);
  write_corpus(dir, "val.txt", 20, 2);
  auto p = tt::parse_pipeline(lm_yaml(dir, "  max_steps: 1\n", "target_params: 300000"),
                              "p.yaml");
  tt::Trainer t(p, {dir / "run", false, true});
  t.fit();
  const int64_t n = numel_of(*t.state().model);
  EXPECT_NEAR(static_cast<double>(n) / 300000.0, 1.0, 0.06);
  EXPECT_NE(t.state().model->describe().find(std::to_string(n) + " parameters"), std::string::npos);
}

TEST(TransformerLM, LearnsAndSamples) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-learn");
  write_corpus(dir, "train.txt", 600, 1);
  write_corpus(dir, "val.txt", 60, 2);
  auto p = tt::parse_pipeline(lm_yaml(dir, "  max_steps: 150\n"), "p.yaml");
  tt::Trainer t(p, {dir / "run", false, true});
  t.fit();
  const auto& losses = t.step_losses();
  ASSERT_EQ(losses.size(), 150u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.3);  // uniform over bytes at the start
  auto summary = nlohmann::json::parse(t.summary_json());
  const double bpc = summary["validation"]["val_bits_per_char"].get<double>();
  // 8 phrases: a model that learned the phrases is far below the 8 bits of uniform bytes
  EXPECT_LT(bpc, 2.5) << summary.dump();
  EXPECT_LT(losses.back(), 0.5 * losses.front());
  // greedy sampling is deterministic and continues the prompt with text it was trained on
  tt::GenerateOptions g;
  g.tokens = 30;
  g.temperature = 0;
  const std::string a = t.generate("the cat", g), b = t.generate("the cat", g);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.rfind("the cat", 0), 0u);
  EXPECT_GT(a.size(), std::string("the cat").size());
  g.temperature = 1.0;
  g.top_k = 1;  // top-1 sampling is greedy
  EXPECT_EQ(t.generate("the cat", g), a);
  EXPECT_TRUE(fs::exists(dir / "run" / "samples.txt"));
}

TEST(TransformerLM, AVocabularyPaddedPastTheTokenizersSamplesOnlyItsIds) {
  // model.vocab above the tokenizer's (nanoGPT pads GPT-2's 50257 to 50304): the rows past the
  // 256 bytes are never a target, and sampling draws among the tokenizer's ids only
  register_lm();
  auto dir = tt::test::temp_dir("lm-padded-vocab");
  write_corpus(dir, "train.txt", 100, 11);
  write_corpus(dir, "val.txt", 10, 12);
  auto p = tt::parse_pipeline(lm_yaml(dir, "  max_steps: 1\n", std::string(kSmall) + ", vocab: 512"), "p.yaml");
  tt::Trainer t(p, {dir / "run", false, true});
  t.fit();
  tt::GenerateOptions g;
  g.tokens = 200;  // untrained: half the mass on the 256 padded rows, which every draw would near surely hit
  g.temperature = 1.0;
  g.top_k = 0;
  g.seed = 3;
  const std::string text = t.generate("", g);
  EXPECT_EQ(text.size(), 200u);  // one byte per token: none was dropped or refused
}

TEST(TransformerLM, ResumeContinuesTheStreamBitwise) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-resume");
  write_corpus(dir, "train.txt", 120, 3);  // several 4 KiB chunks; ~ 3 epochs in 40 steps of 8 windows
  write_corpus(dir, "val.txt", 20, 4);
  const std::string yaml = lm_yaml(dir, "  max_steps: 40\n");
  tt::Trainer straight(tt::parse_pipeline(yaml, "p.yaml"), {dir / "straight", false, true});
  straight.fit();
  ASSERT_GE(straight.state().epoch, 1) << "the test wants an epoch boundary after the resume point";

  tt::Trainer first(tt::parse_pipeline(yaml, "p.yaml"), {dir / "split", false, true});
  first.add_plugin(std::make_unique<StopAt>(7));
  EXPECT_THROW(first.fit(), tt::Interrupted);
  tt::clear_interrupt();
  tt::Trainer resumed(tt::Trainer::pipeline_of_run(dir / "split", {}), {dir / "split", true, true});
  resumed.add_plugin(std::make_unique<StopAt>(-1));
  resumed.fit();
  std::vector<double> joined = first.step_losses();
  joined.insert(joined.end(), resumed.step_losses().begin(), resumed.step_losses().end());
  ASSERT_EQ(joined.size(), straight.step_losses().size());
  for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], straight.step_losses()[i]) << "step " << i + 1;
}

TEST(TransformerLM, MemoryEstimateMatchesTheMeter) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-memory");
  write_corpus(dir, "train.txt", 400, 5);
  write_corpus(dir, "val.txt", 20, 6);
  // A shape where activations dominate, as on real runs: seq 128, d 64, 2 layers, batch 8.
  auto p = tt::parse_pipeline(lm_yaml(dir, "  max_steps: 2\n", "d_model: 64, n_layers: 2, n_heads: 4", ", seq_len: 128"), "p.yaml");
  tt::Trainer t(p, {dir / "run", false, true});
  t.fit();
  auto s = nlohmann::json::parse(t.summary_json());
  const auto& m = s["memory"];
  const auto& e = s["memory_estimate"];
  // Parameters, their gradients and AdamW's two moments are float32 tensors of the
  // parameters' shapes: both the estimate and the meter must give these bytes exactly.
  int64_t param_bytes = 0;
  for (const auto& prm : t.state().model->parameters()) {
    ASSERT_TRUE(prm.requires_grad());
    param_bytes += prm.numel() * static_cast<int64_t>(sizeof(float));
  }
  const std::map<std::string, int64_t> exact = {
      {"parameters_bytes", param_bytes}, {"gradients_bytes", param_bytes}, {"optimizer_state_bytes", 2 * param_bytes}};
  for (const auto& [k, bytes] : exact) {
    EXPECT_EQ(e[k].get<int64_t>(), bytes) << "estimate of " << k;
    EXPECT_EQ(m[k].get<int64_t>(), bytes) << "measured " << k;
  }
  const double act = m["activations_bytes"].get<double>(), act_est = e["activations_bytes"].get<double>();
  EXPECT_NEAR(act_est / act, 1.0, 0.5) << "activations: estimate " << act_est << ", measured " << act;
}

TEST(TransformerLM, ClearErrorsForMismatchedSettings) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-errors");
  write_corpus(dir, "train.txt", 100, 7);
  write_corpus(dir, "val.txt", 10, 8);
  auto fails_with_model = [&](const std::string& model, const std::string& data_extra, const std::string& needle) {
    try {  // a value out of its range or choices is refused as the pipeline is parsed
      auto p = tt::parse_pipeline(lm_yaml(dir, "  max_steps: 1\n", model, data_extra), "p.yaml");
      tt::Trainer t(p, {dir / "run-err", false, true});
      t.fit();
      ADD_FAILURE() << "no error for " << model << data_extra;
    } catch (const tt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto fails_with = [&](const std::string& model_extra, const std::string& data_extra, const std::string& needle) {
    fails_with_model(std::string(kSmall) + model_extra, data_extra, needle);
  };
  fails_with(", seq_len: 16", "", "(transformer).seq_len (16) is smaller than the data's seq_len (32)");
  fails_with(", vocab: 100", "", "smaller than the tokenizer's vocabulary");
  fails_with_model("d_model: 32, n_layers: 2, n_heads: 3", "", "must divide d_model");
  fails_with(", target_params: 100000", "", "cannot be set together with target_params");
  fails_with(", positions: alibi", "", "(transformer).positions must be one of learned | rotary, got 'alibi'");
  fails_with(", dropout: 1", "", "(transformer).dropout must be in [0, 1), got 1");
  fails_with(", target_params: 0", "", "(transformer).target_params must be > 0, got 0");
  fails_with_model("target_params: 10", "", "(transformer).target_params 10 is out of reach for vocab 256 and seq_len");
  fs::path bad_model = dir / "broken.model";
  std::ofstream(bad_model) << "not a sentencepiece model";
  fails_with("", ", tokenizer: " + bad_model.string(), bad_model.string());
  fails_with("", ", tokenizer: " + (dir / "missing.model").string(), "missing.model");
}

TEST(TransformerLM, NonLanguageModelsRefuseToSample) {
  auto dir = tt::test::temp_dir("lm-topic-sample");
  tt::Trainer t(tt::parse_pipeline(tt::test::topic_yaml(dir, "  max_steps: 1\n"), "p.yaml"), {dir / "run", false, true});
  t.fit();
  EXPECT_THROW(t.generate("x", {}), tt::ConfigError);
}

TEST(TransformerLM, TtRunSamplesFromAFinishedRunWithoutTouchingItEvenWithItsTextGrown) {
  auto dir = tt::test::temp_dir("lm-ttrun-sample");
  write_corpus(dir, "train.txt", 200, 9);
  write_corpus(dir, "val.txt", 20, 10);
  {
    std::ofstream(dir / "p.yaml") << lm_yaml(dir, "  max_steps: 5\n");
  }
  const std::string run = (dir / "run").string();
  auto r = tt::test::run(tt::test::tt_run_bin() + " " + (dir / "p.yaml").string() + " --run-dir " + run + " -q");
  ASSERT_EQ(r.rc, 0) << r.output;
  const std::string summary = tt::test::read_file(dir / "run" / "summary.json");
  for (const auto& line : tt::test::step_lines(dir / "run" / "metrics.jsonl")) {  // tokens/s: 32 a window
    const auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("items_per_s")) << line;
    EXPECT_NEAR(j["items_per_s"].get<double>(), 32 * j["samples_per_s"].get<double>(),
                1e-9 * j["items_per_s"].get<double>()) << line;
  }
  r = tt::test::run(tt::test::tt_run_bin() + " --resume " + run +
                    " --sample 'the cat' --tokens 12 --temperature 0");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("the cat"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("complete at step 5"), std::string::npos) << r.output;
  EXPECT_EQ(tt::test::read_file(dir / "run" / "summary.json"), summary);  // the finished run is left alone
  EXPECT_NE(tt::test::read_file(dir / "run" / "samples.txt").find("--- prompt: the cat"), std::string::npos);
  // the training text grown since: the finished run's model samples the same (its stream's
  // position is a resume's, and nothing is trained)
  std::ofstream(dir / "train.txt", std::ios::app) << "one more line\n";
  auto again = tt::test::run(tt::test::tt_run_bin() + " --resume " + run + " --sample 'the cat' --tokens 12 --temperature 0");
  ASSERT_EQ(again.rc, 0) << again.output;
  const auto sample_of = [](const std::string& out) {
    const size_t at = out.find("sample:\nthe cat");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at + 8) - at);
  };
  EXPECT_FALSE(sample_of(r.output).empty()) << r.output;
  EXPECT_EQ(sample_of(again.output), sample_of(r.output)) << again.output;
  // a run bounded by its epochs, whose text grew by more than a batch: an epoch would now be
  // longer, but the completed run is used as it is
  const fs::path ep = dir / "ep";
  write_corpus(ep, "train.txt", 40, 12);
  write_corpus(ep, "val.txt", 10, 13);
  std::ofstream(ep / "p.yaml") << lm_yaml(ep, "  epochs: 1\n");
  auto by_epochs = tt::test::run(tt::test::tt_run_bin() + " " + (ep / "p.yaml").string() + " -q --run-dir " + (ep / "run").string());
  ASSERT_EQ(by_epochs.rc, 0) << by_epochs.output;
  { std::ofstream(ep / "train.txt", std::ios::app) << tt::test::read_file(write_corpus(ep, "more.txt", 40, 14)); }
  by_epochs = tt::test::run(tt::test::tt_run_bin() + " --resume " + (ep / "run").string() + " --sample 'the cat' --tokens 5");
  ASSERT_EQ(by_epochs.rc, 0) << by_epochs.output;
  EXPECT_NE(by_epochs.output.find("nothing to train"), std::string::npos) << by_epochs.output;
  // bad sampling options are a command-line error
  r = tt::test::run(tt::test::tt_run_bin() + " --resume " + run + " --sample x --tokens 0 -q");
  EXPECT_EQ(r.rc, 2) << r.output;
}

namespace {
tt::Batch random_batch(const Shape& s, int64_t rows) {
  tt::Batch b;
  b.tensors["input"] = torch::randint(0, s.vocab, {rows, s.seq_len}, torch::kLong);
  b.tensors["target"] = torch::randint(0, s.vocab, {rows, s.seq_len}, torch::kLong);
  b.size = rows;
  return b;
}

std::vector<at::Tensor> trainable(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// Cross-entropy over the output head's rows, `chunk` rows' logits at a time, as a chunked loss
// computes it: the mean over all rows.
at::Tensor chunked_loss(const tt::OutputHead& h, int64_t chunk) {
  const int64_t n = h.hidden.size(0);
  at::Tensor total = torch::zeros({}, h.hidden.options());
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t e = std::min(n, i + chunk);
    total = total + torch::nn::functional::cross_entropy(
                        h.project(h.hidden.slice(0, i, e)), h.target.slice(0, i, e),
                        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  }
  return total / static_cast<double>(n);
}

// The text dataset over one file, as a pipeline's data section would give it.
tt::Datasets text_data(const fs::path& train, int64_t seq_len, const std::string& tokenizer = "bytes") {
  const std::string yaml =
      "train: [" + train.string() + "]\nseq_len: " + std::to_string(seq_len) + "\ntokenizer: " + tokenizer;
  return tt::lm::make_text(tt::Options::parse(YAML::Load(yaml), tt::lm::text_schema(), "data", "s.yaml", {"name"}), 1);
}

// Adds x A^T to a Linear's output (what LoRA's adapter does, with one matrix).
struct ProductAdapter : tt::nn::LinearAdapter {
  ProductAdapter(int64_t in, int64_t out) { a = register_parameter("a", torch::randn({out, in}) * 0.1); }
  at::Tensor forward(const at::Tensor& x) override { return x.matmul(a.t()); }
  at::Tensor a;
};

// A loss hook that computes the LM's loss from its output head, 7 rows at a time.
class ChunkedHeadLoss : public tt::Plugin {
 public:
  void on(tt::Event e, tt::State& s) override {
    if (e != tt::Event::INIT) return;
    tt::State* st = &s;
    tt::add_loss_hook(s, [this, st](const tt::Batch& b, const std::function<tt::ModelOutput(const tt::Batch&)>&) {
      ++calls;
      const tt::OutputHead h = st->model->output_head(b);
      tt::ModelOutput o;
      o.loss = chunked_loss(h, 7);
      o.reduction = h.reduction;
      o.items = h.items;
      return o;
    });
  }
  int calls = 0;
};
}  // namespace

TEST(TransformerLM, OutputHeadGivesTheModelsLossAndGradientsAFewRowsAtATime) {
  for (int variant = 0; variant < 3; ++variant) {  // tied head, its own head, its own head with an adapter
    torch::manual_seed(0);
    Shape s = small_shape();
    s.tie_embeddings = variant == 0;
    TransformerLM m(s, nullptr, {}, "");
    auto head = std::dynamic_pointer_cast<tt::nn::LinearImpl>(m.named_children()["head"]);
    if (variant == 2) head->add_adapter("product", std::make_shared<ProductAdapter>(s.d_model, s.vocab));
    const tt::Batch b = random_batch(s, 3);
    const std::vector<at::Tensor> params = trainable(m);
    const at::Tensor ref = m.forward_loss(b).loss;
    const std::vector<at::Tensor> gref = torch::autograd::grad({ref}, params);

    const tt::OutputHead h = m.output_head(b);
    ASSERT_EQ(h.hidden.sizes(), (std::vector<int64_t>{3 * s.seq_len, s.d_model})) << "variant " << variant;
    ASSERT_TRUE(torch::equal(h.target, b.at("target").reshape({-1})));
    const auto named = m.named_parameters();
    EXPECT_TRUE(h.weight.is_same(named[variant == 0 ? "tok.weight" : "head.weight"])) << "variant " << variant;
    EXPECT_FALSE(h.bias.defined());
    EXPECT_EQ(h.items, 3 * s.seq_len);
    EXPECT_EQ(h.plain, variant != 2);
    const at::Tensor logits = h.project(h.hidden), product = h.hidden.matmul(h.weight.t());
    EXPECT_EQ(torch::allclose(logits, product, 1e-5, 1e-6), variant != 2) << "variant " << variant;
    EXPECT_TRUE(torch::allclose(logits.view({3, s.seq_len, s.vocab}), m.logits(b.at("input")), 1e-6, 1e-7));

    const at::Tensor loss = chunked_loss(h, 10);  // 48 rows: 4 chunks of 10 and one of 8
    EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-6) << "variant " << variant;
    const std::vector<at::Tensor> g = torch::autograd::grad({loss}, params);
    ASSERT_EQ(g.size(), gref.size());
    // alike to float32 rounding of sums taken in another order (a chunk left out or counted twice
    // would be off by a fifth): within 1e-5 of the largest entry of the parameter's gradient
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_TRUE(torch::allclose(g[i], gref[i], 1e-5, 1e-5 * gref[i].abs().max().item<double>()))
          << "variant " << variant << ", parameter " << i << ": max |diff| " << (g[i] - gref[i]).abs().max().item<double>()
          << " of max |g| " << gref[i].abs().max().item<double>();
  }
}

TEST(TransformerLM, ALossHookOverTheOutputHeadTrainsAsTheModelsOwnLoss) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-head-hook");
  write_corpus(dir, "train.txt", 120, 11);
  write_corpus(dir, "val.txt", 20, 12);
  const std::string yaml = lm_yaml(dir, "  max_steps: 4\n");
  tt::Trainer plain(tt::parse_pipeline(yaml, "p.yaml"), {dir / "plain", false, true});
  plain.fit();
  tt::Trainer hooked(tt::parse_pipeline(yaml, "p.yaml"), {dir / "hooked", false, true});
  auto plugin = std::make_unique<ChunkedHeadLoss>();
  ChunkedHeadLoss* seen = plugin.get();
  hooked.add_plugin(std::move(plugin));
  hooked.fit();
  EXPECT_EQ(seen->calls, 4);  // one micro-batch a step: the hook computed every step's loss
  ASSERT_EQ(hooked.step_losses().size(), plain.step_losses().size());
  for (size_t i = 0; i < plain.step_losses().size(); ++i)
    EXPECT_NEAR(hooked.step_losses()[i], plain.step_losses()[i], 1e-5 * plain.step_losses()[i]) << "step " << i + 1;
}

TEST(TransformerLM, LoadModelBuildsARunsModelOverOtherDataWithTheShapeItsCheckpointRecords) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-load-model");
  const fs::path train = write_corpus(dir, "train.txt", 120, 13);
  write_corpus(dir, "val.txt", 20, 14);
  // The run's model takes seq_len 32 from its data (the model's own is left unset).
  tt::Trainer run(tt::parse_pipeline(lm_yaml(dir, "  max_steps: 2\n  checkpoint_every: 2\n"), "p.yaml"),
                  {dir / "teacher", false, true});
  run.fit();
  const auto parse_data = [&](int64_t seq_len) { return text_data(train, seq_len); };
  const tt::Datasets other = parse_data(16), own = parse_data(32);
  const auto same_weights = [&](tt::Model& m) {
    const auto want = run.state().model->named_parameters();
    const auto got = m.named_parameters();
    if (got.size() != want.size()) return false;
    for (const auto& p : want)
      if (!got.contains(p.key()) || !torch::equal(got[p.key()], p.value())) return false;
    return true;
  };

  auto m = tt::load_model((dir / "teacher").string(), other, "plugins.distill.teacher");
  auto* lm = dynamic_cast<TransformerLM*>(m.get());
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(lm->shape().seq_len, 32) << "the checkpoint's shape, not the one the other data would derive";
  EXPECT_TRUE(same_weights(*m));
  const fs::path ckpt = dir / "teacher" / "checkpoints" / "step-00000002.pt";
  ASSERT_TRUE(fs::exists(ckpt));
  EXPECT_TRUE(same_weights(*tt::load_model(ckpt.string(), other, "teacher")));

  // A checkpoint that records only the weights (as tt wrote them before) takes its run's
  // pipeline.yaml: over the other data the derived seq_len does not fit the weights.
  fs::create_directories(dir / "old" / "checkpoints");
  fs::copy_file(dir / "teacher" / "pipeline.yaml", dir / "old" / "pipeline.yaml");
  {
    torch::serialize::OutputArchive ar, model_ar;
    run.state().model->save(model_ar);
    ar.write("model", model_ar);
    ar.save_to((dir / "old" / "checkpoints" / "step-00000002.pt").string());
  }
  std::string msg = tt::test::config_error([&] { tt::load_model((dir / "old").string(), other, "teacher"); });
  EXPECT_EQ(msg.rfind("teacher: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("pos.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("give it the data it was trained on"), std::string::npos) << msg;
  EXPECT_TRUE(same_weights(*tt::load_model((dir / "old").string(), own, "teacher")));

  // The checkpoints/ directory itself is as good as its run directory.
  EXPECT_TRUE(same_weights(*tt::load_model((dir / "teacher" / "checkpoints").string(), other, "teacher")));
  // A model that does not fit the data it is built over says which model and why.
  msg = tt::test::config_error([&] { tt::load_model((dir / "teacher").string(), parse_data(64), "teacher"); });
  EXPECT_EQ(msg.rfind("teacher: the model (transformer) of " + ckpt.string() + " cannot be built over this run's data", 0),
            0u) << msg;
  EXPECT_NE(msg.find("smaller than the data's seq_len (64)"), std::string::npos) << msg;
  // the options come from the checkpoint's record, which has no line and column worth naming
  EXPECT_NE(msg.find("cannot be built over this run's data: the checkpoint's model options: model.seq_len"),
            std::string::npos) << msg;
  EXPECT_EQ(msg.find(ckpt.string() + ":"), std::string::npos) << msg;

  // What cannot give a model says what would.
  msg = tt::test::config_error([&] { tt::load_model((dir / "teacher" / "pipeline.yaml").string(), own, "teacher"); });
  EXPECT_NE(msg.find("is not a checkpoint: give a run directory or one of its checkpoints"), std::string::npos) << msg;
  msg = tt::test::config_error([&] { tt::load_model((dir / "nowhere").string(), own, "teacher"); });
  EXPECT_NE(msg.find("does not exist (give a run directory or one of its checkpoint files)"), std::string::npos) << msg;
  fs::create_directories(dir / "empty");
  msg = tt::test::config_error([&] { tt::load_model((dir / "empty").string(), own, "teacher"); });
  EXPECT_NE(msg.find("has no checkpoints"), std::string::npos) << msg;
  tt::write_safetensors(dir / "w.safetensors", tt::module_tensors(*run.state().model));
  msg = tt::test::config_error([&] { tt::load_model((dir / "w.safetensors").string(), own, "teacher"); });
  EXPECT_NE(msg.find("holds weights but not the model's options"), std::string::npos) << msg;
}

TEST(TransformerLM, LoadModelTakesTheNewestReadableCheckpointAndRefusesAnotherTokenizer) {
  register_lm();
  if (const std::string why = tt::lm::sentencepiece_unavailable(); !why.empty()) GTEST_SKIP() << why;
  auto dir = tt::test::temp_dir("lm-load-newest");
  const fs::path train = write_corpus(dir, "train.txt", 200, 15);
  write_corpus(dir, "val.txt", 20, 16);
  tt::Trainer run(tt::parse_pipeline(lm_yaml(dir, "  max_steps: 2\n  checkpoint_every: 1\n"), "p.yaml"),
                  {dir / "teacher", false, true});
  run.fit();
  const auto data = [&](const std::string& tokenizer) { return text_data(train, 32, tokenizer); };
  const tt::Datasets bytes = data("bytes");
  // The newest checkpoint cut short: the one before it is taken (with a warning in the log).
  const fs::path dir_ckpt = dir / "teacher" / "checkpoints";
  const fs::path step1 = dir_ckpt / "step-00000001.pt", step2 = dir_ckpt / "step-00000002.pt";
  ASSERT_TRUE(fs::exists(step1) && fs::exists(step2));
  const tt::NamedTensors first = tt::checkpoint_model_tensors(step1);
  fs::resize_file(step2, fs::file_size(step2) / 2);
  auto m = tt::load_model((dir / "teacher").string(), bytes, "teacher");
  const auto got = m->named_parameters();
  ASSERT_FALSE(first.empty());
  for (const auto& [name, t] : first) {
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_TRUE(torch::equal(got[name], t)) << name << " is not step 1's";
  }

  // A SentencePiece tokenizer of 30 pieces fits the model's vocabulary of 256 but gives its ids
  // other meanings: refused by load_model and by model.init_from.
  tt::lm::TokenizerTraining t;
  t.inputs = {train.string()};
  t.vocab_size = 30;
  t.byte_fallback = false;
  t.out = (dir / "sp.model").string();
  tt::lm::train_sentencepiece(t);
  std::string msg = tt::test::config_error([&] { tt::load_model((dir / "teacher").string(), data(t.out), "teacher"); });
  EXPECT_EQ(msg.rfind("teacher: the model of " + step1.string() + " was trained on data that gives tokenizer bytes; "
                      "this run's data gives tokenizer sentencepiece (bpe, 30) ", 0),
            0u)
      << msg;
  EXPECT_NE(msg.find("data.tokenizer"), std::string::npos) << msg;
  const std::string student = lm_yaml(dir, "  max_steps: 1\n", std::string(kSmall) + ", vocab: 256, init_from: " +
                                       (dir / "teacher").string(), ", tokenizer: " + t.out);
  msg = tt::test::config_error([&] {
    tt::Trainer s(tt::parse_pipeline(student, "student.yaml"), {dir / "student", false, true});
    s.fit();
  });
  EXPECT_NE(msg.find(".init_from"), std::string::npos) << msg;
  EXPECT_NE(msg.find("was trained on data that gives tokenizer bytes; this run's data gives tokenizer sentencepiece"),
            std::string::npos) << msg;

  // A safetensors export records the model as the checkpoint does: the other tokenizer is refused
  // from it too, and so is another n_heads (the same tensors split into other heads, which their
  // shapes do not show). A state dict records nothing: it loads, with a warning that says so.
  const fs::path st = dir / "t.safetensors", sd = dir / "t.pt";
  tt::write_weights(st, tt::WeightsFormat::Safetensors, first, tt::read_model_record(step1));
  tt::write_weights(sd, tt::WeightsFormat::StateDict, first, tt::read_model_record(step1));
  EXPECT_FALSE(tt::read_model_record(st).empty());
  EXPECT_TRUE(tt::read_model_record(sd).empty());
  const auto start = [&](const std::string& model, const std::string& data_extra, const std::string& tag) {
    return tt::test::refusal_of([&] {
      tt::Trainer s(tt::parse_pipeline(lm_yaml(dir, "  max_steps: 1\n", model, data_extra), tag + ".yaml"),
                    {dir / tag, false, true});
      s.fit();
    });
  };
  msg = start(std::string(kSmall) + ", vocab: 256, init_from: " + st.string(), ", tokenizer: " + t.out, "from-st-sp");
  EXPECT_HAS(msg, st.string() + "'s model was trained on data that gives tokenizer bytes; this run's data gives "
                  "tokenizer sentencepiece");
  msg = start("d_model: 32, n_layers: 2, n_heads: 4, init_from: " + st.string(), "", "from-st-heads");
  EXPECT_HAS(msg, st.string() + "'s model was trained with model.n_heads = 2, and this run's is 4: its weights would "
                  "mean other things here");
  msg = start("d_model: 32, n_layers: 2, n_heads: 4, init_from: " + (dir / "teacher").string(), "", "from-run-heads");
  EXPECT_HAS(msg, "was trained with model.n_heads = 2, and this run's is 4");
  std::ostringstream said;
  tt::log().sinks().push_back(std::make_shared<spdlog::sinks::ostream_sink_mt>(said));
  msg = start(std::string(kSmall) + ", vocab: 256, init_from: " + sd.string(), ", tokenizer: " + t.out, "from-sd-sp");
  tt::log().sinks().pop_back();
  EXPECT_EQ(msg, "") << "a state dict records nothing to refuse it by";
  EXPECT_HAS(said.str(), "records no model options or tokenizer (a PyTorch state dict; tt's safetensors export "
                         "records them): that they are this run's is not checked");
  EXPECT_TRUE(fs::exists(dir / "from-sd-sp" / "summary.json"));
}

// loss.png draws each evaluation's val_loss as a point over the training loss: val_loss.dat holds
// them (step, val_loss), those of metrics.jsonl's evaluation lines, once per evaluated step (the
// final evaluation at a step just evaluated is not run again).
TEST(TransformerLM, TheLossPlotsDataHasEachEvaluationsValidationLoss) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-val-plot");
  write_corpus(dir, "train.txt", 200, 15);
  write_corpus(dir, "val.txt", 20, 16);
  std::string yaml = lm_yaml(dir, "  max_steps: 5\n  eval_every: 2\n");
  yaml.replace(yaml.find("plots: false"), 12, "plots: true");
  tt::Trainer run(tt::parse_pipeline(yaml, "p.yaml"), {dir / "run", false, true});
  run.fit();
  std::vector<std::pair<int64_t, double>> logged;
  std::istringstream metrics(tt::test::read_file(dir / "run" / "metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss") && !j.contains("step_seconds")) logged.emplace_back(j["step"], j["val_loss"]);
  }
  ASSERT_EQ(logged.size(), 3u);  // after steps 2 and 4, and the final one after 5
  std::istringstream dat(tt::test::read_file(dir / "run" / "val_loss.dat"));
  size_t rows = 0;
  for (int64_t step; dat >> step; ++rows) {
    double v = 0;
    dat >> v;
    ASSERT_LT(rows, logged.size());
    EXPECT_EQ(step, logged[rows].first);
    EXPECT_NEAR(v, logged[rows].second, 1e-5 * v);
  }
  EXPECT_EQ(rows, 3u);
  const auto outputs = tt::test::read_json(dir / "run" / "summary.json")["outputs"];
  EXPECT_NE(std::find(outputs.begin(), outputs.end(), "val_loss.dat"), outputs.end()) << outputs;
}

TEST(TransformerLM, EvaluationComputesTheLossAFewRowsAtATimeAsOverTheWholeBatch) {
  register_lm();
  auto dir = tt::test::temp_dir("lm-eval-chunks");
  const fs::path text = write_corpus(dir, "val.txt", 40, 17);
  const tt::Datasets d = text_data(text, 16);
  torch::manual_seed(3);
  Shape s = small_shape();
  s.vocab = 256;
  TransformerLM m(s, nullptr, {}, "");
  // The mean cross-entropy over every token of the stream, from whole-batch logits.
  auto* stream = dynamic_cast<tt::StreamDataset*>(d.train.get());
  ASSERT_NE(stream, nullptr);
  double nll = 0;
  int64_t tokens = 0;
  {
    torch::NoGradGuard no_grad;
    m.eval();
    stream->start_epoch(0);
    for (tt::Batch b = stream->next(5); b.size > 0; b = stream->next(5)) {
      const at::Tensor logits = m.logits(b.at("input"));
      nll += torch::nn::functional::cross_entropy(logits.view({-1, s.vocab}), b.at("target").reshape({-1}),
                                                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                 .item<double>();
      tokens += b.at("target").numel();
    }
    m.train();
  }
  ASSERT_GT(tokens, 5 * 16) << "the stream must give several batches";
  for (int64_t rows : {7, 0}) {  // 7 rows (several chunks per batch), and the default (one per batch here)
    m.eval_rows_per_chunk = rows;
    const auto metrics = m.evaluate(*d.train, 5);
    EXPECT_EQ(metrics.at("val_tokens"), static_cast<double>(tokens));
    EXPECT_NEAR(metrics.at("val_loss"), nll / static_cast<double>(tokens), 1e-6) << rows << " rows a chunk";
    EXPECT_TRUE(m.is_training());
  }
}

// The optimizer step in backward (extension point 11, as the test plugin test-step-in-backward
// builds it) on the transformer: the losses of the step after backward, far fewer gradient bytes
// live at once and, at a shape whose weights outweigh its activations (short sequences), a lower
// peak (where activations dominate, the peak is in early backward, before any gradient, and stays);
// beside amp's loss scaling it is refused when the pipeline is read, beside bf16 autocast alone it
// trains.
TEST(TransformerLM, TheStepInBackwardTrainsAsTheUsualStepWithFewerGradientsLive) {
  tt::test::TinyLm lm("lm-in-backward");
  struct TestModules {  // where tt-run finds test-step-in-backward, for this test's runs
    TestModules() { setenv("TT_PLUGIN_PATH", TT_TEST_MODULE_DIR, 1); }
    ~TestModules() { unsetenv("TT_PLUGIN_PATH"); }
  } modules;
  lm.model = "{name: transformer, d_model: 128, n_layers: 4, n_heads: 4, sample_tokens: 0}";
  lm.seq_len = 16;
  const std::string trainer = "max_steps: 4, batch_size: 2, threads: 1";
  auto plain_run = lm.run("plain", "[]", trainer);
  ASSERT_EQ(plain_run.rc, 0) << plain_run.output;
  auto in_run = lm.run("in-backward", "[test-step-in-backward]", trainer);
  ASSERT_EQ(in_run.rc, 0) << in_run.output;
  const auto plain = lm.summary("plain"), in = lm.summary("in-backward");
  EXPECT_EQ(in["final_loss"], plain["final_loss"]);
  const auto& pm = plain["memory"];
  const auto& im = in["memory"];
  EXPECT_EQ(pm["gradients_bytes"], pm["parameters_bytes"]) << "every parameter's gradient after backward";
  EXPECT_GT(im["gradients_bytes"].get<int64_t>(), 0);
  EXPECT_LT(im["gradients_bytes"].get<int64_t>(), pm["gradients_bytes"].get<int64_t>() / 2) << im.dump();
  EXPECT_EQ(im["optimizer_state_bytes"], pm["optimizer_state_bytes"]);
  EXPECT_LT(im["peak_tensor_bytes"].get<int64_t>(), pm["peak_tensor_bytes"].get<int64_t>()) << im.dump() << pm.dump();
  auto refused = lm.run("scaled", "[{name: amp, dtype: bf16, grad_scaler: on}, test-step-in-backward]", trainer);
  EXPECT_EQ(refused.rc, 2) << refused.output;
  EXPECT_HAS(refused.output, "plugins: 'amp' may skip a step after backward (its GradScaler unscales the gradients "
                             "before the step and skips a step whose gradients overflowed; bf16 runs without one: "
                             "grad_scaler: off), but 'test-step-in-backward' takes the optimizer step in backward");
  // the same refusal when the pipeline is only read
  auto dry = tt::test::run(tt::test::tt_run_bin() + " --dry-run " + (lm.dir / "scaled.yaml").string());
  EXPECT_EQ(dry.rc, 2) << dry.output;
  EXPECT_HAS(dry.output, "plugins: 'amp' may skip a step after backward");
  auto bf16 = lm.run("bf16", "[{name: amp, dtype: bf16}, test-step-in-backward]", trainer);
  EXPECT_EQ(bf16.rc, 0) << bf16.output;
}
