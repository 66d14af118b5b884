#include "adam8bit.h"

#if TT_ADAM8BIT_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "quant_cuda.h"
#endif

#include <torch/optim/adamw.h>
#include <torch/serialize/archive.h>

#include "quant.h"
#include "tt/error.h"
#include "tt/helper.h"

namespace tt::adam8bit {

Adam8bit::Adam8bit(std::vector<torch::optim::OptimizerParamGroup> groups, Config config,
                   std::set<const void*> keep_32bit)
    : torch::optim::Optimizer(std::move(groups), std::make_unique<torch::optim::AdamWOptions>(config.lr)),
      config_(config),
      keep_32bit_(std::move(keep_32bit)) {
  TT_CHECK(config_.beta1 >= 0 && config_.beta1 < 1 && config_.beta2 >= 0 && config_.beta2 < 1,
           "adam8bit: betas must be in [0, 1)");
  TT_CHECK(config_.eps >= 0 && config_.lr >= 0, "adam8bit: lr and eps must be >= 0");
}

std::vector<at::Tensor*> Adam8bit::state_tensors(const at::Tensor& p) {
  auto it = states_.find(p.unsafeGetTensorImpl());
  if (it == states_.end() || !it->second.initialized()) return {};
  ParamState& s = it->second;
  if (s.eight_bit) return {&s.q1, &s.q2, &s.absmax1, &s.absmax2};
  return {&s.m, &s.v};
}

const Adam8bit::ParamState* Adam8bit::state_of(const torch::Tensor& p) const {
  auto it = states_.find(p.unsafeGetTensorImpl());
  return it == states_.end() ? nullptr : &it->second;
}

int64_t Adam8bit::state_bytes() const {
  int64_t total = 0;
  for (const auto& [key, st] : states_)
    for (const auto* t : {&st.q1, &st.q2, &st.absmax1, &st.absmax2, &st.m, &st.v})
      if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
  return total;
}

Adam8bit::ParamState& Adam8bit::state_for(const torch::Tensor& p) {
  ParamState& st = states_[p.unsafeGetTensorImpl()];
  if (st.initialized()) return st;
  const int64_t n = p.numel();
  st.eight_bit = n >= config_.min_8bit_size && !keep_32bit_.count(p.unsafeGetTensorImpl());
  if (st.eight_bit) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const auto u8 = torch::TensorOptions().dtype(torch::kUInt8).device(p.device());
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(p.device());
    // Zero moments: absmax 0 decodes every byte to 0; the bytes are the zero codes.
    st.q1 = torch::full({n}, static_cast<int64_t>(signed_map().encode(0.0f)), u8);
    st.q2 = torch::full({n}, static_cast<int64_t>(unsigned_map().encode(0.0f)), u8);
    st.absmax1 = torch::zeros({blocks}, f32);
    st.absmax2 = torch::zeros({blocks}, f32);
  } else {
    st.m = torch::zeros({n}, torch::TensorOptions().dtype(torch::kFloat).device(p.device()));
    st.v = torch::zeros({n}, torch::TensorOptions().dtype(torch::kFloat).device(p.device()));
  }
  return st;
}

#if TT_ADAM8BIT_CUDA
// The same update by quant_cuda.cu's kernels on the parameter's device and current stream.
void Adam8bit::step_cuda(const torch::Tensor& p, const torch::Tensor& g, ParamState& st, const Coeffs& c) {
  const c10::cuda::CUDAGuard guard(p.device());
  void* stream = c10::cuda::getCurrentCUDAStream(p.device().index()).stream();
  const char* err = st.eight_bit
                        ? cuda::step_8bit(p.data_ptr<float>(), g.data_ptr<float>(), st.q1.data_ptr<uint8_t>(),
                                          st.q2.data_ptr<uint8_t>(), st.absmax1.data_ptr<float>(),
                                          st.absmax2.data_ptr<float>(), p.numel(), c, stream)
                        : cuda::step_32bit(p.data_ptr<float>(), g.data_ptr<float>(), st.m.data_ptr<float>(),
                                           st.v.data_ptr<float>(), p.numel(), c, stream);
  TT_CHECK(*err == 0, "adam8bit: CUDA kernel failed on ", p.device().str(), ": ", err);
}
#endif

torch::Tensor Adam8bit::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const double lr = group.options().get_lr();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
#if TT_ADAM8BIT_CUDA
      TT_CHECK(p.device().is_cpu() || p.device().is_cuda(), "adam8bit: parameter on ", p.device().str(),
               ": kernels exist for CPU and CUDA only");
#else
      TT_CHECK(p.device().is_cpu(),
               "adam8bit: parameter on ", p.device().str(),
               ": this build has the CPU kernel only (build tt against a CUDA LibTorch with the CUDA toolkit "
               "installed, or use adamw without the adam8bit plugin)");
#endif
      TT_CHECK(p.scalar_type() == torch::kFloat, "adam8bit: float32 parameters only (this one is ",
               c10::toString(p.scalar_type()), ")");
      TT_CHECK(!grad.is_sparse(), "adam8bit: sparse gradients are not supported");
      TT_CHECK(p.is_contiguous(), "adam8bit: parameters must be contiguous");
      auto g = grad.to(torch::kFloat).contiguous();
      ParamState& st = state_for(p);
      st.step += 1;
      const Coeffs c = coeffs(lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay,
                              config_.decoupled, st.step);
#if TT_ADAM8BIT_CUDA
      if (p.is_cuda()) {
        step_cuda(p, g, st, c);
        continue;
      }
#endif
      float* pp = p.data_ptr<float>();
      const float* gg = g.data_ptr<float>();
      const int64_t n = p.numel();
      if (st.eight_bit) {
        uint8_t* q1 = st.q1.data_ptr<uint8_t>();
        uint8_t* q2 = st.q2.data_ptr<uint8_t>();
        float* a1 = st.absmax1.data_ptr<float>();
        float* a2 = st.absmax2.data_ptr<float>();
        tt::parallel_for(0, st.absmax1.numel(), 16, [&](int64_t b0, int64_t b1) {
          step_8bit(pp, gg, q1, q2, a1, a2, n, b0, b1, c);
        });
      } else {
        float* m = st.m.data_ptr<float>();
        float* v = st.v.data_ptr<float>();
        tt::parallel_for(0, n, 1 << 14, [&](int64_t e0, int64_t e1) { step_32bit(pp, gg, m, v, e0, e1, c); });
      }
    }
  }
  return loss;
}

std::vector<const void*> Adam8bit::order() const {
  std::vector<const void*> out;
  for (const auto& group : param_groups())
    for (const auto& p : group.params()) out.push_back(p.unsafeGetTensorImpl());
  return out;
}

// The archive: "format" (1), "count" (parameters in group order), and per parameter i
// "i/step" and, once initialized, "i/q1", "i/q2", "i/absmax1", "i/absmax2" (8-bit) or
// "i/m", "i/v" (32-bit).
void Adam8bit::save(torch::serialize::OutputArchive& archive) const {
  archive.write("format", c10::IValue(int64_t{1}));
  const auto keys = order();
  archive.write("count", c10::IValue(static_cast<int64_t>(keys.size())));
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string k = std::to_string(i) + "/";
    auto it = states_.find(keys[i]);
    const int64_t step = it == states_.end() ? 0 : it->second.step;
    archive.write(k + "step", c10::IValue(step));
    if (it == states_.end() || !it->second.initialized()) continue;
    const ParamState& st = it->second;
    archive.write(k + "eight_bit", c10::IValue(st.eight_bit));
    if (st.eight_bit) {
      archive.write(k + "q1", st.q1, /*is_buffer=*/true);
      archive.write(k + "q2", st.q2, true);
      archive.write(k + "absmax1", st.absmax1, true);
      archive.write(k + "absmax2", st.absmax2, true);
    } else {
      archive.write(k + "m", st.m, true);
      archive.write(k + "v", st.v, true);
    }
  }
}

void Adam8bit::load(torch::serialize::InputArchive& archive) {
  c10::IValue format, count;
  TT_CHECK(archive.try_read("format", format) && format.toInt() == 1,
           "adam8bit: the checkpoint's optimizer state is not adam8bit's (was it written with another optimizer "
           "or without the adam8bit plugin?)");
  archive.read("count", count);
  const auto keys = order();
  TT_CHECK(count.toInt() == static_cast<int64_t>(keys.size()), "adam8bit: the checkpoint has state for ",
           count.toInt(), " parameters, this model has ", keys.size());
  const auto params = [&] {
    std::vector<torch::Tensor> out;
    for (const auto& group : param_groups())
      for (const auto& p : group.params()) out.push_back(p);
    return out;
  }();
  states_.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string k = std::to_string(i) + "/";
    c10::IValue step, eight;
    archive.read(k + "step", step);
    if (!archive.try_read(k + "eight_bit", eight)) {
      TT_CHECK(step.toInt() == 0, "adam8bit: parameter ", i, " has a step count but no state in the checkpoint");
      continue;
    }
    ParamState st;
    st.step = step.toInt();
    st.eight_bit = eight.toBool();
    const int64_t n = params[i].numel();
    if (st.eight_bit) {
      archive.read(k + "q1", st.q1, true);
      archive.read(k + "q2", st.q2, true);
      archive.read(k + "absmax1", st.absmax1, true);
      archive.read(k + "absmax2", st.absmax2, true);
      const int64_t blocks = (n + kBlock - 1) / kBlock;
      TT_CHECK(st.q1.numel() == n && st.q2.numel() == n && st.q1.scalar_type() == torch::kUInt8 &&
                   st.q2.scalar_type() == torch::kUInt8 && st.absmax1.numel() == blocks &&
                   st.absmax2.numel() == blocks && st.absmax1.scalar_type() == torch::kFloat &&
                   st.absmax2.scalar_type() == torch::kFloat,
               "adam8bit: the checkpoint's 8-bit state of parameter ", i, " does not fit its ", n, " elements");
      st.q1 = st.q1.contiguous();
      st.q2 = st.q2.contiguous();
      st.absmax1 = st.absmax1.contiguous();
      st.absmax2 = st.absmax2.contiguous();
    } else {
      archive.read(k + "m", st.m, true);
      archive.read(k + "v", st.v, true);
      TT_CHECK(st.m.numel() == n && st.v.numel() == n && st.m.scalar_type() == torch::kFloat &&
                   st.v.scalar_type() == torch::kFloat,
               "adam8bit: the checkpoint's state of parameter ", i, " does not fit its ", n, " elements");
      st.m = st.m.contiguous();
      st.v = st.v.contiguous();
    }
    states_[keys[i]] = std::move(st);
  }
}

}  // namespace tt::adam8bit
