// checkpoint: activation checkpointing on every tt::nn::BlockStack of the model (see
// checkpoint.h). Options: policy all | every (k) | blocks (a list).
#include <algorithm>
#include <optional>
#include <tuple>

#include "checkpoint.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/options.h"
#include "tt/report.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

class CheckpointPlugin final : public tt::Plugin {
 public:
  CheckpointPlugin(tt::Options options, std::string policy, int64_t every, std::vector<int64_t> blocks,
                   double fraction, int64_t budget, bool recompute_activation)
      : options_(std::move(options)),
        policy_(std::move(policy)),
        every_(every),
        blocks_(std::move(blocks)),
        fraction_(fraction),
        budget_(budget),
        recompute_activation_(recompute_activation) {}

  void on(tt::Event event, tt::State& s) override {
    if (event == tt::Event::INIT) init(s);
    // decide after the second step: the first measures the blocks, the second shows the steady
    // all-checkpointed peak (optimizer state and gradients already exist as it starts)
    if (event == tt::Event::BATCH_END && !decided_ && ++probe_steps_ >= 2) decide();
  }

 private:
  bool probing() const { return policy_ == "selective" || policy_ == "budget"; }

  void init(tt::State& s) {
    auto stacks = tt::nn::find_modules<tt::nn::BlockStackImpl>(*s.model);
    TT_CHECK_AS(ConfigError, !stacks.empty(), "the model (", s.model->describe(),
                ") has no tt::nn::BlockStack to checkpoint; the plugin acts on models built from core's block stack "
                "(e.g. model: transformer)");
    options_.check(policy_ != "budget" || stacks.size() == 1, "policy",
                   "budget needs a model with one block stack (this one has " + std::to_string(stacks.size()) +
                       "); use selective or blocks");
    for (auto& [name, stack] : stacks) {
      const auto n = static_cast<int64_t>(stack->size());
      // The runner a plugin listed before this one set (activation compression, offload): kept,
      // and every block call goes through it, the no-grad forward and the re-run included.
      std::shared_ptr<tt::nn::BlockRunner> inner = stack->shared_runner();
      if (inner)
        tt::log().info("checkpoint: the blocks of '{}' are called through the runner '{}' set before it, in the "
                       "forward and in the re-run in backward",
                       name, inner->name());
      for (int64_t i : blocks_)
        options_.check(policy_ != "blocks" || i < n, "blocks",
                       "block " + std::to_string(i) + " does not exist (the stack '" + name + "' has " +
                           std::to_string(n) + " blocks: 0.." + std::to_string(n - 1) + ")");
      if (probing()) {
        auto runner = std::make_shared<tt::ckpt::CheckpointRunner>(std::set<int64_t>{}, inner);
        runner->set_recompute_activation(recompute_activation_);
        runner->start_probe(n);
        runners_.emplace_back(name, runner);
        stack->set_runner(runner);
        tt::log().info("checkpoint: policy {}: the first two steps checkpoint all {} blocks of '{}' and measure them",
                       policy_, n, name);
        continue;
      }
      auto which = tt::ckpt::select_blocks(policy_, n, every_, blocks_);
      tt::log().info("checkpoint: {} of {} blocks of '{}' recomputed in backward ({})", which.size(), n, name,
                     list(which));
      auto runner = std::make_shared<tt::ckpt::CheckpointRunner>(std::move(which), inner);
      runner->set_recompute_activation(recompute_activation_);
      stack->set_runner(runner);
    }
    decided_ = !probing();
  }

  static std::string list(const std::set<int64_t>& which) {
    std::string out;
    for (int64_t i : which) out += (out.empty() ? "" : ",") + std::to_string(i);
    return out.empty() ? "none" : out;
  }

  void decide() {
    for (auto& [name, r] : runners_)
      if (!r->measured()) return;  // no backward yet (a dropped batch)
    decided_ = true;
    auto& meter = tt::Meter::global();
    for (auto& [name, r] : runners_) {
      const auto& kept = r->kept_bytes();
      const auto& recomputed = r->recomputed_bytes();
      std::string sizes;
      for (size_t i = 0; i < kept.size(); ++i)
        sizes += (i ? ", " : "") + std::to_string(i) + ": " + tt::format_bytes(kept[i]) +
                 (recomputed[i] != kept[i] ? " (" + tt::format_bytes(recomputed[i]) + " re-run checkpointed)" : "");
      tt::log().info("checkpoint: activation bytes per block of '{}' (measured on re-run): {}", name, sizes);
      if (policy_ == "selective") {
        auto which = tt::ckpt::choose_selective(kept, fraction_);
        tt::log().info("checkpoint: selective (fraction {}): blocks {} of '{}' recomputed in backward", fraction_,
                       list(which), name);
        r->set_blocks(std::move(which));
        continue;
      }
      // The training loop's peak so far: every block checkpointed and, in the second step (the
      // first had no optimizer state yet, and its re-runs were in full), re-run as they will be.
      const int64_t base =
          meter.peak() - (recomputed.empty() ? 0 : *std::max_element(recomputed.begin(), recomputed.end()));
      auto c = tt::ckpt::choose_budget(kept, recomputed, base, budget_);
      options_.check(c.fits, "budget",
                     tt::format_bytes(budget_) + " is below the predicted peak with every block checkpointed (" +
                         tt::format_bytes(c.predicted_peak) + ", " + tt::format_bytes(c.predicted_peak - budget_) +
                         " over). Raise the budget, lower trainer.micro_batch_size, or add plugins such as amp.");
      tt::log().info("checkpoint: budget {}: {} of {} blocks of '{}' recomputed in backward ({}), predicted peak {}",
                     tt::format_bytes(budget_), c.which.size(), kept.size(), name, list(c.which),
                     tt::format_bytes(c.predicted_peak));
      r->set_blocks(std::move(c.which));
    }
  }

  tt::Options options_;
  std::string policy_;
  int64_t every_;
  std::vector<int64_t> blocks_;
  double fraction_;
  int64_t budget_;
  bool recompute_activation_ = true;
  bool decided_ = true;
  int64_t probe_steps_ = 0;
  std::vector<std::pair<std::string, std::shared_ptr<tt::ckpt::CheckpointRunner>>> runners_;
};

constexpr int64_t kDefaultEvery = 2;
constexpr double kDefaultFraction = 0.5;

struct CheckpointOptions {
  std::string policy;
  int64_t every;
  std::optional<std::vector<std::string>> blocks;
  double fraction;
  std::optional<int64_t> budget;
  bool recompute_activation;
};

void register_checkpoint(tt::Registry& r) {
  using O = CheckpointOptions;
  r.add_plugin(
      "checkpoint", "activation checkpointing: blocks keep only their input and are re-run in backward",
      tt::Schema()
          .field("policy", &O::policy, "all",
                 "all | every (every k-th block: 0, k, 2k, ...) | blocks (a list) | selective (the blocks holding the "
                 "most bytes, measured) | budget (the fewest blocks whose predicted peak fits)")
          .choices({"all", "every", "blocks", "selective", "budget"})
          .field("every", &O::every, kDefaultEvery, "k for policy: every")
          .range(tt::ge(1))
          .field("blocks", &O::blocks, std::nullopt, "block indices for policy: blocks, e.g. [0, 2]")
          .field("fraction", &O::fraction, kDefaultFraction,
                 "policy: selective: checkpoint this fraction of the blocks, those holding the most bytes")
          .range(tt::gt(0), tt::le(1))
          .bytes_field("budget", &O::budget, "~",
                       "policy: budget: the fewest checkpointed blocks whose predicted step peak fits, e.g. 1.5GiB")
          .range(tt::gt(0))
          .field("recompute_activation", &O::recompute_activation, true,
                 "in a block's re-run, keep fc1's output only and recompute GELU in fc2's backward (one d_ff-wide "
                 "tensor less at the backward peak, for one more GELU)"),
      [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
        const auto c = o.to<CheckpointOptions>();
        std::vector<int64_t> blocks;
        for (const auto& b : c.blocks.value_or(std::vector<std::string>{})) {
          size_t used = 0;
          int64_t i = -1;
          try {
            i = std::stoll(b, &used);
          } catch (const std::exception&) {
          }
          o.check(used == b.size() && i >= 0, "blocks", "must be a list of block indices (0, 1, ...), not '" + b + "'");
          blocks.push_back(i);
        }
        o.check(c.policy != "blocks" || !blocks.empty(), "blocks", "policy: blocks needs the block indices, e.g. [0, 2]");
        o.check(c.policy != "budget" || c.budget, "budget", "policy: budget needs a budget, e.g. budget: 1.5GiB");
        // An option of another policy would be ignored: refused (every and fraction where they
        // differ from their defaults: a run's pipeline.yaml, which --resume reads, writes them all).
        for (const auto& [key, given, policy] :
             {std::tuple<const char*, bool, const char*>{"blocks", c.blocks.has_value(), "blocks"},
              {"budget", c.budget.has_value(), "budget"},
              {"every", c.every != kDefaultEvery, "every"},
              {"fraction", c.fraction != kDefaultFraction, "selective"}})
          o.check(!given || c.policy == policy, key,
                  std::string("is for policy: ") + policy + ", and the policy is " + c.policy + ": set policy: " +
                      policy + " or remove " + key);
        return std::make_unique<CheckpointPlugin>(o, c.policy, c.every, std::move(blocks), c.fraction,
                                                  c.budget.value_or(0), c.recompute_activation);
      },
      tt::PlannerOffer{{{"checkpoint(all)", "{policy: all}"}, {"checkpoint(every 2)", "{policy: every, every: 2}"}},
                       10},
      tt::Repeats::Once, {"block_stack"});
}

}  // namespace

TT_MODULE("plugin", "checkpoint", "activation checkpointing for models built from tt::nn::BlockStack",
          register_checkpoint)
