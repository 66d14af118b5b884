#include "tt/model.h"

#include <torch/torch.h>

#include "tt/dataset.h"
#include "tt/error.h"
#include "tt/runtime.h"

namespace tt {

Model::~Model() = default;

std::map<std::string, double> Model::evaluate(Dataset& data, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  double total = 0;
  int64_t n = data.size();
  auto params = parameters();
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params[0].device();
  if (auto* stream = dynamic_cast<StreamDataset*>(&data)) {  // read in order, one pass
    n = 0;
    stream->start_epoch(0);
    for (Batch b = stream->next(batch_size); b.size > 0; b = stream->next(batch_size)) {
      stop_if_interrupted();
      ModelOutput out = forward_loss(b.to(device));
      const double l = out.loss.item<double>();
      total += out.reduction == Reduction::Mean ? l * static_cast<double>(b.size) : l;
      n += b.size;
    }
    train(was_training);
    return {{"val_loss", n > 0 ? total / static_cast<double>(n) : 0.0}};
  }
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    stop_if_interrupted();
    int64_t end = std::min(n, begin + batch_size);
    ModelOutput out = forward_loss(data.get(torch::arange(begin, end, torch::kLong)).to(device));
    double l = out.loss.item<double>();
    total += out.reduction == Reduction::Mean ? l * static_cast<double>(end - begin) : l;
  }
  train(was_training);
  return {{"val_loss", n > 0 ? total / static_cast<double>(n) : 0.0}};
}

void Model::write_outputs(const std::filesystem::path&, State&) {}

void Model::predict(const std::filesystem::path& input, const std::filesystem::path&) {
  TT_FAIL_AS(ConfigError, "the model (", describe(), ") does not predict from files: --predict ", input.string(),
             " needs a model that implements it (tabular-icl)");
}

OutputHead Model::output_head(const Batch&) {
  TT_FAIL_AS(ConfigError, "the model (", describe(), ") does not expose its output head: a plugin that computes the loss "
             "from the head (chunked cross-entropy, distillation) needs a model that declares the part 'output_head' "
             "(transformer)");
}

std::string Model::generate(const std::string&, const GenerateOptions&) {
  TT_FAIL_AS(ConfigError, "the model (", describe(), ") does not generate text: --sample needs a language model "
             "such as model: {name: transformer}");
}

}  // namespace tt
