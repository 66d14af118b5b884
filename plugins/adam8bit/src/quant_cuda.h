#pragma once
// The adam8bit update on a CUDA device: the same maps, the same arithmetic and operation order
// as quant.cpp's step_8bit / step_32bit, one thread block per 256-value block. No torch here:
// raw device pointers and a cudaStream_t passed as void*, so that nvcc compiles it on any
// machine with the toolkit (a GPU is needed only to run it).
#include <cstdint>

#include "quant.h"

namespace tt::adam8bit::cuda {

// Copies the two maps (values and midpoints) to the device, once per process and device.
// Returns an error message, or "" on success.
const char* upload_maps();
// p, g: n float32 values; q1, q2: n bytes; a1, a2: ceil(n / 256) absmax values. All on the device.
const char* step_8bit(float* p, const float* g, uint8_t* q1, uint8_t* q2, float* a1, float* a2, int64_t n,
                      const Coeffs& c, void* stream);
const char* step_32bit(float* p, const float* g, float* m, float* v, int64_t n, const Coeffs& c, void* stream);

}  // namespace tt::adam8bit::cuda
