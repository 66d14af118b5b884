#pragma once
// Block-wise 8-bit quantization of Adam's moments, after "8-bit Optimizers via Block-wise
// Quantization" (Dettmers et al.), written anew here.
//
// A moment tensor is cut into blocks of 256 values; each block keeps its absolute maximum
// in float32 and each value one byte: the index of the nearest entry of a fixed 256-entry
// map of [-1, 1] (first moment, signed) or [0, 1] (second moment, unsigned) after dividing
// by the block's absmax. The maps are "dynamic": decades 1e-7 .. 1 with more entries in the
// larger decades, so small values keep their order of magnitude and large ones a fine grid.
//   signed map:   0, +-1, and per sign 126 values: 1, 2, 4, 8, 16, 32, 63 in the decades
//                 [1e-7, 1e-6) ... [0.1, 1) (midpoints of an even split of each decade);
//                 255 codes used (127 is zero).
//   unsigned map: 0, 1, and 254 values: 2, 4, ..., 128 in the same decades.
// 0 and the block's absmax are exact. State: 2 bytes per parameter plus 2 x 4 bytes per
// 256 (2.03 bytes per parameter, against 8 for float32 moments).
//
// Encoding is nearest-entry (ties to the smaller magnitude) through a lookup table on the
// float's exponent and top 8 mantissa bits, then at most a step or two along the map.
#include <cstdint>

namespace tt::adam8bit {

constexpr int64_t kBlock = 256;

class QuantMap {
 public:
  explicit QuantMap(bool is_signed);
  // The byte for x (clamped to the map's range; NaN -> 0's code).
  uint8_t encode(float x) const {
    if (is_signed_) {
      const uint8_t m = encode_magnitude(x < 0 ? -x : x);
      return static_cast<uint8_t>(x < 0 ? kZero - m : kZero + m);
    }
    return encode_magnitude(x);
  }
  float decode(uint8_t q) const { return values_[q]; }
  const float* values() const { return values_; }
  // The magnitudes' midpoints (magnitudes() - 1 of them, ascending): the CUDA kernel's encoder.
  const float* mids() const { return mid_; }
  int magnitudes() const { return n_mag_; }
  bool is_signed() const { return is_signed_; }
  int codes() const { return is_signed_ ? 255 : 256; }  // codes in use: 0 .. codes()-1
  // The largest distance between a value in [0, 1] and its nearest map entry, among values
  // >= lo (half the widest gap above lo): the quantization error bound, relative to absmax.
  double max_error_above(double lo) const;

 private:
  static constexpr int kZero = 127;  // the signed map's zero code
  uint8_t encode_magnitude(float a) const;

  bool is_signed_;
  int n_mag_;                 // magnitudes: 128 (signed) or 256 (unsigned), ascending, [0] = 0
  float mag_[256];            // the magnitudes
  float mid_[256];            // mid_[i]: between mag_[i] and mag_[i + 1]
  uint8_t lut_[25 * 256];     // nearest magnitude index at the start of each (exponent, 8-bit mantissa) bucket
  float values_[256];         // code -> value
};

const QuantMap& signed_map();
const QuantMap& unsigned_map();

// Quantizes n values (n <= kBlock) into bytes with one absmax (returned through *absmax).
void quantize_block(const QuantMap& map, const float* x, int64_t n, uint8_t* q, float* absmax);
// Dequantizes n bytes with the block's absmax.
void dequantize_block(const QuantMap& map, const uint8_t* q, int64_t n, float absmax, float* x);

struct Coeffs {
  float beta1, beta2, eps, lr, weight_decay;
  float one_minus_beta1, one_minus_beta2;  // computed in double, as torch does
  bool decoupled;     // AdamW (p *= 1 - lr wd) or Adam (g += wd p)
  float step_size;    // lr / (1 - beta1^t)
  float bias2_sqrt;   // sqrt(1 - beta2^t)
};
Coeffs coeffs(double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled, int64_t step);

// One Adam(W) step over n elements whose moments are 8-bit (q1 signed, q2 unsigned, blocks
// of kBlock with absmax a1, a2): per block, dequantize, update moments and parameters, find
// the new absmax, requantize. Blocks [b0, b1) of the tensor.
void step_8bit(float* p, const float* g, uint8_t* q1, uint8_t* q2, float* a1, float* a2, int64_t n, int64_t b0,
               int64_t b1, const Coeffs& c);
// The same step with float32 moments (torch's AdamW arithmetic), elements [e0, e1).
void step_32bit(float* p, const float* g, float* m, float* v, int64_t e0, int64_t e1, const Coeffs& c);

}  // namespace tt::adam8bit
