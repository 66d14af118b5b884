// profile-memory: one training step seen through tt's meter.
//
// On INIT it wraps every tt::nn::BlockStack's runner (keeping the one another plugin set, via
// shared_runner()). On the profiled step (option `step`) it starts the meter's trace (every
// allocation and free records the live tensor bytes), marks the phases at the trainer's events,
// measures the foreground bytes each block's forward adds (what the block keeps for backward;
// with micro-batches, the largest over them: each micro-batch's are freed before the next runs)
// and its forward time (summed over the step's micro-batches), and times its backward with gradient hooks on the block's output and
// input. At the end of the fit it writes, in the run directory (rank 0):
//   memory_profile.json   the breakdown, the blocks, the phases, the step's peak
//   memory_timeline.dat   ms since the step started, live MiB after each allocation or free
//   memory_timeline.png   the timeline with the phases (gnuplot, when installed)
// tt-run --profile-memory PIPELINE adds this plugin and prints its tables.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tt/error.h"
#include "tt/json_text.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/module.h"
#include "tt/nn.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/report.h"
#include "tt/state.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ProfileOptions {
  int64_t step;
};

struct BlockRecord {
  std::string name;
  int64_t bytes = 0;  // live tensor bytes the block's forward added (what it keeps), per micro-batch: the largest
  double forward_ms = 0, backward_ms = 0;
  bool backward_seen = false;
  double backward_start = -1;  // of the current micro-batch
};

struct Mark {
  double ms;
  std::string what;
};

class Profiler;

// Wraps a BlockStack's runner (or the plain call): measures each block during the profiled step.
class ProfilingRunner final : public tt::nn::BlockRunner {
 public:
  ProfilingRunner(std::shared_ptr<tt::nn::BlockRunner> inner, Profiler* p, size_t first)
      : inner_(std::move(inner)), p_(p), first_(first) {}
  std::string name() const override { return inner_ ? inner_->name() + "+profile" : "profile"; }
  at::Tensor run(int64_t index, tt::nn::Block& block, const at::Tensor& x) override;

 private:
  std::shared_ptr<tt::nn::BlockRunner> inner_;
  Profiler* p_;
  size_t first_;  // index of this stack's block 0 in the profiler's records
};

class Profiler final : public tt::Plugin {
 public:
  explicit Profiler(ProfileOptions o) : o_(o) {}
  bool active = false;
  std::vector<BlockRecord> blocks;
  int64_t micro_batches = 1;  // of the profiled step

  double now_ms() const { return 1e3 * tt::Meter::global().trace_time(); }

  void on(tt::Event e, tt::State& s) override {
    using tt::Event;
    if (e == Event::INIT) {
      for (auto& [name, stack] : tt::nn::find_modules<tt::nn::BlockStackImpl>(*s.model)) {
        const size_t first = blocks.size();
        for (size_t i = 0; i < stack->size(); ++i) blocks.push_back({name + "." + std::to_string(i)});
        stack->set_runner(std::make_shared<ProfilingRunner>(stack->shared_runner(), this, first));
        stacks_ += (stacks_.empty() ? "" : ", ") + name;
      }
      return;
    }
    if (e == Event::FIT_END) {
      if (s.rank == 0) write(s);
      return;
    }
    if (e == Event::BATCH_START && s.step + 1 == o_.step) {
      tt::Meter::global().start_trace();
      active = true;
      marks_.push_back({0.0, "step " + std::to_string(o_.step) + " starts"});
      return;
    }
    if (!active) return;
    micro_batches = std::max<int64_t>(1, s.micro_count);
    const std::string micro = s.micro_count > 1 ? " (micro-batch " + std::to_string(s.micro_index + 1) + ")" : "";
    if (e == Event::AFTER_FORWARD) marks_.push_back({now_ms(), "forward done" + micro});
    if (e == Event::AFTER_BACKWARD) marks_.push_back({now_ms(), "backward done" + micro});
    // the optimizer step follows, unless a plugin took it in backward (then this is after it)
    if (e == Event::BEFORE_STEP) marks_.push_back({now_ms(), "before the step"});
    if (e == Event::AFTER_STEP) marks_.push_back({now_ms(), "step done"});
    if (e == Event::BATCH_END) {
      trace_ = tt::Meter::global().stop_trace();
      active = false;
    }
  }

 private:
  void write(const tt::State& s) const {
    if (trace_.empty()) {
      tt::log().warn("profile-memory: step {} was not reached (the run ended at step {}); no profile written",
                     o_.step, s.step);
      return;
    }
    const fs::path dir = s.run_dir;
    int64_t step_peak = 0;
    {
      std::ostringstream d;
      d << "# ms MiB (live tensor bytes after each allocation/free of step " << o_.step << ")\n";
      for (const auto& e : trace_) {
        d << 1e3 * e.seconds << ' ' << static_cast<double>(e.bytes) / (1 << 20) << '\n';
        step_peak = std::max(step_peak, e.bytes);
      }
      tt::write_file_atomic(dir / "memory_timeline.dat", d.str());
    }
    plot(dir);
    json jb = json::array();
    for (const auto& b : blocks)
      jb.push_back({{"block", b.name},
                    {"activation_bytes", b.bytes},
                    {"forward_ms", b.forward_ms},
                    {"backward_ms", b.backward_seen ? json(b.backward_ms) : json(nullptr)}});
    json marks = json::array();
    for (const auto& m : marks_) marks.push_back({{"ms", m.ms}, {"what", m.what}});
    const tt::MemoryBreakdown& m = s.memory;
    const json out = {{"step", o_.step},
                      {"memory",
                       {{"parameters_bytes", m.parameters},
                        {"gradients_bytes", m.gradients},
                        {"optimizer_state_bytes", m.optimizer_state},
                        {"activations_bytes", m.activations},
                        {"teacher_bytes", m.teacher},
                        {"held_bytes", m.held},
                        {"rest_bytes", m.rest(m.peak_tensor)},
                        {"peak_tensor_bytes", m.peak_tensor},
                        {"peak_rss_bytes", m.peak_rss}}},
                      {"step_peak_tensor_bytes", step_peak},
                      {"step_start_tensor_bytes", trace_.front().bytes},
                      {"block_stacks", stacks_},
                      {"micro_batches", micro_batches},
                      {"blocks", jb},
                      {"phases", marks},
                      {"trace_events", trace_.size()}};
    tt::write_file_atomic(dir / "memory_profile.json", tt::json_text(out, 2) + "\n");
    tt::log().info("profile-memory: step {} peaked at {} live tensor bytes; {}", o_.step, tt::format_bytes(step_peak),
                   (dir / "memory_profile.json").string());
  }

  void plot(const fs::path& dir) const {
    const fs::path png = dir / "memory_timeline.png";
    std::string script = "set title 'live tensor bytes over one training step (tt meter)'\n"
                         "set xlabel 'ms since the step started'\nset ylabel 'MiB'\nset grid\nset key off\n";
    // Marks closer than 2 % of the plot's width (the optimizer step right after backward on a
    // small model) share one label, which would otherwise be printed over the other.
    double span = trace_.empty() ? 0.0 : 1e3 * trace_.back().seconds;
    for (const auto& mk : marks_) span = std::max(span, mk.ms);
    std::vector<Mark> labels;
    for (const auto& mk : marks_) {
      if (mk.what.rfind("step ", 0) == 0 && mk.what.find("starts") != std::string::npos) continue;
      script += fmt::format("set arrow from {}, graph 0 to {}, graph 1 nohead dt 2 lc rgb 'gray40'\n", mk.ms, mk.ms);
      if (!labels.empty() && mk.ms - labels.back().ms < 0.02 * span)
        labels.back().what += ", " + mk.what;
      else
        labels.push_back(mk);
    }
    int k = 0;
    for (const auto& l : labels)
      script += fmt::format("set label '{}' at {}, graph {} rotate by 90 right offset -0.8,0 font ',8'\n", l.what, l.ms,
                            0.98 - 0.3 * (k++ % 3));
    script += "plot '" + (dir / "memory_timeline.dat").string() + "' using 1:2 with steps lw 1.5\n";
    if (tt::gnuplot_png(script, png, "1000,600 font ',10'", dir / "gnuplot.log")) return;
    tt::log().warn("profile-memory: no plot (gnuplot missing or failed; see {})", (dir / "gnuplot.log").string());
  }

  ProfileOptions o_;
  std::vector<Mark> marks_;
  std::vector<tt::Meter::TraceEvent> trace_;
  std::string stacks_;  // names of the block stacks found
};

at::Tensor ProfilingRunner::run(int64_t index, tt::nn::Block& block, const at::Tensor& x) {
  if (!p_->active) return inner_ ? inner_->run(index, block, x) : block.forward(x);
  BlockRecord* r = &p_->blocks[first_ + static_cast<size_t>(index)];
  tt::Meter& m = tt::Meter::global();
  const double t0 = p_->now_ms();
  const int64_t b0 = m.foreground_current();
  at::Tensor y = inner_ ? inner_->run(index, block, x) : block.forward(x);
  r->forward_ms += p_->now_ms() - t0;
  // per micro-batch: each one's activations are freed in its backward, before the next runs
  r->bytes = std::max(r->bytes, m.foreground_current() - b0);
  if (y.requires_grad() && x.requires_grad()) {
    Profiler* p = p_;
    // The gradient reaching the block's output starts its backward; reaching its input ends it.
    y.register_hook([p, r](const at::Tensor&) { r->backward_start = p->now_ms(); });
    x.register_hook([p, r](const at::Tensor&) {
      if (r->backward_start >= 0) {
        r->backward_ms += p->now_ms() - r->backward_start;
        r->backward_seen = true;
        r->backward_start = -1;
      }
    });
  }
  return y;
}

void reg(tt::Registry& r) {
  tt::Schema schema;
  schema.field("step", &ProfileOptions::step, int64_t{3}, "the profiled step (the ones before it warm up)")
      .range(tt::ge(1));
  r.add_plugin("profile-memory",
               "profiles one step with tt's meter: per-block activation bytes and forward/backward time, "
               "live tensor bytes over the step (memory_profile.json, memory_timeline.png)",
               schema, [](const tt::Options& o) { return std::make_unique<Profiler>(o.to<ProfileOptions>()); });
}

}  // namespace

TT_MODULE("plugin", "profile-memory", "one training step profiled with tt's meter", reg)
