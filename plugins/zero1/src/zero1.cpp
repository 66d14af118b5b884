#include "zero1.h"

#include <cmath>

#include <sstream>

#include "tt/checkpoint.h"
#include "tt/dist.h"
#include "tt/error.h"
#include "tt/optimizer_state.h"

namespace tt::zero1 {

Zero1::Zero1(std::shared_ptr<torch::optim::Optimizer> inner, tt::dist::Context& ctx)
    : torch::optim::Optimizer(param_groups_of(*inner), inner->defaults().clone()), inner_(std::move(inner)), ctx_(ctx) {
  const int w = ctx_.world_size();
  for (auto& g : param_groups())
    for (const auto& p : g.params()) params_.push_back(p);
  // Largest first to the least loaded rank: shards within one parameter's size of each other.
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(w, 0);
  owner_.assign(params_.size(), 0);
  offset_.assign(params_.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = r;
    load[r] += params_[i].numel();
  }
  std::vector<int64_t> next(w, 0);
  for (size_t i = 0; i < params_.size(); ++i) {  // offsets in the trainer's order within each region
    offset_[i] = next[owner_[i]];
    next[owner_[i]] += params_[i].numel();
    total_numel_ += params_[i].numel();
  }
  chunk_ = *std::max_element(load.begin(), load.end());
  owned_numel_ = load[ctx_.rank()];
  // The wrapped optimizer sees this rank's shard only.
  for (auto& g : inner_->param_groups()) {
    std::vector<at::Tensor> mine;
    for (const auto& p : g.params())
      for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].is_same(p) && owner_[i] == ctx_.rank()) mine.push_back(p);
    g.params() = mine;
  }
}

torch::Tensor Zero1::step(LossClosure closure) {
  TT_CHECK(!closure, "zero1: closures are not supported");
  torch::NoGradGuard no_grad;
  const int w = ctx_.world_size(), me = ctx_.rank();
  const auto opts = params_.front().options();
  // Gradients into their owners' regions (zeros where a parameter has none); summed per region.
  at::Tensor flat = torch::zeros({chunk_ * w}, opts);
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    if (g.is_sparse()) g = g.to_dense();
    flat.narrow(0, owner_[i] * chunk_ + offset_[i], params_[i].numel()).copy_(g.reshape(-1));
  }
  at::Tensor mine = ctx_.reduce_scatter_sum(flat);
  flat = at::Tensor();
  if (max_norm_ >= 0) {  // torch's clip_grad_norm_ on the whole gradient: scaled by max / (norm + 1e-6) if below 1
    last_norm_ = std::sqrt(ctx_.sum(mine.to(torch::kDouble).pow(2).sum().item<double>()));
    const double coef = max_norm_ / (last_norm_ + 1e-6);
    if (coef < 1) mine.mul_(coef);
  }
  // The shard's summed gradients go into its parameters' own gradient tensors (no new
  // memory, so the meter's optimizer-state delta over the step is the shard's state alone).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner_[i] != me) continue;
    at::Tensor sum = mine.narrow(0, offset_[i], params_[i].numel()).view(params_[i].sizes());
    at::Tensor& g = params_[i].mutable_grad();
    if (g.defined() && !g.is_sparse()) g.copy_(sum);
    else g = sum.clone();
  }
  mine = at::Tensor();
  // The schedule sets this wrapper's learning rate; the shard's optimizer follows.
  for (size_t g = 0; g < inner_->param_groups().size() && g < param_groups().size(); ++g)
    inner_->param_groups()[g].options().set_lr(param_groups()[g].options().get_lr());
  inner_->step();
  // Everyone's updated shard to everyone.
  at::Tensor region = torch::zeros({chunk_}, opts);
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == me) region.narrow(0, offset_[i], params_[i].numel()).copy_(params_[i].reshape(-1));
  at::Tensor all = ctx_.all_gather(region);
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] != me)
      params_[i].copy_(all.narrow(0, owner_[i] * chunk_ + offset_[i], params_[i].numel()).view(params_[i].sizes()));
  return {};
}

void Zero1::save(torch::serialize::OutputArchive& archive) const {
  std::ostringstream buf;
  torch::serialize::OutputArchive mine;
  inner_->save(mine);
  mine.save_to(buf);
  const std::vector<std::string> shards = ctx_.all_gather_strings(buf.str());
  archive.write("zero1/world_size", c10::IValue(static_cast<int64_t>(shards.size())));
  for (size_t r = 0; r < shards.size(); ++r) {
    archive.write("zero1/shard_" + std::to_string(r), tt::bytes_to_tensor(shards[r]));
  }
}

void Zero1::load(torch::serialize::InputArchive& archive) {
  c10::IValue ws;
  TT_CHECK_AS(ConfigError, archive.try_read("zero1/world_size", ws),
              "zero1: the checkpoint's optimizer state was not written by zero1: resume with the plugins it was made with");
  TT_CHECK_AS(ConfigError, ws.toInt() == ctx_.world_size(), "zero1: the checkpoint holds ", ws.toInt(),
              " shards but this run has ", ctx_.world_size(), " ranks: resume with the same world size");
  at::Tensor t;
  archive.read("zero1/shard_" + std::to_string(ctx_.rank()), t);
  std::istringstream in(tt::tensor_to_bytes(t));
  torch::serialize::InputArchive shard;
  shard.load_from(in);
  inner_->load(shard);
}

}  // namespace tt::zero1
