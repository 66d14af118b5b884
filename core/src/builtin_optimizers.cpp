// sgd, adam, adamw: LibTorch's own optimizers behind tt's option schemas.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "tt/fused_adamw.h"
#include "tt/registry.h"

namespace tt {

static Schema adam_schema(const char* default_wd) {
  const bool decoupled = std::string(default_wd) != "0";
  return Schema()
      .add("lr", Type::Float, "0.001", "learning rate (the schedule's base rate)")
      .add("beta1", Type::Float, "0.9", "first-moment decay")
      .add("beta2", Type::Float, "0.999", "second-moment decay")
      .add("eps", Type::Float, "1e-8", "denominator epsilon")
      .add("weight_decay", Type::Float, default_wd,
           decoupled ? "decoupled weight decay (AdamW)" : "L2 penalty added to the gradient (Adam)")
      .add("amsgrad", Type::Bool, "false", "keep the maximum of past second moments");
}

static void check_adam(const Options& o) {
  o.check(o.get_float("lr") >= 0, "lr", "must be >= 0");
  o.check(o.get_float("beta1") >= 0 && o.get_float("beta1") < 1, "beta1", "must be in [0, 1)");
  o.check(o.get_float("beta2") >= 0 && o.get_float("beta2") < 1, "beta2", "must be in [0, 1)");
  o.check(o.get_float("eps") >= 0, "eps", "must be >= 0");
}

void register_builtin_optimizers(Registry& r) {
  r.add_optimizer("sgd", "stochastic gradient descent with optional momentum (torch::optim::SGD)",
                  Schema()
                      .add("lr", Type::Float, "0.01", "learning rate")
                      .add("momentum", Type::Float, "0", "momentum factor")
                      .add("dampening", Type::Float, "0", "dampening for momentum")
                      .add("weight_decay", Type::Float, "0", "L2 penalty")
                      .add("nesterov", Type::Bool, "false", "Nesterov momentum"),
                  [](const std::vector<at::Tensor>& params, const Options& o) {
                    o.check(o.get_float("lr") >= 0, "lr", "must be >= 0");
                    o.check(!o.get_bool("nesterov") || o.get_float("momentum") > 0, "nesterov",
                            "needs momentum > 0");
                    return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(o.get_float("lr"))
                                                                           .momentum(o.get_float("momentum"))
                                                                           .dampening(o.get_float("dampening"))
                                                                           .weight_decay(o.get_float("weight_decay"))
                                                                           .nesterov(o.get_bool("nesterov")));
                  });
  r.add_optimizer("adam", "Adam (torch::optim::Adam)", adam_schema("0"),
                  [](const std::vector<at::Tensor>& params, const Options& o) {
                    check_adam(o);
                    return std::make_shared<torch::optim::Adam>(
                        params, torch::optim::AdamOptions(o.get_float("lr"))
                                    .betas({o.get_float("beta1"), o.get_float("beta2")})
                                    .eps(o.get_float("eps"))
                                    .weight_decay(o.get_float("weight_decay"))
                                    .amsgrad(o.get_bool("amsgrad")));
                  });
  r.add_optimizer("adamw",
                  "AdamW, decoupled weight decay (fused: one vectorized pass per parameter; "
                  "otherwise torch::optim::AdamW)",
                  adam_schema("0.01").add("fused", Type::Bool, "true",
                                          "fused CPU kernel (same arithmetic and state as torch's AdamW)"),
                  [](const std::vector<at::Tensor>& params, const Options& o) -> std::shared_ptr<torch::optim::Optimizer> {
                    check_adam(o);
                    auto opts = torch::optim::AdamWOptions(o.get_float("lr"))
                                    .betas({o.get_float("beta1"), o.get_float("beta2")})
                                    .eps(o.get_float("eps"))
                                    .weight_decay(o.get_float("weight_decay"))
                                    .amsgrad(o.get_bool("amsgrad"));
                    if (o.get_bool("fused")) return std::make_shared<FusedAdamW>(params, opts);
                    return std::make_shared<torch::optim::AdamW>(params, opts);
                  });
}

}  // namespace tt
