#pragma once
// LoRA (Hu et al., "Low-Rank Adaptation of Large Language Models"), written for core's Linear:
// y = W x + b + (alpha / r) * B A dropout(x), with A [r, in] Kaiming-uniform, B [out, r] zero
// (so the model's outputs are unchanged at the start), and every other parameter frozen.
#include <torch/nn/module.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tt/nn.h"

namespace tt {
struct State;
}

namespace tt::lora {

// The plugin's schema takes its defaults from here (plugins/lora/src/module.cpp).
struct Config {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets{"all-linear"};  // name patterns (tt::nn::name_matches), or {"all-linear"}
  std::vector<std::string> train;                 // more parameters to keep trainable (name patterns), e.g. "ln*"
};

class Adapter final : public tt::nn::LinearAdapter {
 public:
  Adapter(int64_t in, int64_t out, int64_t r, double alpha, double dropout);
  at::Tensor forward(const at::Tensor& x) override;
  bool active() const override { return !merged; }
  bool is_serializable() const override { return serializable; }
  // The update it adds to the layer's weight: (alpha / r) B A, [out, in].
  at::Tensor delta() const;

  at::Tensor A, B;  // [r, in], [out, r]
  int64_t r;
  double scaling, dropout;
  bool merged = false;
  bool serializable = true;  // off while a merged model is exported without its adapters
};

struct Layer {
  std::string name;  // the Linear's dotted name in the model
  tt::nn::LinearImpl* linear;
  std::shared_ptr<Adapter> adapter;
};

class Lora {
 public:
  // Freezes every parameter of `model`, then attaches an adapter (named "lora") to every
  // tt::nn::Linear a target matches and unfreezes what `train` names. Throws ConfigError for a
  // target that matches no Linear (listing some), and for a model without tt::nn::Linear layers.
  Lora(torch::nn::Module& model, Config config);

  const std::vector<Layer>& layers() const { return layers_; }
  const Config& config() const { return config_; }
  int64_t adapter_parameters() const;  // sum of r * (in + out) over the adapted layers

  // Folds the adapters into the weights (W += alpha/r B A; the adapters stop being called),
  // and takes them out again (W -= alpha/r B A).
  void merge();
  void unmerge();
  bool merged() const { return merged_; }

  // The adapters alone (a small file): names, shapes, r and alpha are checked on load.
  void save(const std::filesystem::path& file) const;
  void load(const std::filesystem::path& file);
  // The model with the adapters folded in and without adapter parameters, in the trainer's
  // checkpoint layout ("model"), for model.init_from; the model is left as it was (bitwise).
  // With `record` (the run's state, whose model `model` is), the file also records the model's
  // options and data (tt::record_model), so tt::load_model builds it (a teacher).
  void export_merged(torch::nn::Module& model, const std::filesystem::path& file, const tt::State* record = nullptr);

 private:
  Config config_;
  std::vector<Layer> layers_;
  bool merged_ = false;
};

}  // namespace tt::lora
