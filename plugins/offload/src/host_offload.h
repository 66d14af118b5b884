#pragma once
// Optimizer state and step in host memory for a model trained on a CUDA device (ZeRO-Offload's
// CPU optimizer, without the sharding).
//
// HostOffload takes the pipeline's optimizer before its first step and re-points its parameter
// groups at float32 host copies of the device parameters (pinned memory on CUDA builds), so its
// state is allocated on the host. A step copies every gradient device -> host into pinned
// buffers asynchronously, one CUDA event per parameter; then, parameter by parameter as its
// copy completes, runs the wrapped optimizer on the host copy and copies the result back
// host -> device asynchronously, so transfers overlap the host updates. The device keeps the
// parameters and gradients only. The arithmetic is the wrapped optimizer's on the host.
//
// Device and host may both be the CPU (tests): then the copies are plain copies.
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

namespace tt::offload {

class HostOffload : public torch::optim::Optimizer {
 public:
  explicit HostOffload(std::shared_ptr<torch::optim::Optimizer> inner);
  ~HostOffload() override;
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  // Host copies := device parameters (after something wrote the device parameters: a resume).
  void sync_from_device();
  torch::optim::Optimizer& inner() { return *inner_; }
  // Bytes of the host copies and their gradient buffers.
  int64_t host_bytes() const;

 private:
  struct Slot;
  std::shared_ptr<torch::optim::Optimizer> inner_;
  std::vector<std::vector<std::shared_ptr<Slot>>> slots_;  // per group, per parameter
};

}  // namespace tt::offload
