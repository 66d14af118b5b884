// checkpoint: activation checkpointing on every tt::nn::BlockStack of the model (see
// checkpoint.h). Options: policy all | every (k) | blocks (a list).
#include "checkpoint.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

class CheckpointPlugin final : public tt::Plugin {
 public:
  CheckpointPlugin(std::string policy, int64_t every, std::vector<int64_t> blocks)
      : policy_(std::move(policy)), every_(every), blocks_(std::move(blocks)) {}

  void on(tt::Event event, tt::State& s) override {
    if (event != tt::Event::INIT) return;
    auto stacks = tt::nn::find_modules<tt::nn::BlockStackImpl>(*s.model);
    TT_CHECK_AS(ConfigError, !stacks.empty(), "plugins.checkpoint: the model (", s.model->describe(),
                ") has no tt::nn::BlockStack to checkpoint; the plugin acts on models built from core's block stack "
                "(e.g. model: transformer)");
    for (auto& [name, stack] : stacks) {
      auto which = tt::ckpt::select_blocks(policy_, static_cast<int64_t>(stack->size()), every_, blocks_);
      std::string list;
      for (int64_t i : which) list += (list.empty() ? "" : ",") + std::to_string(i);
      tt::log().info("checkpoint: {} of {} blocks of '{}' recomputed in backward ({})", which.size(), stack->size(),
                     name, list);
      stack->set_runner(std::make_shared<tt::ckpt::CheckpointRunner>(std::move(which)));
    }
  }

 private:
  std::string policy_;
  int64_t every_;
  std::vector<int64_t> blocks_;
};

void register_checkpoint(tt::Registry& r) {
  r.add_plugin("checkpoint", "activation checkpointing: blocks keep only their input and are re-run in backward",
               tt::Schema()
                   .add("policy", tt::Type::String, "all", "all | every (every k-th block: 0, k, 2k, ...) | blocks (a list)")
                   .add("every", tt::Type::Int, "2", "k for policy: every")
                   .add("blocks", tt::Type::List, "~", "block indices for policy: blocks, e.g. [0, 2]"),
               [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
                 std::vector<int64_t> blocks;
                 if (o.is_set("blocks"))
                   for (const auto& b : o.get_list("blocks")) {
                     try {
                       blocks.push_back(std::stoll(b));
                     } catch (const std::exception&) {
                       o.fail("blocks", "must be a list of block indices, not '" + b + "'");
                     }
                   }
                 const std::string policy = o.get_string("policy");
                 o.check(policy == "all" || policy == "every" || policy == "blocks", "policy",
                         "must be all, every or blocks, not '" + policy + "'");
                 o.check(o.get_int("every") >= 1, "every", "must be at least 1");
                 return std::make_unique<CheckpointPlugin>(policy, o.get_int("every"), std::move(blocks));
               });
}

}  // namespace

TT_MODULE("plugin", "checkpoint", "activation checkpointing for models built from tt::nn::BlockStack",
          register_checkpoint)
