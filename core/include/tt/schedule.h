#pragma once
// Learning-rate schedules: pure functions of where training is, so a resumed run gets
// exactly the same rates. The trainer sets the rate before the first batch and after
// every optimizer step (as PyTorch users call scheduler.step() after optimizer.step()).
#include <cstdint>

#include "tt/export.h"

namespace tt {

struct ScheduleContext {
  int64_t step = 0;         // optimizer steps taken so far
  int64_t total_steps = 0;  // planned steps for the whole fit
  double epoch = 0;         // fractional epoch of the last batch: epoch + batch / batches_per_epoch
  double base_lr = 0;
};

class TT_API Schedule {
 public:
  virtual ~Schedule();
  virtual double lr(const ScheduleContext& c) const = 0;
};

}  // namespace tt
