#include "grad_scaler.h"

#include <cmath>

#include "tt/dist.h"
#include "tt/error.h"

namespace tt::amp {

// The plugin's schema declares what each option may be (amp's init_scale > 0, growth_factor > 1,
// backoff_factor in (0, 1), growth_interval >= 1); here they are preconditions.
GradScaler::GradScaler(Options o) : o_(o), scale_(o.init_scale) {
  TT_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale) && o.growth > 1 && o.backoff > 0 && o.backoff < 1 &&
               o.growth_interval >= 1,
           "GradScaler: init_scale ", o.init_scale, ", growth ", o.growth, ", backoff ", o.backoff,
           ", growth_interval ", o.growth_interval, " are outside what amp's options allow");
}

bool GradScaler::unscale(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  at::Tensor bad;  // accumulated on the gradients' device: one host sync at the end
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    at::Tensor g = p.mutable_grad();
    at::Tensor values = g.is_sparse() ? g._values() : g;
    values.mul_(inv);
    at::Tensor here = values.isfinite().logical_not().any();
    bad = bad.defined() ? bad.logical_or(here.to(bad.device())) : here;
  }
  const bool found = bad.defined() && bad.item<bool>();
  // Data-parallel runs: every rank skips (and backs off) together, whether or not the
  // gradients were already synchronized (zero1 reduces them after this check).
  if (auto* ctx = tt::dist::context()) return ctx->any(found);
  return found;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= o_.backoff;
    growth_tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++growth_tracker_ >= o_.growth_interval) {
    const double grown = scale_ * o_.growth;
    if (std::isfinite(grown)) scale_ = grown;  // as torch: never grow to inf
    growth_tracker_ = 0;
  }
}

void GradScaler::save(torch::serialize::OutputArchive& ar) const {
  ar.write("scale", c10::IValue(scale_));
  ar.write("growth_tracker", c10::IValue(growth_tracker_));
  ar.write("skipped", c10::IValue(skipped_));
}

void GradScaler::load(torch::serialize::InputArchive& ar) {
  c10::IValue v;
  TT_CHECK(ar.try_read("scale", v), "amp: the checkpoint has no GradScaler state (was it written with amp's scaler?)");
  scale_ = v.toDouble();
  ar.read("growth_tracker", v);
  growth_tracker_ = v.toInt();
  ar.read("skipped", v);
  skipped_ = v.toInt();
}

}  // namespace tt::amp
