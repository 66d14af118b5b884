#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "tt/error.h"
#include "tt/registry.h"
#include "tt/schedule.h"

namespace {
std::unique_ptr<tt::Schedule> make(const std::string& name, const std::string& yaml) {
  auto& c = tt::Registry::global().schedule(name);
  return c.factory(tt::Options::parse(YAML::Load(yaml), c.schema, "schedule", "s.yaml"));
}
}  // namespace

TEST(Schedule, CosineWarmRestartsMatchesTorchFormula) {
  auto s = make("cosine_warm_restarts", "{t0_epochs: 20, eta_min: 0.01}");
  auto lr = [&](double e) { return s->lr({0, 0, e, 0.05}); };
  EXPECT_DOUBLE_EQ(lr(0), 0.05);
  EXPECT_NEAR(lr(10), 0.01 + 0.04 * 0.5, 1e-15);
  EXPECT_NEAR(lr(19.999999), 0.01, 1e-9);
  EXPECT_DOUBLE_EQ(lr(20), 0.05);  // restart
  EXPECT_NEAR(lr(25), 0.01 + 0.04 * (1 + std::cos(M_PI * 5 / 20)) / 2, 1e-15);
  auto s2 = make("cosine_warm_restarts", "{t0_epochs: 2, t_mult: 2, eta_min: 0}");
  // cycles of 2, 4, 8 epochs: epoch 3 is 1 epoch into the 4-epoch cycle
  EXPECT_NEAR(s2->lr({0, 0, 3.0, 1.0}), (1 + std::cos(M_PI * 1 / 4)) / 2, 1e-12);
  EXPECT_NEAR(s2->lr({0, 0, 7.0, 1.0}), (1 + std::cos(M_PI * 1 / 8)) / 2, 1e-12);
}

TEST(Schedule, WarmupCosineAndLinear) {
  auto c = make("cosine", "{warmup_steps: 10, min_lr: 0.1}");
  EXPECT_DOUBLE_EQ(c->lr({0, 110, 0, 1.0}), 0.1);  // (0+1)/10
  EXPECT_DOUBLE_EQ(c->lr({9, 110, 0, 1.0}), 1.0);
  EXPECT_DOUBLE_EQ(c->lr({10, 110, 0, 1.0}), 1.0);
  EXPECT_NEAR(c->lr({60, 110, 0, 1.0}), 0.55, 1e-12);
  EXPECT_NEAR(c->lr({110, 110, 0, 1.0}), 0.1, 1e-12);
  auto l = make("linear_warmup", "{warmup_steps: 4, min_lr: 0}");
  EXPECT_DOUBLE_EQ(l->lr({1, 104, 0, 2.0}), 1.0);
  EXPECT_DOUBLE_EQ(l->lr({54, 104, 0, 2.0}), 1.0);
  auto k = make("constant", "{}");
  EXPECT_DOUBLE_EQ(k->lr({123, 1000, 3.5, 0.3}), 0.3);
}

TEST(Schedule, BadOptionsAreRefused) {
  EXPECT_THROW(make("cosine_warm_restarts", "{t0_epochs: 0}"), tt::Error);
  EXPECT_THROW(make("cosine", "{warmup_steps: -1}"), tt::Error);
}
