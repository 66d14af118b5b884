// CUDA kernels of the adam8bit update (quant_cuda.h). Kept free of torch and of C++ newer than
// what nvcc accepts with the host compiler, so the toolkit alone builds it.
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>

#include "quant_cuda.h"

namespace tt::adam8bit::cuda {

namespace {

struct DeviceMap {
  float values[256];
  float mids[256];
  int magnitudes;
  int is_signed;
};
__constant__ DeviceMap d_maps[2];  // [0] signed (first moment), [1] unsigned (second)

constexpr float kTiny = 5.9604644775390625e-08f;  // 2^-24, as quant.cpp

// The nearest map entry's code for x (ties to the smaller magnitude), as QuantMap::encode.
__device__ __forceinline__ uint8_t encode(const DeviceMap& m, float x) {
  const float a = fabsf(x);
  int c;
  if (!(a >= kTiny)) {
    c = 0;
  } else if (a >= 1.0f) {
    c = m.magnitudes - 1;
  } else {  // the first midpoint >= a
    int lo = 0, hi = m.magnitudes - 1;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (m.mids[mid] < a) lo = mid + 1;
      else hi = mid;
    }
    c = lo;
  }
  if (!m.is_signed) return static_cast<uint8_t>(c);
  return static_cast<uint8_t>(x < 0 ? 127 - c : 127 + c);
}

__device__ __forceinline__ float block_max(float x, float* shared) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < (blockDim.x >> 5) ? shared[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    if (lane == 0) shared[0] = x;
  }
  __syncthreads();
  const float r = shared[0];
  __syncthreads();
  return r;
}

// One thread block of kBlock threads per quantization block.
__global__ void step_8bit_kernel(float* p, const float* g, uint8_t* q1, uint8_t* q2, float* a1, float* a2, int64_t n,
                                 Coeffs c) {
  __shared__ float shared[kBlock / 32];
  const int64_t b = blockIdx.x;
  const int64_t i = b * kBlock + threadIdx.x;
  const bool live = i < n;
  const float decay = c.decoupled ? 1.0f - c.lr * c.weight_decay : 1.0f;
  const float l2 = c.decoupled ? 0.0f : c.weight_decay;
  const float inv_b2 = 1.0f / c.bias2_sqrt;
  float mi = 0.0f, vi = 0.0f;
  if (live) {
    // No fused multiply-add: the same rounding as the CPU loop (built with -ffp-contract=off).
    const float pi = p[i];
    const float grad = __fadd_rn(g[i], __fmul_rn(l2, pi));
    mi = __fadd_rn(__fmul_rn(__fmul_rn(d_maps[0].values[q1[i]], a1[b]), c.beta1), __fmul_rn(grad, c.one_minus_beta1));
    vi = __fadd_rn(__fmul_rn(__fmul_rn(d_maps[1].values[q2[i]], a2[b]), c.beta2),
                   __fmul_rn(c.one_minus_beta2, __fmul_rn(grad, grad)));
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_b2), c.eps);
    p[i] = __fsub_rn(__fmul_rn(pi, decay), __fmul_rn(c.step_size, __fdiv_rn(mi, denom)));
  }
  const float mx1 = block_max(fabsf(mi), shared);
  const float mx2 = block_max(vi, shared);
  if (threadIdx.x == 0) {
    a1[b] = mx1;
    a2[b] = mx2;
  }
  if (live) {
    const float i1 = mx1 > 0 ? __fdiv_rn(1.0f, mx1) : 0.0f, i2 = mx2 > 0 ? __fdiv_rn(1.0f, mx2) : 0.0f;
    q1[i] = encode(d_maps[0], __fmul_rn(mi, i1));
    q2[i] = encode(d_maps[1], __fmul_rn(vi, i2));
  }
}

__global__ void step_32bit_kernel(float* p, const float* g, float* m, float* v, int64_t n, Coeffs c) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float decay = c.decoupled ? 1.0f - c.lr * c.weight_decay : 1.0f;
  const float l2 = c.decoupled ? 0.0f : c.weight_decay;
  float pi = p[i];
  const float grad = __fadd_rn(g[i], __fmul_rn(l2, pi));
  pi = __fmul_rn(pi, decay);
  const float mi = __fadd_rn(__fmul_rn(m[i], c.beta1), __fmul_rn(grad, c.one_minus_beta1));
  const float vi = __fadd_rn(__fmul_rn(v[i], c.beta2), __fmul_rn(c.one_minus_beta2, __fmul_rn(grad, grad)));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bias2_sqrt), c.eps);
  m[i] = mi;
  v[i] = vi;
  p[i] = __fadd_rn(pi, __fmul_rn(-c.step_size, __fdiv_rn(mi, denom)));
}

DeviceMap host_map(const QuantMap& q) {
  DeviceMap d{};
  std::memcpy(d.values, q.values(), sizeof d.values);
  std::memcpy(d.mids, q.mids(), sizeof(float) * (q.magnitudes() - 1));
  d.magnitudes = q.magnitudes();
  d.is_signed = q.is_signed() ? 1 : 0;
  return d;
}

}  // namespace

const char* upload_maps() {
  static std::mutex mu;
  static bool done[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return "adam8bit: no current CUDA device";
  std::lock_guard<std::mutex> lock(mu);
  if (done[dev]) return "";
  const DeviceMap maps[2] = {host_map(signed_map()), host_map(unsigned_map())};
  const cudaError_t e = cudaMemcpyToSymbol(d_maps, maps, sizeof maps);
  if (e != cudaSuccess) return cudaGetErrorString(e);
  done[dev] = true;
  return "";
}

const char* step_8bit(float* p, const float* g, uint8_t* q1, uint8_t* q2, float* a1, float* a2, int64_t n,
                      const Coeffs& c, void* stream) {
  if (const char* e = upload_maps(); *e) return e;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks == 0) return "";
  step_8bit_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(p, g, q1, q2, a1,
                                                                                                    a2, n, c);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

const char* step_32bit(float* p, const float* g, float* m, float* v, int64_t n, const Coeffs& c, void* stream) {
  if (n == 0) return "";
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  step_32bit_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(p, g, m, v, n, c);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace tt::adam8bit::cuda
