#include "train/plugin_host.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "tt/error.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace tt {

void PluginHost::add_plugin(std::unique_ptr<Plugin> plugin) { plugins_.push_back(std::move(plugin)); }
void PluginHost::add_callback(std::unique_ptr<Plugin> callback) { callbacks_.push_back(std::move(callback)); }

std::string PluginHost::names() const {
  std::string out;
  for (const auto& p : plugins_) out += (out.empty() ? "" : ",") + p->name();
  return out;
}

namespace {
std::string list_of(const std::vector<std::unique_ptr<Plugin>>& plugins) {
  std::string out;
  for (const auto& p : plugins) out += (out.empty() ? "" : ", ") + p->name();
  return "[" + out + "]";
}
}  // namespace

void PluginHost::add_pipeline_plugins(const std::vector<ComponentSpec>& plugins) {
  Registry& reg = Registry::global();
  for (const auto& spec : plugins) {
    const auto& comp = reg.plugin(spec.name);
    std::unique_ptr<Plugin> pl;
    try {
      pl = comp.factory(spec.options);
    } catch (const ConfigError&) {
      throw;  // the plugin's own check of its options: already names the option and the fix
    } catch (const std::exception& e) {
      TT_FAIL_AS(ModuleError, "plugin '", spec.name, "' (", comp.origin, "): factory threw: ", e.what());
    }
    TT_CHECK_AS(ModuleError, pl, "plugin '", spec.name, "' (", comp.origin, "): factory returned nothing");
    pl->set_name(spec.name);
    add_plugin(std::move(pl));
  }
}

const Plugin* PluginHost::steps_in_backward() const {
  for (const auto& p : plugins_)
    if (!p->step_in_backward().empty()) return p.get();
  return nullptr;
}

void PluginHost::check_declarations(const Options& trainer) const {
  std::vector<size_t> assigners;
  const Plugin* replacer = nullptr;  // the first that declares an optimizer of its own (not a wrapper)
  for (size_t i = 0; i < plugins_.size(); ++i) {
    if (plugins_[i]->assigns_the_optimizer()) assigners.push_back(i);
    const auto& rules = plugins_[i]->ordering();
    const bool wraps = std::any_of(rules.begin(), rules.end(), [](const Plugin::Ordering& r) { return r.after.empty(); });
    if (plugins_[i]->assigns_the_optimizer() && !wraps) {
      TT_CHECK_AS(ConfigError, !replacer, "plugins: '", replacer ? replacer->name() : "", "' and '", plugins_[i]->name(),
                  "' both replace the optimizer with one of their own, and the later would discard the earlier's: "
                  "list one of them, but the list is ", list_of(plugins_));
      replacer = plugins_[i].get();
    }
    for (const auto& rule : plugins_[i]->ordering())
      for (size_t j = i + 1; j < plugins_.size() && !rule.after.empty(); ++j)
        TT_CHECK_AS(ConfigError, plugins_[j]->name() != rule.after, "plugins: '", plugins_[i]->name(),
                    "' must be listed after '", rule.after, "' (", rule.why, "), but the list is ", list_of(plugins_));
  }
  check_optimizer_order(assigners);
  const std::string device = trainer.get_string("device");
  const std::string kind = device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  for (const auto& p : plugins_)
    TT_CHECK_AS(ConfigError, p->only_device().empty() || p->only_device() == kind, "plugins: '", p->name(),
                "' runs only on ", p->only_device() == "cuda" ? "CUDA" : "the CPU", " (", p->only_device_why(),
                "), and trainer.device is ", device, ": set trainer.device: ", p->only_device(),
                ", or change or remove '", p->name(), "'");
  const Plugin* stepper = steps_in_backward();
  if (!stepper) return;
  const std::string taken = "'" + stepper->name() + "' takes the optimizer step in backward (" +
                            stepper->step_in_backward() + ")";
  for (const auto& p : plugins_) {
    TT_CHECK_AS(ConfigError, p.get() == stepper || p->step_in_backward().empty(), "plugins: ", taken,
                ", and so does '", p->name(), "' (", p->step_in_backward(), "): each would update every parameter; "
                "remove one of them from plugins (the list is ", list_of(plugins_), ")");
    for (const auto& rule : p->ordering())
      TT_CHECK_AS(ConfigError, !rule.after.empty(), "plugins: '", p->name(), "' wraps the final optimizer's step (",
                  rule.why, "), but ", taken, ", one parameter at a time, so that step never runs: remove one of them "
                  "from plugins (the list is ", list_of(plugins_), ")");
    TT_CHECK_AS(ConfigError, p->skips_steps().empty(), "plugins: '", p->name(), "' may skip a step after backward (",
                p->skips_steps(), "), but ", taken, ", before that: the update could not be undone; remove one of them "
                "from plugins (the list is ", list_of(plugins_), ")");
  }
  TT_CHECK_AS(ConfigError, !trainer.is_set("grad_clip"), "trainer.grad_clip is set, but plugin ", taken,
              ": clipping by the norm of all gradients needs every gradient before any parameter is updated. "
              "Unset trainer.grad_clip, or remove '", stepper->name(), "' from plugins");
}

void PluginHost::check_optimizer_order(const std::vector<size_t>& replacers) const {
  // Two that must each wrap the final optimizer (zero1, offload) would each have to come after
  // the other: one refusal that says so, not two orderings that contradict each other.
  const auto wrap_rule = [](const Plugin& p) -> const Plugin::Ordering* {
    for (const auto& r : p.ordering())
      if (r.after.empty()) return &r;
    return nullptr;
  };
  const Plugin* wrapper = nullptr;
  for (const auto& p : plugins_) {
    const Plugin::Ordering* rule = wrap_rule(*p);
    if (!rule) continue;
    TT_CHECK_AS(ConfigError, !wrapper, "plugins: '", wrapper ? wrapper->name() : "", "' and '", p->name(),
                "' both wrap the final optimizer (", wrapper ? wrap_rule(*wrapper)->why : "", "; ", rule->why,
                "), and neither wraps the other's: they cannot be combined, list one of them (the list is ",
                list_of(plugins_), ")");
    wrapper = p.get();
  }
  for (size_t i = 0; i < plugins_.size(); ++i)
    for (const auto& rule : plugins_[i]->ordering())
      for (size_t j : replacers)
        TT_CHECK_AS(ConfigError, !rule.after.empty() || j <= i, "plugins: '", plugins_[i]->name(),
                    "' must be listed after '", plugins_[j]->name(), "' (", rule.why, "; '", plugins_[j]->name(),
                    "' replaces the optimizer), but the list is ", list_of(plugins_));
}

namespace {
// The step an event belongs to: during a batch the one being taken, after it the one taken.
std::string where(Event e, const State& s) {
  switch (e) {
    case Event::INIT:
    case Event::OPTIMIZER: return "before training";
    case Event::BATCH_START:
    case Event::BEFORE_FORWARD:
    case Event::AFTER_FORWARD:
    case Event::AFTER_LOSS:
    case Event::BEFORE_BACKWARD:
    case Event::AFTER_BACKWARD:
    case Event::BEFORE_STEP:
    case Event::OOM: return "at step " + std::to_string(s.step + 1);
    default: return "at step " + std::to_string(s.step);
  }
}
}  // namespace

namespace {
thread_local const Plugin* t_calling = nullptr;
}  // namespace

PluginHost::Calling::Calling(const Plugin& plugin) : previous(t_calling) { t_calling = &plugin; }
PluginHost::Calling::~Calling() { t_calling = previous; }
const Plugin* PluginHost::calling() { return t_calling; }

void PluginHost::fire(Event e, State& s) {
  auto call = [&](Plugin& p) {
    try {
      const Calling in(p);
      const bool stopping = s.stop, skipping = s.skip_step;
      const int64_t micro = s.micro_batch_size;
      const c10::TensorImpl* loss = s.loss.unsafeGetTensorImpl();
      p.on(e, s);
      if (s.stop && !stopping && stopped_by_.empty()) stopped_by_ = p.name();
      if (e == Event::BEFORE_STEP && s.skip_step && !skipping) vetoed_by_ = p.name();
      if (s.loss.unsafeGetTensorImpl() != loss) loss_replaced_by_ = p.name();
      if (s.micro_batch_size != micro) {
        TT_CHECK(s.micro_batch_size >= 1 && s.micro_batch_size <= s.batch_size, "it set state.micro_batch_size to ",
                 s.micro_batch_size, ", which must be 1 to the batch size (", s.batch_size, ")");
        // the batch's slices are fixed once its first micro-step begins
        TT_CHECK(e != Event::BEFORE_FORWARD && e != Event::AFTER_FORWARD && e != Event::AFTER_LOSS &&
                     e != Event::BEFORE_BACKWARD && e != Event::AFTER_BACKWARD,
                 "it changed state.micro_batch_size from ", micro, " to ", s.micro_batch_size,
                 " between a batch's micro-steps: change it at BATCH_START, BEFORE_STEP or OOM");
      }
    } catch (...) {
      rethrow_attributed(p, std::string(to_string(e)) + " " + where(e, s), s);
    }
  };
  if (e == Event::BEFORE_STEP) vetoed_by_.clear();
  if (e == Event::AFTER_LOSS) loss_replaced_by_.clear();
  if (e == Event::OPTIMIZER) {  // who replaces the optimizer: wrappers must come after them
    std::vector<size_t> replacers;
    for (size_t i = 0; i < plugins_.size(); ++i) {
      const void* before = s.optimizer.get();
      call(*plugins_[i]);
      if (s.optimizer.get() != before) replacers.push_back(i);
    }
    check_optimizer_order(replacers);
    optimizer_assigned_by_.clear();
    for (size_t i : replacers) optimizer_assigned_by_ += (optimizer_assigned_by_.empty() ? "" : ", ") + plugins_[i]->name();
  } else if (runs_in_reverse(e)) {
    for (auto it = plugins_.rbegin(); it != plugins_.rend(); ++it) call(**it);
  } else {
    for (auto& p : plugins_) call(*p);
  }
  for (auto& c : callbacks_) c->on(e, s);  // tt's own: their errors speak for themselves
}

std::vector<std::unique_ptr<Scope>> PluginHost::enter_forward_scopes(State& s) {
  std::vector<std::unique_ptr<Scope>> scopes;
  for (auto& p : plugins_) {
    try {
      if (auto sc = p->forward_scope(s)) scopes.push_back(std::move(sc));
    } catch (...) {
      while (!scopes.empty()) scopes.pop_back();  // exit what was entered, in reverse
      rethrow_attributed(*p, "forward_scope at step " + std::to_string(s.step + 1), s);
    }
  }
  return scopes;
}

// Out-of-memory passes through unchanged (the loop retries or reports it), and so does an
// interruption; every other error keeps its kind (and so its exit code) with the plugin named.
void PluginHost::rethrow_attributed(const Plugin& p, const std::string& what, const State&) {
  const std::string prefix = "plugin '" + p.name() + "' failed in " + what + ": ";
  try {
    throw;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const Interrupted&) {
    throw;
  } catch (const ConfigError& e) {
    throw ConfigError(prefix + e.what());
  } catch (const ModuleError& e) {
    throw ModuleError(prefix + e.what());
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(prefix + e.what());
  } catch (const NumericError& e) {
    throw NumericError(prefix + e.what());
  } catch (const WriteError& e) {
    throw WriteError(prefix + e.what());
  } catch (const Error& e) {
    throw Error(prefix + e.what());
  } catch (const c10::Error& e) {
    throw Error(prefix + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Error(prefix + e.what());
  } catch (...) {
    throw Error(prefix + "an exception that is not a std::exception");
  }
}

}  // namespace tt
