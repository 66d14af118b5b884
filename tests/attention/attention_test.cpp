// The attention plugin: the chunked kernel against core's naive one (values and gradients,
// every mask and ragged chunking), what it keeps for backward, its memory at N = 4096 as
// tt's meter counts it, and the plugin through tt-run.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "chunked_attention.h"
#include "sdpa_attention.h"
#include "test_support.h"
#include "tt/error.h"
#include "tt/meter.h"
#include "tt/nn.h"
#include "tt/pipeline.h"
#include "tt/trainer.h"

namespace fs = std::filesystem;

namespace {

struct Inputs {
  at::Tensor q, k, v, grad_out;
};

Inputs random_inputs(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, uint64_t seed) {
  torch::manual_seed(seed);
  Inputs in;
  in.q = torch::randn({B, H, T, D}).requires_grad_();
  in.k = torch::randn({B, H, S, D}).requires_grad_();
  in.v = torch::randn({B, H, S, D}).requires_grad_();
  in.grad_out = torch::randn({B, H, T, D});
  return in;
}

struct Result {
  at::Tensor out, dq, dk, dv;
};

// Output and q/k/v gradients of attention(q, k, v) under the upstream gradient grad_out.
template <class Attend>
Result run(const Inputs& in, Attend&& attend) {
  auto q = in.q.detach().clone().requires_grad_(), k = in.k.detach().clone().requires_grad_(),
       v = in.v.detach().clone().requires_grad_();
  auto out = attend(q, k, v);
  out.backward(in.grad_out);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

Result naive(const Inputs& in, bool causal, const at::Tensor& key_padding = {}) {
  return run(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    tt::nn::AttentionInputs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.causal = causal;
    a.key_padding = key_padding;
    return tt::nn::NaiveAttentionKernel().forward(a);
  });
}

Result chunked(const Inputs& in, bool causal, int64_t cq, int64_t ck, const at::Tensor& key_padding = {}) {
  return run(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return tt::attn::chunked_attention(q, k, v, causal, key_padding, cq, ck);
  });
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

bool finite(const Result& r) {
  for (const auto& t : {r.out, r.dq, r.dk, r.dv})
    if (!torch::isfinite(t).all().item<bool>()) return false;
  return true;
}

// Every part of `got` within `tol` of `want` (max abs diff), with the worst named on failure.
void expect_close(const Result& got, const Result& want, double tol, const std::string& what) {
  ASSERT_TRUE(finite(got)) << what << ": NaN or inf";
  EXPECT_LE(max_abs_diff(got.out, want.out), tol) << what << ": output";
  EXPECT_LE(max_abs_diff(got.dq, want.dq), tol) << what << ": dq";
  EXPECT_LE(max_abs_diff(got.dk, want.dk), tol) << what << ": dk";
  EXPECT_LE(max_abs_diff(got.dv, want.dv), tol) << what << ": dv";
}

const std::vector<std::pair<int64_t, int64_t>> kChunks = {{1, 1}, {5, 5}, {16, 16}, {64, 64}, {5, 16}, {16, 5}};

}  // namespace

TEST(ChunkedAttention, MatchesNaiveForwardAndGradients) {
  // several threads, whatever the environment says: the kernel's items run in parallel
  const int threads = at::get_num_threads();
  at::set_num_threads(3);
  struct Restore {
    int n;
    ~Restore() { at::set_num_threads(n); }
  } restore{threads};
  for (bool causal : {true, false})
    for (int64_t T : {1, 7, 33, 100}) {
      auto in = random_inputs(2, 3, T, T, 8, 100 + T);
      auto want = naive(in, causal);
      // the naive result itself against a float64 computation, so that 1e-5 means something
      Inputs in64{in.q.to(torch::kDouble), in.k.to(torch::kDouble), in.v.to(torch::kDouble),
                  in.grad_out.to(torch::kDouble)};
      auto exact = naive(in64, causal);
      for (auto [cq, ck] : kChunks) {
        const std::string what = std::string(causal ? "causal" : "full") + " T=" + std::to_string(T) +
                                 " chunks " + std::to_string(cq) + "x" + std::to_string(ck);
        auto got = chunked(in, causal, cq, ck);
        EXPECT_EQ(got.out.scalar_type(), torch::kFloat);
        expect_close(got, want, 1e-5, what + " vs naive");
        expect_close(got, exact, 1e-5, what + " vs float64");
      }
    }
}

TEST(ChunkedAttention, CrossAttentionShapes) {
  // S != T, both ways; causal with S != T is tril(S - T) as in the naive kernel. With S < T
  // some causal rows see no key: the naive kernel gives 0 there only when key_padding is set.
  for (auto [T, S] : std::vector<std::pair<int64_t, int64_t>>{{7, 33}, {33, 7}, {1, 100}, {100, 3}}) {
    auto in = random_inputs(2, 2, T, S, 16, 7 * T + S);
    auto all_real = torch::ones({2, S}, torch::kBool);
    for (auto [cq, ck] : kChunks) {
      const std::string what = "T=" + std::to_string(T) + " S=" + std::to_string(S) + " chunks " +
                               std::to_string(cq) + "x" + std::to_string(ck);
      expect_close(chunked(in, false, cq, ck), naive(in, false), 1e-5, what + " full");
      expect_close(chunked(in, true, cq, ck), naive(in, true, all_real), 1e-5, what + " causal");
    }
  }
}

TEST(ChunkedAttention, KeyPaddingWithAFullyPaddedSequence) {
  const int64_t B = 3, T = 33;
  auto in = random_inputs(B, 2, T, T, 8, 5);
  auto padding = torch::ones({B, T}, torch::kBool);
  padding[0].slice(0, 20).fill_(false);  // right padding
  padding[1].fill_(false);             // nothing real: every row masked
  padding[2].slice(0, 0, 4).fill_(false);  // left padding (causal rows 0..3 see no key)
  for (bool causal : {true, false})
    for (auto [cq, ck] : kChunks) {
      const std::string what = std::string(causal ? "causal" : "full") + " chunks " + std::to_string(cq) + "x" +
                               std::to_string(ck);
      auto want = naive(in, causal, padding);
      auto got = chunked(in, causal, cq, ck, padding);
      expect_close(got, want, 1e-5, what);
      // the fully padded sequence: output 0, gradient 0, no NaN
      EXPECT_EQ(got.out[1].abs().max().item<double>(), 0.0) << what;
      EXPECT_EQ(got.dq[1].abs().max().item<double>(), 0.0) << what;
      EXPECT_EQ(got.dk[1].abs().max().item<double>(), 0.0) << what;
      EXPECT_EQ(got.dv[1].abs().max().item<double>(), 0.0) << what;
      // padded keys get no gradient from anyone
      EXPECT_EQ(got.dk[0].slice(1, 20).abs().max().item<double>(), 0.0) << what;
      EXPECT_EQ(got.dv[0].slice(1, 20).abs().max().item<double>(), 0.0) << what;
    }
}

TEST(ChunkedAttention, HalfPrecisionInputsAreComputedInFloatAndReturnedInTheirDtype) {
  auto in = random_inputs(1, 2, 40, 40, 16, 3);
  Inputs low{in.q.detach().to(torch::kBFloat16).requires_grad_(), in.k.detach().to(torch::kBFloat16).requires_grad_(),
             in.v.detach().to(torch::kBFloat16).requires_grad_(), in.grad_out.to(torch::kBFloat16)};
  auto got = chunked(low, true, 16, 16);
  EXPECT_EQ(got.out.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dq.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dk.scalar_type(), torch::kBFloat16);
  // against float math on the same (rounded) inputs: only the final rounding to bf16 differs
  Inputs rounded{low.q.detach().to(torch::kFloat), low.k.detach().to(torch::kFloat), low.v.detach().to(torch::kFloat),
                 low.grad_out.to(torch::kFloat)};
  auto want = naive(rounded, true);
  EXPECT_LE(max_abs_diff(got.out, want.out), 2e-2);
  EXPECT_LE(max_abs_diff(got.dq, want.dq), 5e-2);
  EXPECT_LE(max_abs_diff(got.dv, want.dv), 5e-2);
}

TEST(ChunkedAttention, KeepsNoScoreMatrixForBackward) {
  const int64_t B = 2, H = 2, T = 64, S = 64, D = 8;
  auto in = random_inputs(B, H, T, S, D, 11);
  auto& meter = tt::Meter::global();
  meter.set_caching(false);
  auto retained = [&](auto&& attend) {  // bytes the graph holds after forward
    const int64_t before = meter.current();
    auto out = attend();
    return std::make_pair(meter.current() - before - static_cast<int64_t>(out.nbytes()), out);
  };
  const int64_t score_bytes = B * H * T * S * 4;
  auto [chunked_bytes, out] = retained([&] { return tt::attn::chunked_attention(in.q, in.k, in.v, true, {}, 16, 16); });
  auto saved = tt::attn::saved_for_backward(out);
  ASSERT_FALSE(saved.empty()) << "the output is not a chunked_attention node";
  for (const auto& t : saved) {
    if (!t.defined()) continue;
    EXPECT_NE(t.numel(), T * S) << t.sizes();
    EXPECT_LT(t.numel(), B * H * T * S) << t.sizes();
  }
  EXPECT_LT(chunked_bytes, score_bytes / 4) << "chunked keeps " << chunked_bytes << " bytes";
  auto [naive_bytes, naive_out] = retained([&] {
    tt::nn::AttentionInputs a;
    a.q = in.q;
    a.k = in.k;
    a.v = in.v;
    return tt::nn::NaiveAttentionKernel().forward(a);
  });
  EXPECT_GE(naive_bytes, score_bytes) << "the naive kernel should keep its scores (a sanity check of the meter)";
  EXPECT_TRUE(tt::attn::saved_for_backward(naive_out).empty());
}

TEST(ChunkedAttention, MemoryAt4096IsAFractionOfNaive) {
  const int64_t N = 4096;
  auto in = random_inputs(1, 4, N, N, 64, 1);
  auto& meter = tt::Meter::global();
  meter.set_caching(false);
  auto peak_extra = [&](auto&& attend) {
    auto q = in.q.detach().clone().requires_grad_(), k = in.k.detach().clone().requires_grad_(),
         v = in.v.detach().clone().requires_grad_();
    const int64_t base = meter.current();
    meter.reset_peak();
    attend(q, k, v).backward(in.grad_out);
    return meter.peak() - base;
  };
  const int64_t naive_peak = peak_extra([](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    tt::nn::AttentionInputs a;
    a.q = q;
    a.k = k;
    a.v = v;
    return tt::nn::NaiveAttentionKernel().forward(a);
  });
  const int64_t chunked_peak = peak_extra([](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return tt::attn::chunked_attention(q, k, v, true, {}, 256, 256);
  });
  EXPECT_GE(naive_peak, int64_t{4} * N * N * 4) << "naive should hold at least one [1,4,N,N] float matrix";
  EXPECT_LE(chunked_peak, naive_peak / 10) << "chunked " << chunked_peak << " vs naive " << naive_peak << " bytes";
}

TEST(ChunkedAttention, KernelFallsBackToNaiveForAttentionDropoutInTraining) {
  auto in = random_inputs(2, 2, 20, 20, 8, 9);
  tt::attn::ChunkedAttentionKernel kernel(8, 8);
  EXPECT_EQ(kernel.name(), "chunked");
  tt::nn::AttentionInputs a;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  a.dropout = 0.5;
  a.training = true;
  torch::manual_seed(4);
  auto got = kernel.forward(a);
  torch::manual_seed(4);
  auto want = tt::nn::NaiveAttentionKernel().forward(a);
  EXPECT_TRUE(torch::equal(got, want)) << "dropout in training must be the naive kernel's, same draws";
  EXPECT_TRUE(tt::attn::saved_for_backward(got).empty());
  a.training = false;  // dropout is off in evaluation: the chunked path again
  auto eval = kernel.forward(a);
  EXPECT_FALSE(tt::attn::saved_for_backward(eval).empty());
  EXPECT_LE(max_abs_diff(eval, tt::nn::NaiveAttentionKernel().forward(a)), 1e-5);
  EXPECT_THROW(tt::attn::ChunkedAttentionKernel(0, 4), tt::Error);
  EXPECT_THROW(tt::attn::chunked_attention(in.q, in.k, in.v, true, torch::ones({2, 7}, torch::kBool), 4, 4), tt::Error);
}

TEST(SdpaAttention, AvailableFromLibTorch2) {
  EXPECT_EQ(tt::attn::sdpa_available(), TORCH_VERSION_MAJOR >= 2);
  auto in = random_inputs(2, 2, 17, 17, 8, 2);
  tt::nn::AttentionInputs a;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  tt::attn::SdpaAttentionKernel kernel;
  if (!tt::attn::sdpa_available()) {
    EXPECT_THROW(kernel.forward(a), tt::Error);
    return;
  }
  auto padding = torch::ones({2, 17}, torch::kBool);
  padding[1].fill_(false);
  for (bool causal : {true, false}) {
    a.causal = causal;
    a.key_padding = at::Tensor();
    auto want = run(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      auto b = a;
      b.q = q, b.k = k, b.v = v;
      return tt::nn::NaiveAttentionKernel().forward(b);
    });
    auto got = run(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      auto b = a;
      b.q = q, b.k = k, b.v = v;
      return kernel.forward(b);
    });
    expect_close(got, want, 1e-5, causal ? "sdpa causal" : "sdpa full");
    a.key_padding = padding;
    auto padded = run(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      auto b = a;
      b.q = q, b.k = k, b.v = v;
      return kernel.forward(b);
    });
    ASSERT_TRUE(finite(padded)) << "sdpa with a fully padded sequence";
    EXPECT_EQ(padded.out[1].abs().max().item<double>(), 0.0);
  }
}

// ---------------------------------------------------------------- the plugin through tt-run

namespace {

// A tiny transformer on a small text, in a fresh directory.
struct Pipeline {
  explicit Pipeline(const std::string& tag) : dir(tt::test::temp_dir(tag)) {
    std::ofstream out(dir / "train.txt");
    for (int i = 0; i < 300; ++i) out << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  fs::path dir;
  std::string yaml(const std::string& plugins, const std::string& tag) const {
    auto file = dir / (tag + ".yaml");
    std::ofstream(file) << "name: attn\nseed: 0\n"
                        << "data: {name: text, train: " << (dir / "train.txt").string() << ", seq_len: 40}\n"
                        << "model: {name: transformer, d_model: 32, n_layers: 2, n_heads: 4, sample_tokens: 0}\n"
                        << "plugins: " << plugins << "\n"
                        << "trainer: {batch_size: 4, max_steps: 4, threads: 1, progress: off}\n"
                        << "output: {dir: " << dir.string() << ", plots: false}\n";
    return file.string();
  }
};

std::vector<double> step_losses(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

}  // namespace

TEST(AttentionPlugin, ChunkedTrainsAsNaiveThroughTtRun) {
  Pipeline p("attn-plugin");
  auto train = [&](const std::string& plugins, const std::string& tag) {
    auto r = tt::test::run(tt::test::tt_run_bin() + " " + p.yaml(plugins, tag) + " --run-dir " +
                           (p.dir / tag).string());
    EXPECT_EQ(r.rc, 0) << r.output;
    return std::make_pair(step_losses(p.dir / tag / "metrics.jsonl"), r.output);
  };
  auto [base, base_log] = train("[{name: attention, kernel: naive}]", "naive");
  auto [chunked, chunked_log] = train("[{name: attention, chunk_size: 16, key_chunk_size: 7}]", "chunked");
  EXPECT_NE(base_log.find("attention: kernel naive on 2 attention modules"), std::string::npos) << base_log;
  EXPECT_NE(chunked_log.find("attention: kernel chunked (query chunks 16, key blocks 7) on 2 attention modules"),
            std::string::npos)
      << chunked_log;
  ASSERT_EQ(base.size(), 4u);
  ASSERT_EQ(chunked.size(), base.size());
  for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(chunked[i], base[i], 1e-5 * std::abs(base[i])) << "step " << i + 1;
  EXPECT_NE(base.front(), base.back()) << "the model did not train: the comparison would prove little";
  // sdpa: LibTorch's fused kernel where there is one, else chunked with a logged reason
  auto [sdpa, sdpa_log] = train("[{name: attention, kernel: sdpa}]", "sdpa");
  ASSERT_EQ(sdpa.size(), base.size());
  for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(sdpa[i], base[i], 1e-5 * std::abs(base[i])) << "step " << i + 1;
  if (!tt::attn::sdpa_available()) {
    EXPECT_NE(sdpa_log.find("kernel sdpa needs LibTorch 2.0 or later"), std::string::npos) << sdpa_log;
  }
}

TEST(AttentionPlugin, BadOptionsAndModelsWithoutAttentionAreRefused) {
  Pipeline p("attn-bad");
  const std::string file = p.yaml("[]", "base");
  auto refused = [&](const std::string& plugins, const std::vector<std::string>& words) {
    auto r = tt::test::run(tt::test::tt_run_bin() + " " + file + " -q 'plugins=" + plugins + "'");
    EXPECT_EQ(r.rc, 2) << plugins << "\n" << r.output;
    for (const auto& w : words) EXPECT_NE(r.output.find(w), std::string::npos) << "'" << w << "' in:\n" << r.output;
  };
  refused("[{name: attention, kernel: foo}]", {"attention", "kernel", "foo"});
  refused("[{name: attention, chunk_size: 0}]", {"attention", "chunk_size"});
  refused("[{name: attention, key_chunk_size: -3}]", {"attention", "key_chunk_size"});
  refused("[{name: attention, chunk_sise: 8}]", {"chunk_sise", "chunk_size"});  // nearest-key suggestion
  std::ofstream(p.dir / "topic.yaml") << tt::test::topic_yaml(p.dir, "  max_steps: 1\n", "plugins: [attention]\n");
  auto r = tt::test::run(tt::test::tt_run_bin() + " " + (p.dir / "topic.yaml").string() + " -q");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("plugins[0] (attention) acts on a model's attention, and model 'topic' has none"),
            std::string::npos)
      << r.output;
  // a model that declares nothing finds out when the plugin starts
  tt::test::register_test_components();
  tt::Trainer flat(tt::parse_pipeline("name: flat\nmodel: test-regression\ndata: test-regression-data\nplugins: "
                                      "[attention]\ntrainer: {max_steps: 1, threads: 1, progress: off}\n",
                                      "flat.yaml"),
                   {p.dir / "flat", false, true});
  const std::string at_init = tt::test::config_error([&] { flat.fit(); });
  EXPECT_HAS(at_init, "plugin 'attention' failed in INIT");
  EXPECT_HAS(at_init, "tt::nn::Attention");
}
