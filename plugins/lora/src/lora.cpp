#include "lora.h"

#include <torch/nn/init.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/weights.h"

namespace tt::lora {

Adapter::Adapter(int64_t in, int64_t out, int64_t r_, double alpha, double dropout_)
    : r(r_), scaling(alpha / static_cast<double>(r_)), dropout(dropout_) {
  // A as torch.nn.Linear's weight (Kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))),
  // B zero: B A = 0, so the adapted layer starts out equal to the base layer.
  A = register_parameter("A", torch::empty({r, in}));
  torch::nn::init::kaiming_uniform_(A, std::sqrt(5.0));
  B = register_parameter("B", torch::zeros({out, r}));
}

at::Tensor Adapter::forward(const at::Tensor& x) {
  const at::Tensor h = dropout > 0 && is_training() ? at::dropout(x, dropout, /*train=*/true) : x;
  // The scaling goes on the r-wide intermediate: the cheapest place for it.
  return at::linear(at::linear(h, A) * scaling, B);
}

at::Tensor Adapter::delta() const {
  torch::NoGradGuard no_grad;
  return torch::matmul(B, A).mul_(scaling);
}

namespace {
bool is_all_linear(const std::vector<std::string>& targets) {
  return targets.size() == 1 && targets[0] == "all-linear";
}
}  // namespace

Lora::Lora(torch::nn::Module& model, Config config) : config_(std::move(config)) {
  // what the plugin's schema allows (r >= 1, alpha > 0, dropout in [0, 1), targets given)
  TT_CHECK(config_.r >= 1 && config_.alpha > 0 && config_.dropout >= 0 && config_.dropout < 1 &&
               !config_.targets.empty(),
           "lora: r ", config_.r, ", alpha ", config_.alpha, ", dropout ", config_.dropout, " or no targets");
  std::vector<std::pair<std::string, tt::nn::LinearImpl*>> linears;
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (auto* l = item.value()->as<tt::nn::LinearImpl>()) linears.emplace_back(item.key(), l);
  TT_CHECK_AS(ConfigError, !linears.empty(),
              "lora: the model has no tt::nn::Linear layer to adapt (LoRA applies to models built from "
              "core's blocks, such as the transformer)");
  std::string some;
  for (size_t i = 0; i < linears.size() && i < 8; ++i) some += (i ? ", " : "") + linears[i].first;

  std::vector<bool> chosen(linears.size(), is_all_linear(config_.targets));
  if (!is_all_linear(config_.targets)) {
    for (const auto& pattern : config_.targets) {
      TT_CHECK_AS(ConfigError, pattern != "all-linear",
                  "lora targets: all-linear stands alone (targets: [all-linear])");
      bool hit = false;
      for (size_t i = 0; i < linears.size(); ++i)
        if (tt::nn::name_matches(pattern, linears[i].first)) chosen[i] = hit = true;
      // PEFT's names for Llama-style models: tt's transformer computes q, k and v in one Linear
      const bool peft_name = (pattern.find("q_proj") != std::string::npos ||
                              pattern.find("k_proj") != std::string::npos ||
                              pattern.find("v_proj") != std::string::npos) &&
                             std::any_of(linears.begin(), linears.end(), [](const auto& l) {
                               return l.first.size() >= 8 && l.first.compare(l.first.size() - 8, 8, "attn.qkv") == 0;
                             });
      TT_CHECK_AS(ConfigError, hit, "lora targets: '", pattern,
                  "' matches no Linear layer of the model (some of its layers: ", some, ")",
                  peft_name ? "; the query, key and value projections are one Linear here, attn.qkv: targets: [qkv]"
                            : "");
    }
  }

  for (auto& p : model.parameters()) p.set_requires_grad(false);
  std::string narrow;  // all-linear's layers too narrow for rank r (a 1-output head): left out, as PEFT's
  for (size_t i = 0; i < linears.size(); ++i) {
    if (!chosen[i]) continue;
    auto* l = linears[i].second;
    if (is_all_linear(config_.targets) && config_.r > std::min(l->in_features, l->out_features)) {
      narrow += (narrow.empty() ? "" : ", ") + linears[i].first + " (" + std::to_string(l->in_features) + " -> " +
                std::to_string(l->out_features) + ")";
      continue;
    }
    TT_CHECK_AS(ConfigError, config_.r <= std::min(l->in_features, l->out_features), "lora r = ", config_.r,
                " exceeds the smaller side of ", linears[i].first, " (", l->in_features, " -> ", l->out_features,
                "): a low-rank adapter needs r at most that (leave such a layer out of lora.targets)");
    auto a = std::make_shared<Adapter>(l->in_features, l->out_features, config_.r, config_.alpha, config_.dropout);
    a->to(l->weight.device());
    l->add_adapter("lora", a);
    layers_.push_back({linears[i].first, l, a});
  }
  if (!narrow.empty())
    tt::log().info("lora: all-linear leaves out the layers narrower than r = {}: {}", config_.r, narrow);
  TT_CHECK_AS(ConfigError, !layers_.empty(), "lora: every Linear layer of the model is narrower than r = ", config_.r,
              " (", narrow, "): lower lora.r");
  for (const auto& pattern : config_.train) {
    bool hit = false;
    for (const auto& item : model.named_modules("", false)) {
      if (!tt::nn::name_matches(pattern, item.key())) continue;
      for (auto& p : item.value()->parameters()) {
        p.set_requires_grad(true);
        hit = true;
      }
    }
    for (auto& item : model.named_parameters()) {
      if (!tt::nn::name_matches(pattern, item.key())) continue;
      item.value().set_requires_grad(true);
      hit = true;
    }
    TT_CHECK_AS(ConfigError, hit, "lora train: '", pattern, "' matches no module or parameter of the model");
  }
}

int64_t Lora::adapter_parameters() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l.adapter->A.numel() + l.adapter->B.numel();
  return n;
}

void Lora::merge() {
  if (merged_) return;
  torch::NoGradGuard no_grad;
  for (auto& l : layers_) {
    l.linear->weight.add_(l.adapter->delta().to(l.linear->weight.dtype()));
    l.adapter->merged = true;
  }
  merged_ = true;
}

void Lora::unmerge() {
  if (!merged_) return;
  torch::NoGradGuard no_grad;
  for (auto& l : layers_) {
    l.linear->weight.sub_(l.adapter->delta().to(l.linear->weight.dtype()));
    l.adapter->merged = false;
  }
  merged_ = false;
}

void Lora::save(const std::filesystem::path& file) const {
  torch::serialize::OutputArchive ar;
  ar.write("format", c10::IValue(std::string("tt-lora-1")));
  ar.write("r", c10::IValue(config_.r));
  ar.write("alpha", c10::IValue(config_.alpha));
  ar.write("count", c10::IValue(static_cast<int64_t>(layers_.size())));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string k = "layer_" + std::to_string(i) + "/";
    ar.write(k + "name", c10::IValue(layers_[i].name));
    ar.write(k + "A", layers_[i].adapter->A.detach().cpu());
    ar.write(k + "B", layers_[i].adapter->B.detach().cpu());
  }
  save_archive_atomic(ar, file);
}

void Lora::load(const std::filesystem::path& file) {
  TT_CHECK_AS(ConfigError, std::filesystem::is_regular_file(file), "lora load: ", describe_path(file.string()),
              " does not exist (the adapters.pt a LoRA run writes into its run directory)");
  if (const std::string damage = tt::archive_damage(file); !damage.empty())
    TT_FAIL_AS(ConfigError, "lora load: ", file.string(), " is damaged (", damage, "); write it again with a LoRA run");
  torch::serialize::InputArchive ar;
  c10::IValue v;
  try {
    ar.load_from(file.string());
    ar.read("format", v);
  } catch (const std::exception& e) {
    TT_FAIL_AS(ConfigError, "lora load: ", file.string(), " is not a LoRA adapter file written by tt (",
               tt::first_line(e.what()), ")");
  }
  TT_CHECK_AS(ConfigError, v.isString() && v.toStringRef() == "tt-lora-1", "lora load: ", file.string(),
              " has an unknown format");
  ar.read("r", v);
  const int64_t r = v.toInt();
  ar.read("alpha", v);
  const double alpha = v.toDouble();
  TT_CHECK_AS(ConfigError, r == config_.r && alpha == config_.alpha, "lora load: ", file.string(),
              " holds adapters of r = ", r, ", alpha = ", alpha, " but the plugin has r = ", config_.r,
              ", alpha = ", config_.alpha, ": set the same r and alpha");
  ar.read("count", v);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < layers_.size(); ++i) index[layers_[i].name] = i;
  std::vector<bool> seen(layers_.size(), false);
  torch::NoGradGuard no_grad;
  for (int64_t i = 0; i < v.toInt(); ++i) {
    const std::string k = "layer_" + std::to_string(i) + "/";
    c10::IValue name;
    ar.read(k + "name", name);
    auto it = index.find(name.toStringRef());
    TT_CHECK_AS(ConfigError, it != index.end(), "lora load: ", file.string(), " has an adapter for ",
                name.toStringRef(), ", which the targets here do not adapt: use the targets it was trained with");
    at::Tensor a, b;
    ar.read(k + "A", a);
    ar.read(k + "B", b);
    auto& ad = *layers_[it->second].adapter;
    TT_CHECK_AS(ConfigError, a.sizes() == ad.A.sizes() && b.sizes() == ad.B.sizes(), "lora load: ",
                file.string(), ": the adapter of ", name.toStringRef(), " has shapes ", a.sizes(), " / ", b.sizes(),
                " but this model needs ", ad.A.sizes(), " / ", ad.B.sizes(), " (another model shape)");
    ad.A.copy_(a);
    ad.B.copy_(b);
    seen[it->second] = true;
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    TT_CHECK_AS(ConfigError, seen[i], "lora load: ", file.string(), " has no adapter for ", layers_[i].name,
                ": use the targets it was trained with");
}

void Lora::export_merged(torch::nn::Module& model, const std::filesystem::path& file, const tt::State* record) {
  TT_CHECK(!merged_, "lora: export_merged needs the adapters unmerged");
  std::vector<at::Tensor> originals;
  {
    torch::NoGradGuard no_grad;
    for (auto& l : layers_) {
      originals.push_back(l.linear->weight.clone());
      l.linear->weight.add_(l.adapter->delta().to(l.linear->weight.dtype()));
      l.adapter->serializable = false;
    }
  }
  auto restore = [&] {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < layers_.size(); ++i) {
      layers_[i].linear->weight.copy_(originals[i]);
      layers_[i].adapter->serializable = true;
    }
  };
  try {
    torch::serialize::OutputArchive ar, model_ar;
    model.save(model_ar);
    ar.write("model", model_ar);
    if (record) tt::record_model(ar, *record);
    save_archive_atomic(ar, file);
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

}  // namespace tt::lora
