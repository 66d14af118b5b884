#pragma once
// GradScaler: dynamic loss scaling for mixed precision, as torch.cuda.amp.GradScaler does it,
// written as plain tensor math so it runs (and is tested) on CPU too.
//
// Per optimizer step: the loss is multiplied by `scale` before backward; before the step the
// gradients are multiplied by 1/scale and checked for inf/NaN (all of them: one bad value
// skips the step); then update(): a non-finite step multiplies the scale by `backoff` and
// resets the count, `growth_interval` finite steps in a row multiply it by `growth`.
#include <torch/torch.h>

#include <vector>

namespace tt::amp {

class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;  // 2^16
    double growth = 2.0, backoff = 0.5;
    int64_t growth_interval = 2000;
  };
  explicit GradScaler(Options o);

  at::Tensor scale_loss(const at::Tensor& loss) const { return loss * scale_; }
  // Unscales every defined gradient in place (dense or sparse); true if any value is inf/NaN.
  bool unscale(const std::vector<at::Tensor>& params);
  // After the step (taken or skipped): adjusts the scale.
  void update(bool found_inf);

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped() const { return skipped_; }

  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar);

 private:
  Options o_;
  double scale_;
  int64_t growth_tracker_ = 0;  // finite steps since the last change
  int64_t skipped_ = 0;         // steps skipped for inf/NaN so far
};

}  // namespace tt::amp
