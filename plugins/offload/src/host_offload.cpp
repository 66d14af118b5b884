#include "host_offload.h"

#include <torch/torch.h>

#include "tt/compat.h"
#include "tt/error.h"
#include "tt/optimizer_state.h"

#if TT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tt::offload {

struct HostOffload::Slot {
  torch::Tensor device;     // the model's parameter
  torch::Tensor host;       // float32 host copy: what the wrapped optimizer updates
  torch::Tensor host_grad;  // pinned gradient buffer
#if TT_WITH_CUDA
  at::cuda::CUDAEvent grad_ready;
#endif
};

namespace {
torch::Tensor host_like(const torch::Tensor& t) {
  auto o = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCPU);
#if TT_WITH_CUDA
  if (t.is_cuda()) o = o.pinned_memory(true);
#endif
  return torch::empty(t.sizes(), o);
}
}  // namespace

HostOffload::HostOffload(std::shared_ptr<torch::optim::Optimizer> inner)
    : torch::optim::Optimizer(param_groups_of(*inner), inner->defaults().clone()), inner_(std::move(inner)) {
  TT_CHECK_AS(ConfigError, inner_->state().empty(),
              "offload target host must take the optimizer before its first step");
  torch::NoGradGuard no_grad;
  for (auto& g : inner_->param_groups()) {
    slots_.emplace_back();
    for (auto& p : g.params()) {
      auto s = std::make_shared<Slot>();
      s->device = p;
      s->host = host_like(p);
      s->host.copy_(p);
      s->host.set_requires_grad(p.requires_grad());
      s->host_grad = host_like(p);
      p = s->host;  // the wrapped optimizer now holds (and keys its state by) the host copy
      slots_.back().push_back(std::move(s));
    }
  }
}

HostOffload::~HostOffload() = default;

int64_t HostOffload::host_bytes() const {
  int64_t n = 0;
  for (const auto& g : slots_)
    for (const auto& s : g) n += static_cast<int64_t>(s->host.nbytes() + s->host_grad.nbytes());
  return n;
}

void HostOffload::sync_from_device() {
  torch::NoGradGuard no_grad;
  for (auto& g : slots_)
    for (auto& s : g) s->host.copy_(s->device);
}

torch::Tensor HostOffload::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  auto& groups = inner_->param_groups();
  std::vector<std::vector<torch::Tensor>> all;
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(param_groups()[g].options().get_lr());
    all.push_back(groups[g].params());
    groups[g].params().clear();
  }
  // Every gradient device -> host first (asynchronous on CUDA, an event after each).
  for (auto& g : slots_)
    for (auto& s : g) {
      const auto& grad = s->device.grad();
      if (!grad.defined()) continue;
      TT_CHECK(!grad.is_sparse(), "offload: target host does not take sparse gradients");
#if TT_WITH_CUDA
      if (s->device.is_cuda()) {
        const c10::cuda::CUDAGuard guard(s->device.device());
        s->host_grad.copy_(grad, /*non_blocking=*/true);
        s->grad_ready.record(c10::cuda::getCurrentCUDAStream(s->device.device().index()));
        continue;
      }
#endif
      s->host_grad.copy_(grad);
    }
  auto restore = [&] {
    for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = all[g];
  };
  try {
    for (size_t g = 0; g < slots_.size(); ++g)
      for (auto& s : slots_[g]) {
        if (!s->device.grad().defined()) continue;
#if TT_WITH_CUDA
        if (s->device.is_cuda()) s->grad_ready.synchronize();
#endif
        s->host.mutable_grad() = s->host_grad;
        groups[g].params() = {s->host};
        inner_->step();
        groups[g].params().clear();
        s->host.mutable_grad() = torch::Tensor();
        // host -> device: asynchronous from pinned memory on CUDA (ordered before the next
        // forward on the stream; the host copy is not written again before the next step's
        // gradients have arrived, which is after this copy in stream order)
        s->device.copy_(s->host, /*non_blocking=*/s->device.is_cuda());
      }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return loss;
}

void HostOffload::save(torch::serialize::OutputArchive& archive) const { inner_->save(archive); }

void HostOffload::load(torch::serialize::InputArchive& archive) {
  inner_->load(archive);
  sync_from_device();
}

}  // namespace tt::offload
