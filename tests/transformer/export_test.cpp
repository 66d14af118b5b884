// The transformer LM's weights as safetensors and as a state dict (tt/weights.h): LibTorch's
// dotted names, and a second model loaded from either file computes bitwise the same logits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_support.h"
#include "transformer_model.h"
#include "tt/error.h"
#include "tt/weights.h"

using tt::lm::Shape;
using tt::lm::TransformerLM;

TEST(TransformerExport, ReloadedWeightsGiveBitwiseTheSameLogits) {
  const auto dir = tt::test::temp_dir("lm_export");
  for (bool tied : {true, false}) {
    Shape s;
    s.vocab = 60, s.d_model = 32, s.n_layers = 2, s.n_heads = 4, s.d_ff = 64, s.seq_len = 16;
    s.tie_embeddings = tied, s.learned_positions = !tied;
    torch::manual_seed(1);
    TransformerLM a(s, nullptr, {}, "");
    const auto tensors = tt::module_tensors(a);
    std::vector<std::string> names;
    for (const auto& [n, t] : tensors) names.push_back(n);
    EXPECT_NE(std::find(names.begin(), names.end(), "blocks.0.attn.qkv.weight"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "blocks.1.mlp.fc2.bias"), names.end());
    EXPECT_EQ(std::find(names.begin(), names.end(), "head.weight") != names.end(), !tied);
    int64_t numel = 0;
    for (const auto& p : a.parameters()) numel += p.numel();
    int64_t exported = 0;
    for (const auto& [n, t] : tensors) exported += t.numel();
    EXPECT_EQ(exported, numel) << "every parameter, once";

    a.eval();
    torch::NoGradGuard no_grad;
    const auto ids = torch::randint(0, s.vocab, {2, s.seq_len}, torch::kLong);
    const auto want = a.logits(ids);
    for (auto format : {tt::WeightsFormat::Safetensors, tt::WeightsFormat::StateDict}) {
      const auto file = dir / (std::string(tied ? "tied-" : "untied-") + tt::weights_file_name(format));
      tt::write_weights(file, format, tensors);
      torch::manual_seed(2);  // other initial weights
      TransformerLM b(s, nullptr, {}, "");
      b.eval();
      EXPECT_FALSE(torch::equal(b.logits(ids), want));
      tt::load_weights(b, tt::read_weights(file), file.string());
      EXPECT_TRUE(torch::equal(b.logits(ids), want)) << file;
    }
    // A model of another shape is refused, naming what does not fit.
    Shape wider = s;
    wider.d_ff = 128;
    TransformerLM c(wider, nullptr, {}, "");
    try {
      tt::load_weights(c, tt::read_weights(dir / (std::string(tied ? "tied-" : "untied-") + "model.safetensors")), "w");
      ADD_FAILURE() << "a model with another d_ff took the weights";
    } catch (const tt::ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("mis-shaped (6): blocks.0.mlp.fc1.weight is [64, 32] there but [128, 32] here"), std::string::npos) << m;
    }
  }
}
