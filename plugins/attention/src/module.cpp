// attention: swaps the kernel of every tt::nn::Attention of the model (see chunked_attention.h,
// sdpa_attention.h). Options: kernel chunked | sdpa | naive, chunk_size, key_chunk_size.
#include <optional>

#include "chunked_attention.h"
#include "sdpa_attention.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/module.h"
#include "tt/plugin.h"
#include "tt/registry.h"
#include "tt/state.h"

namespace {

class AttentionPlugin final : public tt::Plugin {
 public:
  AttentionPlugin(std::string kernel, int64_t chunk_q, int64_t chunk_k)
      : kernel_(std::move(kernel)), chunk_q_(chunk_q), chunk_k_(chunk_k) {}

  void on(tt::Event event, tt::State& s) override {
    if (event != tt::Event::INIT) return;
    auto modules = tt::nn::find_modules<tt::nn::AttentionImpl>(*s.model);
    TT_CHECK_AS(ConfigError, !modules.empty(), "the model (", s.model->describe(),
                ") has no tt::nn::Attention whose kernel could be swapped; the plugin acts on models built from "
                "core's attention (e.g. model: transformer)");
    auto kernel = make_kernel();
    for (auto& [name, m] : modules) m->set_kernel(kernel);
    std::string how;
    if (kernel->name() == "chunked") how = " (query chunks " + std::to_string(chunk_q_) + ", key blocks " +
                                           std::to_string(chunk_k_) + ")";
    tt::log().info("attention: kernel {}{} on {} attention module{} ({}{})", kernel->name(), how, modules.size(),
                   modules.size() == 1 ? "" : "s", modules.front().first,
                   modules.size() > 1 ? ", ..., " + modules.back().first : std::string());
  }

 private:
  std::shared_ptr<tt::nn::AttentionKernel> make_kernel() const {
    if (kernel_ == "naive") return std::make_shared<tt::nn::NaiveAttentionKernel>();
    if (kernel_ == "sdpa") {
      if (tt::attn::sdpa_available()) return std::make_shared<tt::attn::SdpaAttentionKernel>();
      tt::log().warn("attention: kernel sdpa needs LibTorch 2.0 or later (this build has {}): using chunked instead",
                     tt::attn::torch_version());
    }
    return std::make_shared<tt::attn::ChunkedAttentionKernel>(chunk_q_, chunk_k_);
  }

  std::string kernel_;
  int64_t chunk_q_, chunk_k_;
};

struct AttentionOptions {
  std::string kernel;
  int64_t chunk_size;
  std::optional<int64_t> key_chunk_size;
};

void register_attention(tt::Registry& r) {
  r.add_plugin(
      "attention",
      "attention kernels: chunked (online softmax, O(T) memory, no T x S matrix; attention dropout in training "
      "falls back to naive), sdpa (LibTorch >= 2.0's fused kernel, else chunked), naive",
      tt::Schema()
          .field("kernel", &AttentionOptions::kernel, "chunked",
                 "chunked | sdpa | naive. chunked: query chunks x key blocks with an online softmax, backward "
                 "recomputes the tiles (training calls with attention dropout use naive, logged once); sdpa: "
                 "at::scaled_dot_product_attention (LibTorch >= 2.0; chunked on 1.13); naive: core's T x S kernel")
          .choices({"chunked", "sdpa", "naive"})
          .field("chunk_size", &AttentionOptions::chunk_size, 256, "chunked: queries per chunk")
          .range(tt::ge(1))
          .field("key_chunk_size", &AttentionOptions::key_chunk_size, std::nullopt,
                 "chunked: keys per block (default: chunk_size)")
          .range(tt::ge(1)),
      [](const tt::Options& o) -> std::unique_ptr<tt::Plugin> {
        const auto a = o.to<AttentionOptions>();
        return std::make_unique<AttentionPlugin>(a.kernel, a.chunk_size, a.key_chunk_size.value_or(a.chunk_size));
      },
      tt::PlannerOffer{{{"attention(chunked)", "{kernel: chunked}"}}, 30}, tt::Repeats::Once, {"attention"});
}

}  // namespace

TT_MODULE("plugin", "attention", "attention kernels for models built from tt::nn::Attention: chunked, sdpa, naive",
          register_attention)
