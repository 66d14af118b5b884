// constant, linear_warmup, cosine, cosine_warm_restarts (torch's CosineAnnealingWarmRestarts).
#include <algorithm>
#include <cmath>

#include "tt/registry.h"
#include "tt/schedule.h"

namespace tt {
namespace {

// The options of each schedule; their defaults, ranges and docs are in the schemas below.
struct WarmupOptions {
  int64_t warmup_steps;
};
struct LinearWarmupOptions {
  int64_t warmup_steps;
  bool decay;
  double min_lr;
};
struct CosineOptions {
  int64_t warmup_steps;
  double min_lr;
};
struct WarmRestartsOptions {
  double t0_epochs;
  int64_t t_mult;
  double eta_min;
};

double warmup_factor(int64_t step, int64_t warmup) {
  return (warmup > 0 && step < warmup) ? static_cast<double>(step + 1) / static_cast<double>(warmup) : 1.0;
}

class Constant final : public Schedule {
 public:
  explicit Constant(WarmupOptions o) : o_(o) {}
  double lr(const ScheduleContext& c) const override { return c.base_lr * warmup_factor(c.step, o_.warmup_steps); }

 private:
  WarmupOptions o_;
};

class LinearWarmup final : public Schedule {
 public:
  explicit LinearWarmup(LinearWarmupOptions o) : o_(o) {}
  double lr(const ScheduleContext& c) const override {
    const int64_t warmup = o_.warmup_steps;
    if (c.step < warmup) return c.base_lr * warmup_factor(c.step, warmup);
    if (!o_.decay || c.total_steps <= warmup) return c.base_lr;
    double t = std::min(1.0, static_cast<double>(c.step - warmup) / static_cast<double>(c.total_steps - warmup));
    return c.base_lr + (o_.min_lr - c.base_lr) * t;
  }

 private:
  LinearWarmupOptions o_;
};

class Cosine final : public Schedule {
 public:
  explicit Cosine(CosineOptions o) : o_(o) {}
  double lr(const ScheduleContext& c) const override {
    const int64_t warmup = o_.warmup_steps;
    if (c.step < warmup) return c.base_lr * warmup_factor(c.step, warmup);
    if (c.total_steps <= warmup) return c.base_lr;
    double t = std::min(1.0, static_cast<double>(c.step - warmup) / static_cast<double>(c.total_steps - warmup));
    return o_.min_lr + (c.base_lr - o_.min_lr) * 0.5 * (1 + std::cos(M_PI * t));
  }

 private:
  CosineOptions o_;
};

// As torch.optim.lr_scheduler.CosineAnnealingWarmRestarts stepped with a fractional epoch.
class CosineWarmRestarts final : public Schedule {
 public:
  explicit CosineWarmRestarts(WarmRestartsOptions o) : t0_(o.t0_epochs), t_mult_(o.t_mult), eta_min_(o.eta_min) {}
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
  const char* warmup_doc = "steps of linear warm-up from 0";
  r.add_schedule("constant", "the optimizer's lr throughout (optional linear warm-up)",
                 Schema().field("warmup_steps", &WarmupOptions::warmup_steps, 0, warmup_doc).range(ge(0)),
                 [](const Options& o) { return std::make_unique<Constant>(o.to<WarmupOptions>()); });
  r.add_schedule("linear_warmup", "linear warm-up, then constant or linear decay to min_lr",
                 Schema()
                     .field("warmup_steps", &LinearWarmupOptions::warmup_steps, 100, warmup_doc).range(ge(0))
                     .field("decay", &LinearWarmupOptions::decay, true, "decay linearly to min_lr at the last step")
                     .field("min_lr", &LinearWarmupOptions::min_lr, 0, "final learning rate").range(ge(0)),
                 [](const Options& o) { return std::make_unique<LinearWarmup>(o.to<LinearWarmupOptions>()); });
  r.add_schedule("cosine", "optional linear warm-up, then cosine decay to min_lr over the fit",
                 Schema()
                     .field("warmup_steps", &CosineOptions::warmup_steps, 0, warmup_doc).range(ge(0))
                     .field("min_lr", &CosineOptions::min_lr, 0, "final learning rate").range(ge(0)),
                 [](const Options& o) { return std::make_unique<Cosine>(o.to<CosineOptions>()); });
  r.add_schedule("cosine_warm_restarts",
                 "cosine annealing with warm restarts, stepped per batch at the fractional epoch "
                 "(torch CosineAnnealingWarmRestarts, as tinytopics uses)",
                 Schema()
                     .field("t0_epochs", &WarmRestartsOptions::t0_epochs, 20, "epochs in the first cycle (T_0)")
                     .range(gt(0))
                     .field("t_mult", &WarmRestartsOptions::t_mult, 1, "cycle length multiplier (T_mult)").range(ge(1))
                     .field("eta_min", &WarmRestartsOptions::eta_min, 0.01, "minimum learning rate").range(ge(0)),
                 [](const Options& o) { return std::make_unique<CosineWarmRestarts>(o.to<WarmRestartsOptions>()); });
}

}  // namespace tt
