// tt_attention_bench: forward+backward time and peak tensor bytes (tt's meter) of the naive
// and chunked attention kernels, B=1, H=4, D=64, causal, for a list of sequence lengths.
// Run by tools/bench-attention.sh.
//   tt_attention_bench [--sizes 512,1024,2048,4096] [--chunk 256] [--threads 2] [--repeat 3]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "chunked_attention.h"
#include "tt/meter.h"
#include "tt/nn.h"
#include "tt/runtime.h"

namespace {

struct Measure {
  double ms = 0;       // median of the repeats
  int64_t peak = 0;    // peak tensor bytes above what was live before the call
};

template <class Attend>
Measure measure(int64_t N, int repeat, Attend&& attend) {
  auto& meter = tt::Meter::global();
  torch::manual_seed(0);
  auto q = torch::randn({1, 4, N, 64}).requires_grad_(), k = torch::randn({1, 4, N, 64}).requires_grad_(),
       v = torch::randn({1, 4, N, 64}).requires_grad_();
  auto grad = torch::randn({1, 4, N, 64});
  std::vector<double> times;
  Measure m;
  for (int r = 0; r < repeat + 1; ++r) {  // the first call warms up
    q.mutable_grad() = at::Tensor();
    k.mutable_grad() = at::Tensor();
    v.mutable_grad() = at::Tensor();
    const int64_t base = meter.current();
    meter.reset_peak();
    auto t0 = std::chrono::steady_clock::now();
    attend(q, k, v).backward(grad);
    auto dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    m.peak = std::max(m.peak, meter.peak() - base);
    if (r > 0) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  m.ms = times[times.size() / 2];
  return m;
}

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  tt::Meter::global().install();  // before any tensor
  // as the trainer runs (trainer.cache_allocations: true): a fresh N x N buffer per call would
  // time page faults, not attention; the meter counts tensor bytes either way
  tt::Meter::global().set_caching(true);
  std::vector<int64_t> sizes = {512, 1024, 2048, 4096};
  int64_t chunk = 256, threads = 2, repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], value = argv[i + 1];
    if (a == "--sizes") sizes = parse_sizes(value);
    else if (a == "--chunk") chunk = std::stoll(value);
    else if (a == "--threads") threads = std::stoll(value);
    else if (a == "--repeat") repeat = std::stoll(value);
    else {
      std::fprintf(stderr, "tt_attention_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "tt_attention_bench: %s needs a value\n", argv[argc - 1]);
    return 2;
  }
  tt::configure_threads(static_cast<int>(threads));
  std::printf("attention forward+backward, B=1 H=4 D=64 causal, chunk %lld, %lld threads, median of %lld\n",
              static_cast<long long>(chunk), static_cast<long long>(threads), static_cast<long long>(repeat));
  std::printf("%6s | %10s %10s %7s | %12s %12s %8s\n", "N", "naive ms", "chunked ms", "time x", "naive MiB",
              "chunked MiB", "mem x");
  for (int64_t N : sizes) {
    auto naive = measure(N, static_cast<int>(repeat), [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      tt::nn::AttentionInputs in;
      in.q = q;
      in.k = k;
      in.v = v;
      return tt::nn::NaiveAttentionKernel().forward(in);
    });
    auto chunked = measure(N, static_cast<int>(repeat), [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return tt::attn::chunked_attention(q, k, v, true, {}, chunk, chunk);
    });
    std::printf("%6lld | %10.1f %10.1f %7.2f | %12.1f %12.1f %8.3f\n", static_cast<long long>(N), naive.ms, chunked.ms,
                chunked.ms / naive.ms, mib(naive.peak), mib(chunked.peak),
                static_cast<double>(chunked.peak) / static_cast<double>(naive.peak));
    std::fflush(stdout);
  }
  return 0;
}
