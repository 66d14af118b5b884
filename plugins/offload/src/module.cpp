// offload: the optimizer state out of the training process's memory.
//   target: disk   the state in a memory-mapped file, paged in one parameter at a time during
//                  the step (disk_offload.h); composes with adam8bit (listed after it:
//                  the 8-bit state is what goes to the file)
//   target: host   for CUDA training: optimizer state and step in host memory, gradients copied
//                  device -> host and parameters back asynchronously (host_offload.h)
#include <torch/torch.h>

#include <optional>

#include "disk_offload.h"
#include "host_offload.h"
#include "tt/error.h"
#include "tt/extension.h"
#include "tt/log.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

std::string mib(int64_t b) { return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20)); }

class OffloadPlugin final : public tt::Plugin {
 public:
  OffloadPlugin(bool host, std::string path, bool keep) : host_(host), path_(std::move(path)), keep_(keep) {
    must_wrap_the_final_optimizer("it moves the state and step of the optimizer it is given, e.g. adam8bit's");
    if (host_)
      runs_only_on("cuda", "target host moves a CUDA model's optimizer state and step to host memory; on the CPU the "
                           "state is in host memory already: use target: disk");
    else
      runs_only_on("cpu", "target disk pages a CPU model's optimizer state through a file; on CUDA use target: host");
  }

  void on(tt::Event event, tt::State& s) override {
    if (event == tt::Event::OPTIMIZER) wrap(s);
    if (event == tt::Event::AFTER_STEP && !reported_ && offload_ && offload_->state_bytes() > 0) {
      reported_ = true;
      tt::log().info("offload: {} of optimizer state in {} (paged in one parameter at a time)",
                     mib(offload_->state_bytes()), offload_->file().path().string());
      s.metrics["offload_state_file_bytes"] = static_cast<double>(offload_->state_bytes());
      tt::report_held(s, "optimizer state", offload_->state_bytes(), tt::Held::File);
    }
    if (event == tt::Event::FIT_START && host_offload_) host_offload_->sync_from_device();
    if (event == tt::Event::FIT_END && offload_) {
      tt::log().info("offload: state file {} ({}) {}", offload_->file().path().string(),
                     mib(offload_->state_bytes()), keep_ ? "kept" : "removed");
      offload_->file().remove_name_unless_kept();  // before the summary lists the run's outputs
    }
  }

 private:
  void wrap(tt::State& s) {
    if (host_) {  // on CUDA, as declared
      host_offload_ = std::make_shared<tt::offload::HostOffload>(s.optimizer);
      s.optimizer = host_offload_;
      tt::report_held(s, "optimizer state and gradient buffers", host_offload_->host_bytes(), tt::Held::Host);
      tt::log().info("offload: optimizer state and step in host memory ({} of host copies and pinned gradient "
                     "buffers); gradients device->host and parameters back, asynchronously per parameter",
                     mib(host_offload_->host_bytes()));
      return;
    }
    const std::filesystem::path file = path_.empty() ? s.run_dir / "optimizer-state.bin" : std::filesystem::path(path_);
    offload_ = std::make_shared<tt::offload::DiskOffload>(s.optimizer, file, keep_);
    s.optimizer = offload_;
    tt::log().info("offload: optimizer state goes to {} (up to {} reserved, sparse)", file.string(),
                   mib(offload_->file().capacity()));
  }

  bool host_;
  std::string path_;
  bool keep_;
  std::shared_ptr<tt::offload::HostOffload> host_offload_;
  bool reported_ = false;
  std::shared_ptr<tt::offload::DiskOffload> offload_;
};

struct OffloadOptions {
  std::string target;
  std::optional<std::string> path;
  bool keep_file;
};

void register_offload(tt::Registry& r) {
  r.add_plugin(
      "offload",
      "optimizer state out of process memory: target disk keeps it in a memory-mapped file paged in one parameter "
      "at a time (tensor bytes and RSS exclude it); target host (CUDA training) keeps state and step in host memory; "
      "composes with adam8bit (list offload after it)",
      tt::Schema()
          .field("target", &OffloadOptions::target, "disk", "disk (a memory-mapped file) or host (CUDA training only)")
          .choices({"disk", "host"})
          .field("path", &OffloadOptions::path, std::nullopt, "the state file (default RUN_DIR/optimizer-state.bin)")
          .field("keep_file", &OffloadOptions::keep_file, false,
                 "keep the state file after the run (else removed at exit)"),
      [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
        const auto a = o.to<OffloadOptions>();
        return std::make_unique<OffloadPlugin>(a.target == "host", a.path.value_or(""), a.keep_file);
      },
      tt::PlannerOffer{{{"offload(disk)", "", tt::PlannerAlternative::Device::Cpu}, {"offload(host)", "{target: host}", tt::PlannerAlternative::Device::Cuda}}, 50});
}

}  // namespace

TT_MODULE("plugin", "offload", "optimizer state in a memory-mapped file, paged in per parameter", register_offload)
