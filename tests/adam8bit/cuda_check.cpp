// adam8bit's CUDA kernels against the CPU update (quant.cpp), step by step on the same data:
// parameters, bytes and absmax values must agree exactly (the kernels use the CPU loop's
// operation order with correctly rounded arithmetic and no fused multiply-add). Exits 77
// (ctest: skipped) where no CUDA device is visible: the kernels were still compiled.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "quant.h"
#include "quant_cuda.h"

using namespace tt::adam8bit;

namespace {
int failures = 0;
#define CHECK_CUDA(x)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

template <class T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <class T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}
template <class T>
void expect_equal(const char* what, int step, const std::vector<T>& cpu, const std::vector<T>& gpu) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (std::memcmp(&cpu[i], &gpu[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  if (bad) {
    ++failures;
    std::fprintf(stderr, "step %d: %s differs in %zu of %zu values (first at %zu: cpu %g, gpu %g)\n", step, what, bad,
                 cpu.size(), first, static_cast<double>(cpu[first]), static_cast<double>(gpu[first]));
  }
}
}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("adam8bit CUDA kernels: compiled; no CUDA device visible, not run\n");
    return 77;
  }
  const int64_t n = 100000 + 37;  // a partial last block
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> p(n), m32(n, 0.f), v32(n, 0.f), a1(blocks, 0.f), a2(blocks, 0.f);
  for (auto& x : p) x = normal(rng);
  std::vector<uint8_t> q1(n, signed_map().encode(0.f)), q2(n, unsigned_map().encode(0.f));
  std::vector<float> p32 = p;
  float *dp = to_device(p), *dp32 = to_device(p32), *dm = to_device(m32), *dv = to_device(v32);
  float *da1 = to_device(a1), *da2 = to_device(a2);
  uint8_t *dq1 = to_device(q1), *dq2 = to_device(q2);
  std::vector<float> g(n);
  float* dg = nullptr;
  CHECK_CUDA(cudaMalloc(&dg, n * sizeof(float)));
  for (int step = 1; step <= 20; ++step) {
    for (int64_t i = 0; i < n; ++i) g[i] = normal(rng) * (i % 7 == 0 ? 1e-4f : 1.0f);
    CHECK_CUDA(cudaMemcpy(dg, g.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    const Coeffs c = coeffs(1e-3 * (1 + step % 3), 0.9, 0.999, 1e-8, step % 2 ? 0.01 : 0.0, step % 4 != 0, step);
    step_8bit(p.data(), g.data(), q1.data(), q2.data(), a1.data(), a2.data(), n, 0, blocks, c);
    step_32bit(p32.data(), g.data(), m32.data(), v32.data(), 0, n, c);
    if (const char* e = cuda::step_8bit(dp, dg, dq1, dq2, da1, da2, n, c, nullptr); *e) {
      std::fprintf(stderr, "step_8bit: %s\n", e);
      return 1;
    }
    if (const char* e = cuda::step_32bit(dp32, dg, dm, dv, n, c, nullptr); *e) {
      std::fprintf(stderr, "step_32bit: %s\n", e);
      return 1;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    expect_equal("8-bit: parameters", step, p, to_host(dp, n));
    expect_equal("8-bit: first-moment bytes", step, q1, to_host(dq1, n));
    expect_equal("8-bit: second-moment bytes", step, q2, to_host(dq2, n));
    expect_equal("8-bit: absmax 1", step, a1, to_host(da1, blocks));
    expect_equal("8-bit: absmax 2", step, a2, to_host(da2, blocks));
    expect_equal("32-bit: parameters", step, p32, to_host(dp32, n));
    expect_equal("32-bit: second moment", step, v32, to_host(dv, n));
    if (failures) break;
  }
  std::printf("adam8bit CUDA kernels vs CPU over 20 steps of %lld values: %s\n", static_cast<long long>(n),
              failures ? "DIFFERENT" : "equal");
  return failures ? 1 : 0;
}
