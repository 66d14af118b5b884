#include "profile.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tt/error.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/nn.h"
#include "tt/pipeline.h"
#include "tt/plugin.h"
#include "tt/report.h"
#include "tt/state.h"
#include "tt/trainer.h"

namespace tt::profile {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct BlockRecord {
  std::string name;
  int64_t bytes = 0;          // live tensor bytes the block's forward added (what it keeps)
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
class ProfilingRunner final : public nn::BlockRunner {
 public:
  ProfilingRunner(std::shared_ptr<nn::BlockRunner> inner, Profiler* p, size_t first) : inner_(std::move(inner)), p_(p), first_(first) {}
  std::string name() const override { return inner_ ? inner_->name() + "+profile" : "profile"; }
  at::Tensor run(int64_t index, nn::Block& block, const at::Tensor& x) override;

 private:
  std::shared_ptr<nn::BlockRunner> inner_;
  Profiler* p_;
  size_t first_;  // index of this stack's block 0 in the profiler's records
};

class Profiler final : public Plugin {
 public:
  explicit Profiler(int64_t step) : step_(step) {}
  bool active = false;
  std::vector<BlockRecord> blocks;
  std::vector<Mark> marks;
  std::vector<Meter::TraceEvent> trace;
  std::string stacks;  // names of the block stacks found

  double now_ms() const { return 1e3 * Meter::global().trace_time(); }

  void on(Event e, State& s) override {
    if (e == Event::INIT) {
      for (auto& [name, stack] : nn::find_modules<nn::BlockStackImpl>(*s.model)) {
        const size_t first = blocks.size();
        for (size_t i = 0; i < stack->size(); ++i) blocks.push_back({name + "." + std::to_string(i)});
        stack->set_runner(std::make_shared<ProfilingRunner>(stack->shared_runner(), this, first));
        stacks += (stacks.empty() ? "" : ", ") + name;
      }
      return;
    }
    if (e == Event::BATCH_START && s.step + 1 == step_) {
      Meter::global().start_trace();
      active = true;
      marks.push_back({0.0, "step " + std::to_string(step_) + " starts"});
      return;
    }
    if (!active) return;
    const std::string micro = s.micro_count > 1 ? " (micro-batch " + std::to_string(s.micro_index + 1) + ")" : "";
    if (e == Event::AFTER_FORWARD) marks.push_back({now_ms(), "forward done" + micro});
    if (e == Event::AFTER_BACKWARD) marks.push_back({now_ms(), "backward done" + micro});
    if (e == Event::BEFORE_STEP) marks.push_back({now_ms(), "optimizer step"});
    if (e == Event::AFTER_STEP) marks.push_back({now_ms(), "step done"});
    if (e == Event::BATCH_END) {
      trace = Meter::global().stop_trace();
      active = false;
    }
  }

 private:
  int64_t step_;
};

at::Tensor ProfilingRunner::run(int64_t index, nn::Block& block, const at::Tensor& x) {
  if (!p_->active) return inner_ ? inner_->run(index, block, x) : block.forward(x);
  BlockRecord* r = &p_->blocks[first_ + static_cast<size_t>(index)];
  Meter& m = Meter::global();
  const double t0 = p_->now_ms();
  const int64_t b0 = m.foreground_current();
  at::Tensor y = inner_ ? inner_->run(index, block, x) : block.forward(x);
  r->forward_ms += p_->now_ms() - t0;
  r->bytes += m.foreground_current() - b0;
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

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(b) / (1 << 20));
  return buf;
}

void plot(const fs::path& dir, const std::vector<Mark>& marks) {
  const fs::path png = dir / "memory_timeline.png";
  std::string script = "set title 'live tensor bytes over one training step (tt meter)'\n"
                       "set xlabel 'ms since the step started'\nset ylabel 'MiB'\nset grid\nset key off\n";
  int k = 0;
  for (const auto& mk : marks) {
    if (mk.what.rfind("step ", 0) == 0 && mk.what.find("starts") != std::string::npos) continue;
    script += fmt::format("set arrow from {}, graph 0 to {}, graph 1 nohead dt 2 lc rgb 'gray40'\n", mk.ms, mk.ms);
    script += fmt::format("set label '{}' at {}, graph {} rotate by 90 right offset -0.8,0 font ',8'\n", mk.what, mk.ms,
                          0.98 - 0.3 * (k++ % 3));
  }
  script += "plot '" + (dir / "memory_timeline.dat").string() + "' using 1:2 with steps lw 1.5\n";
  if (gnuplot_png(script, png, "1000,600 font ',10'", dir / "gnuplot.log")) return;
  log().warn("profile: no plot (gnuplot missing or failed; see {})", (dir / "gnuplot.log").string());
}

}  // namespace

int run(const Options& o) {
  std::vector<std::string> ov = o.overrides;
  ov.push_back("trainer.max_steps=" + std::to_string(o.step));
  ov.push_back("trainer.progress=off");
  ov.push_back("output.plots=false");
  Pipeline p = load_pipeline(o.file, ov);
  TrainerConfig cfg;
  cfg.quiet = true;
  if (!o.run_dir.empty()) {
    cfg.run_dir = o.run_dir;
  } else {
    cfg.run_dir = timestamped_dir(p.output.get_string("dir"), p.name + "-profile");
  }
  Trainer trainer(std::move(p), cfg);
  auto owned = std::make_unique<Profiler>(o.step);
  Profiler* prof = owned.get();
  prof->set_name("profile-memory");
  trainer.add_plugin(std::move(owned));
  trainer.fit();
  TT_CHECK(!prof->trace.empty(), "profile: step ", o.step, " was not reached (the run has fewer steps: fewer ",
           "batches than that in one epoch with trainer.epochs set?)");
  const fs::path dir = trainer.run_dir();
  const json summary = json::parse(trainer.summary_json());
  const auto& mem = summary["memory"];

  // The timeline.
  int64_t step_peak = 0, start_bytes = prof->trace.front().bytes;
  {
    std::ofstream d(dir / "memory_timeline.dat");
    d << "# ms MiB (live tensor bytes after each allocation/free of step " << o.step << ")\n";
    for (const auto& e : prof->trace) {
      d << 1e3 * e.seconds << ' ' << static_cast<double>(e.bytes) / (1 << 20) << '\n';
      step_peak = std::max(step_peak, e.bytes);
    }
  }
  plot(dir, prof->marks);

  // The tables.
  std::printf("memory profile of %s, step %d (tt's meter; run in %s)\n", trainer.pipeline().name.c_str(), o.step,
              dir.c_str());
  std::printf("\nbreakdown            MiB\n");
  for (const char* k : {"parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes",
                        "peak_tensor_bytes", "peak_rss_bytes"})
    std::printf("  %-22s %10s\n", std::string(k).substr(0, std::string(k).size() - 6).c_str(),
                mib(mem[k].get<int64_t>()).c_str());
  std::printf("  %-22s %10s  (live at its start %s MiB; %zu allocations and frees)\n", "profiled step peak",
              mib(step_peak).c_str(), mib(start_bytes).c_str(), prof->trace.size() - 1);
  json blocks = json::array();
  if (prof->blocks.empty()) {
    std::printf("\nno per-block table: the model has no tt::nn::BlockStack\n");
  } else {
    int64_t total = 0;
    for (const auto& b : prof->blocks) total += b.bytes;
    std::printf("\n%-14s %14s %8s %12s %12s\n", "block", "activations", "share", "forward ms", "backward ms");
    for (const auto& b : prof->blocks) {
      std::printf("%-14s %10s MiB %7.1f%% %12.2f %12s\n", b.name.c_str(), mib(b.bytes).c_str(),
                  total > 0 ? 100.0 * static_cast<double>(b.bytes) / static_cast<double>(total) : 0.0, b.forward_ms,
                  b.backward_seen ? (std::to_string(b.backward_ms).substr(0, std::to_string(b.backward_ms).find('.') + 3)).c_str()
                                  : "-");
      blocks.push_back({{"block", b.name},
                        {"activation_bytes", b.bytes},
                        {"forward_ms", b.forward_ms},
                        {"backward_ms", b.backward_seen ? json(b.backward_ms) : json(nullptr)}});
    }
    std::printf("%-14s %10s MiB\n", "all blocks", mib(total).c_str());
  }
  json marks = json::array();
  std::printf("\nphases (ms since the step started):");
  for (const auto& m : prof->marks) {
    marks.push_back({{"ms", m.ms}, {"what", m.what}});
    std::printf(" %s %.1f;", m.what.c_str(), m.ms);
  }
  std::printf("\n");
  json out = {{"pipeline", trainer.pipeline().file},
              {"step", o.step},
              {"memory", mem},
              {"step_peak_tensor_bytes", step_peak},
              {"step_start_tensor_bytes", start_bytes},
              {"block_stacks", prof->stacks},
              {"blocks", blocks},
              {"phases", marks},
              {"trace_events", prof->trace.size()}};
  std::ofstream(dir / "memory_profile.json") << out.dump(2) << "\n";
  std::printf("\n%s: memory_profile.json, memory_timeline.dat%s\n", dir.c_str(),
              fs::exists(dir / "memory_timeline.png") ? ", memory_timeline.png" : "");
  return 0;
}

}  // namespace tt::profile
