// sgd, adam, adamw: LibTorch's own optimizers behind tt's option schemas.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "tt/fused_adamw.h"
#include "tt/optimizer_state.h"
#include "tt/registry.h"

namespace tt {

std::vector<torch::optim::OptimizerParamGroup> param_groups_of(torch::optim::Optimizer& opt) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto& g : opt.param_groups()) groups.emplace_back(g.params(), g.options().clone());
  return groups;
}

namespace {

// The options of each optimizer; their defaults, ranges and docs are in the schemas below.
struct SgdOptions {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

struct AdamOptions {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad;
  bool fused;  // adamw only
};

Schema sgd_schema() {
  return Schema()
      .field("lr", &SgdOptions::lr, 0.01, "learning rate").range(ge(0))
      .field("momentum", &SgdOptions::momentum, 0, "momentum factor").range(ge(0))
      .field("dampening", &SgdOptions::dampening, 0, "dampening for momentum").range(ge(0), le(1))
      .field("weight_decay", &SgdOptions::weight_decay, 0, "L2 penalty, of every trainable parameter").range(ge(0))
      .field("nesterov", &SgdOptions::nesterov, false, "Nesterov momentum (needs momentum > 0)");
}

// adam and adamw differ in the default and meaning of weight_decay, and adamw's fused kernel.
Schema adam_schema(bool decoupled) {
  Schema s;
  s.field("lr", &AdamOptions::lr, 0.001, "learning rate (the schedule's base rate)").range(ge(0))
      .field("beta1", &AdamOptions::beta1, 0.9, "first-moment decay").range(ge(0), lt(1))
      .field("beta2", &AdamOptions::beta2, 0.999, "second-moment decay").range(ge(0), lt(1))
      .field("eps", &AdamOptions::eps, 1e-8, "denominator epsilon").range(ge(0))
      .field("weight_decay", &AdamOptions::weight_decay, decoupled ? 0.01 : 0.0,
             decoupled ? "decoupled weight decay (AdamW), of every trainable parameter (biases and norms too, as "
                         "torch.optim.AdamW(model.parameters()) and torchtune do; nanoGPT spares tensors of 1 dimension)"
                       : "L2 penalty added to the gradient (Adam), of every trainable parameter")
      .range(ge(0))
      .field("amsgrad", &AdamOptions::amsgrad, false, "keep the maximum of past second moments");
  if (decoupled)
    s.field("fused", &AdamOptions::fused, true, "fused CPU kernel (same arithmetic and state as torch's AdamW)");
  return s;
}

template <class TorchOptions>
TorchOptions torch_options(const AdamOptions& a) {
  return TorchOptions(a.lr).betas({a.beta1, a.beta2}).eps(a.eps).weight_decay(a.weight_decay).amsgrad(a.amsgrad);
}

}  // namespace

// Adam keeps two moments per parameter (and a third, the maximum, with amsgrad).
int64_t two_moments(const Options& o, int64_t trainable) { return (o.to<AdamOptions>().amsgrad ? 3 : 2) * trainable; }

void register_builtin_optimizers(Registry& r) {
  r.add_optimizer("sgd", "stochastic gradient descent with optional momentum (torch::optim::SGD)", sgd_schema(),
                  [](const std::vector<at::Tensor>& params, const Options& o) {
                    const auto a = o.to<SgdOptions>();
                    o.check(!a.nesterov || a.momentum > 0, "nesterov", "needs momentum > 0");
                    return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(a.lr)
                                                                           .momentum(a.momentum)
                                                                           .dampening(a.dampening)
                                                                           .weight_decay(a.weight_decay)
                                                                           .nesterov(a.nesterov));
                  },
                  [](const Options& o, int64_t trainable) {  // the momentum buffer
                    return o.to<SgdOptions>().momentum != 0 ? trainable : int64_t{0};
                  });
  r.add_optimizer("adam", "Adam (torch::optim::Adam)", adam_schema(false),
                  [](const std::vector<at::Tensor>& params, const Options& o) {
                    return std::make_shared<torch::optim::Adam>(
                        params, torch_options<torch::optim::AdamOptions>(o.to<AdamOptions>()));
                  },
                  two_moments);
  r.add_optimizer("adamw",
                  "AdamW, decoupled weight decay (fused: one vectorized pass per parameter; "
                  "otherwise torch::optim::AdamW)",
                  adam_schema(true),
                  [](const std::vector<at::Tensor>& params, const Options& o) -> std::shared_ptr<torch::optim::Optimizer> {
                    const auto a = o.to<AdamOptions>();
                    const auto opts = torch_options<torch::optim::AdamWOptions>(a);
                    if (a.fused) return std::make_shared<FusedAdamW>(params, opts);
                    return std::make_shared<torch::optim::AdamW>(params, opts);
                  },
                  two_moments);
}

}  // namespace tt
