// constant, linear_warmup, cosine, cosine_warm_restarts (torch's CosineAnnealingWarmRestarts).
#include <algorithm>
#include <cmath>

#include "tt/registry.h"
#include "tt/schedule.h"

namespace tt {
namespace {

double warmup_factor(int64_t step, int64_t warmup) {
  return (warmup > 0 && step < warmup) ? static_cast<double>(step + 1) / static_cast<double>(warmup) : 1.0;
}

class Constant final : public Schedule {
 public:
  explicit Constant(int64_t warmup) : warmup_(warmup) {}
  double lr(const ScheduleContext& c) const override { return c.base_lr * warmup_factor(c.step, warmup_); }

 private:
  int64_t warmup_;
};

class LinearWarmup final : public Schedule {
 public:
  LinearWarmup(int64_t warmup, bool decay, double min_lr) : warmup_(warmup), decay_(decay), min_lr_(min_lr) {}
  double lr(const ScheduleContext& c) const override {
    if (c.step < warmup_) return c.base_lr * warmup_factor(c.step, warmup_);
    if (!decay_ || c.total_steps <= warmup_) return c.base_lr;
    double t = std::min(1.0, static_cast<double>(c.step - warmup_) / static_cast<double>(c.total_steps - warmup_));
    return c.base_lr + (min_lr_ - c.base_lr) * t;
  }

 private:
  int64_t warmup_;
  bool decay_;
  double min_lr_;
};

class Cosine final : public Schedule {
 public:
  Cosine(int64_t warmup, double min_lr) : warmup_(warmup), min_lr_(min_lr) {}
  double lr(const ScheduleContext& c) const override {
    if (c.step < warmup_) return c.base_lr * warmup_factor(c.step, warmup_);
    if (c.total_steps <= warmup_) return c.base_lr;
    double t = std::min(1.0, static_cast<double>(c.step - warmup_) / static_cast<double>(c.total_steps - warmup_));
    return min_lr_ + (c.base_lr - min_lr_) * 0.5 * (1 + std::cos(M_PI * t));
  }

 private:
  int64_t warmup_;
  double min_lr_;
};

// As torch.optim.lr_scheduler.CosineAnnealingWarmRestarts stepped with a fractional epoch.
class CosineWarmRestarts final : public Schedule {
 public:
  CosineWarmRestarts(double t0, int64_t t_mult, double eta_min) : t0_(t0), t_mult_(t_mult), eta_min_(eta_min) {}
  double lr(const ScheduleContext& c) const override {
    double e = c.epoch, t_cur, t_i;
    if (e >= t0_) {
      if (t_mult_ == 1) {
        t_cur = std::fmod(e, t0_);
        t_i = t0_;
      } else {
        double n = std::floor(std::log(e / t0_ * (t_mult_ - 1) + 1) / std::log(static_cast<double>(t_mult_)));
        t_cur = e - t0_ * (std::pow(t_mult_, n) - 1) / (t_mult_ - 1);
        t_i = t0_ * std::pow(t_mult_, n);
      }
    } else {
      t_i = t0_;
      t_cur = e;
    }
    return eta_min_ + (c.base_lr - eta_min_) * (1 + std::cos(M_PI * t_cur / t_i)) / 2;
  }

 private:
  double t0_;
  int64_t t_mult_;
  double eta_min_;
};

}  // namespace

void register_builtin_schedules(Registry& r) {
  r.add_schedule("constant", "the optimizer's lr throughout (optional linear warm-up)",
                 Schema().add("warmup_steps", Type::Int, "0", "steps of linear warm-up from 0"),
                 [](const Options& o) {
                   o.check(o.get_int("warmup_steps") >= 0, "warmup_steps", "must be >= 0");
                   return std::make_unique<Constant>(o.get_int("warmup_steps"));
                 });
  r.add_schedule("linear_warmup", "linear warm-up, then constant or linear decay to min_lr",
                 Schema()
                     .add("warmup_steps", Type::Int, "100", "steps of linear warm-up from 0")
                     .add("decay", Type::Bool, "true", "decay linearly to min_lr at the last step")
                     .add("min_lr", Type::Float, "0", "final learning rate"),
                 [](const Options& o) {
                   o.check(o.get_int("warmup_steps") >= 0, "warmup_steps", "must be >= 0");
                   return std::make_unique<LinearWarmup>(o.get_int("warmup_steps"), o.get_bool("decay"),
                                                         o.get_float("min_lr"));
                 });
  r.add_schedule("cosine", "optional linear warm-up, then cosine decay to min_lr over the fit",
                 Schema()
                     .add("warmup_steps", Type::Int, "0", "steps of linear warm-up from 0")
                     .add("min_lr", Type::Float, "0", "final learning rate"),
                 [](const Options& o) {
                   o.check(o.get_int("warmup_steps") >= 0, "warmup_steps", "must be >= 0");
                   return std::make_unique<Cosine>(o.get_int("warmup_steps"), o.get_float("min_lr"));
                 });
  r.add_schedule("cosine_warm_restarts",
                 "cosine annealing with warm restarts, stepped per batch at the fractional epoch "
                 "(torch CosineAnnealingWarmRestarts, as tinytopics uses)",
                 Schema()
                     .add("t0_epochs", Type::Float, "20", "epochs in the first cycle (T_0)")
                     .add("t_mult", Type::Int, "1", "cycle length multiplier (T_mult)")
                     .add("eta_min", Type::Float, "0.01", "minimum learning rate"),
                 [](const Options& o) {
                   o.check(o.get_float("t0_epochs") > 0, "t0_epochs", "must be > 0");
                   o.check(o.get_int("t_mult") >= 1, "t_mult", "must be an integer >= 1");
                   return std::make_unique<CosineWarmRestarts>(o.get_float("t0_epochs"), o.get_int("t_mult"),
                                                               o.get_float("eta_min"));
                 });
}

}  // namespace tt
