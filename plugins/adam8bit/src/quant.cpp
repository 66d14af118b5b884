#include "quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

// The step loops cloned for AVX-512 / AVX2 / baseline x86-64 (picked at load time): with
// gathers for the map lookups and vector sqrt/div the moment update vectorizes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TT_CLONES
#endif

namespace tt::adam8bit {

namespace {
constexpr int kExpLo = 103;  // biased exponent of 2^-24: below it every magnitude encodes to 0
constexpr int kExps = 25;    // exponents 103 .. 127 (2^-24 .. 1)

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
}  // namespace

QuantMap::QuantMap(bool is_signed) : is_signed_(is_signed) {
  static const int kSigned[7] = {1, 2, 4, 8, 16, 32, 63};
  static const int kUnsigned[7] = {2, 4, 8, 16, 32, 64, 128};
  const int* counts = is_signed ? kSigned : kUnsigned;
  int n = 0;
  mag_[n++] = 0.0f;
  for (int d = 0; d < 7; ++d) {  // decade [0.1, 1) * 10^(d - 6)
    const double scale = std::pow(10.0, d - 6);
    for (int i = 0; i < counts[d]; ++i) {
      const double lo = 0.1 + 0.9 * i / counts[d], hi = 0.1 + 0.9 * (i + 1) / counts[d];
      mag_[n++] = static_cast<float>(scale * (lo + hi) / 2);
    }
  }
  mag_[n++] = 1.0f;
  n_mag_ = n;  // 128 or 256
  for (int i = 0; i + 1 < n_mag_; ++i) mid_[i] = (mag_[i] + mag_[i + 1]) / 2;
  for (int i = n_mag_ - 1; i < 256; ++i) mid_[i] = 2.0f;  // never below any input

  for (int e = 0; e < kExps; ++e)
    for (int m = 0; m < 256; ++m) {
      const uint32_t b = (static_cast<uint32_t>(kExpLo + e) << 23) | (static_cast<uint32_t>(m) << 15);
      float lo;
      std::memcpy(&lo, &b, sizeof lo);
      int c = 0;
      while (c < n_mag_ - 1 && mid_[c] < lo) ++c;
      lut_[e * 256 + m] = static_cast<uint8_t>(c);
    }

  if (is_signed_) {
    for (int c = 0; c < 256; ++c) {
      if (c < kZero) values_[c] = -mag_[kZero - c];
      else if (c - kZero < n_mag_) values_[c] = mag_[c - kZero];
      else values_[c] = 1.0f;  // code 255: never produced
    }
  } else {
    for (int c = 0; c < 256; ++c) values_[c] = mag_[c];
  }
}

uint8_t QuantMap::encode_magnitude(float a) const {
  if (!(a >= 0x1p-24f)) return 0;  // tiny, zero or NaN
  if (a >= 1.0f) return static_cast<uint8_t>(n_mag_ - 1);
  const int idx = static_cast<int>(bits_of(a) >> 15) - (kExpLo << 8);
  int c = lut_[idx];
  while (c < n_mag_ - 1 && mid_[c] < a) ++c;
  return static_cast<uint8_t>(c);
}

double QuantMap::max_error_above(double lo) const {
  double worst = 0;
  for (int i = 0; i + 1 < n_mag_; ++i)
    if (mag_[i + 1] > lo) worst = std::max(worst, (static_cast<double>(mag_[i + 1]) - mag_[i]) / 2);
  return worst;
}

const QuantMap& signed_map() {
  static const QuantMap m(true);
  return m;
}
const QuantMap& unsigned_map() {
  static const QuantMap m(false);
  return m;
}

void quantize_block(const QuantMap& map, const float* x, int64_t n, uint8_t* q, float* absmax) {
  float mx = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, std::fabs(x[i]));
  *absmax = mx;
  const float inv = mx > 0 ? 1.0f / mx : 0.0f;
  for (int64_t i = 0; i < n; ++i) q[i] = map.encode(x[i] * inv);
}

void dequantize_block(const QuantMap& map, const uint8_t* q, int64_t n, float absmax, float* x) {
  const float* v = map.values();
  for (int64_t i = 0; i < n; ++i) x[i] = v[q[i]] * absmax;
}

Coeffs coeffs(double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled, int64_t step) {
  Coeffs c;
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta1 = static_cast<float>(1 - beta1);
  c.one_minus_beta2 = static_cast<float>(1 - beta2);
  c.eps = static_cast<float>(eps);
  c.lr = static_cast<float>(lr);
  c.weight_decay = static_cast<float>(weight_decay);
  c.decoupled = decoupled;
  c.step_size = static_cast<float>(lr / (1 - std::pow(beta1, static_cast<double>(step))));
  c.bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(beta2, static_cast<double>(step))));
  return c;
}

TT_CLONES void step_8bit(float* p, const float* g, uint8_t* q1, uint8_t* q2, float* a1, float* a2, int64_t n, int64_t b0,
               int64_t b1, const Coeffs& c) {
  const QuantMap& s1 = signed_map();
  const QuantMap& s2 = unsigned_map();
  const float* d1 = s1.values();
  const float* d2 = s2.values();
  const float decay = c.decoupled ? 1.0f - c.lr * c.weight_decay : 1.0f;
  const float l2 = c.decoupled ? 0.0f : c.weight_decay;
  const float inv_b2 = 1.0f / c.bias2_sqrt;
  float m[kBlock], v[kBlock];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t off = b * kBlock, len = std::min(kBlock, n - off);
    float* pb = p + off;
    const float* gb = g + off;
    uint8_t* qm = q1 + off;
    uint8_t* qv = q2 + off;
    const float am = a1[b], av = a2[b];
    float mx1 = 0, mx2 = 0;
    for (int64_t i = 0; i < len; ++i) {
      const float grad = gb[i] + l2 * pb[i];
      const float mi = (d1[qm[i]] * am) * c.beta1 + grad * c.one_minus_beta1;
      const float vi = (d2[qv[i]] * av) * c.beta2 + c.one_minus_beta2 * (grad * grad);
      const float denom = std::sqrt(vi) * inv_b2 + c.eps;
      pb[i] = pb[i] * decay - c.step_size * (mi / denom);
      m[i] = mi;
      v[i] = vi;
      mx1 = std::max(mx1, std::fabs(mi));
      mx2 = std::max(mx2, vi);
    }
    a1[b] = mx1;
    a2[b] = mx2;
    const float i1 = mx1 > 0 ? 1.0f / mx1 : 0.0f, i2 = mx2 > 0 ? 1.0f / mx2 : 0.0f;
    for (int64_t i = 0; i < len; ++i) {
      qm[i] = s1.encode(m[i] * i1);
      qv[i] = s2.encode(v[i] * i2);
    }
  }
}

TT_CLONES void step_32bit(float* p, const float* g, float* m, float* v, int64_t e0, int64_t e1, const Coeffs& c) {
  const float decay = c.decoupled ? 1.0f - c.lr * c.weight_decay : 1.0f;
  const float l2 = c.decoupled ? 0.0f : c.weight_decay;
  for (int64_t i = e0; i < e1; ++i) {
    const float grad = g[i] + l2 * p[i];
    p[i] *= decay;
    // torch's order: m = m b1 + g (1 - b1); v = v b2 + (1 - b2) g g; p += -step_size (m / denom)
    m[i] = m[i] * c.beta1 + grad * c.one_minus_beta1;
    v[i] = v[i] * c.beta2 + c.one_minus_beta2 * (grad * grad);
    const float denom = std::sqrt(v[i]) / c.bias2_sqrt + c.eps;
    p[i] += -c.step_size * (m[i] / denom);
  }
}

}  // namespace tt::adam8bit
