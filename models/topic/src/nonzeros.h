#pragma once
// Scanning dense count rows for their non-zeros. Document-term rows are mostly zeros (a
// 256-word document over 5000 terms has < 6% non-zeros): the count is one vectorized pass,
// the gather skips all-zero blocks of eight and is branch-free inside a block. -0.0 is not
// a count (x != 0 drops it). Compiled -O3, cloned for AVX-512 / AVX2 / x86-64.
#include <cstdint>

namespace tt::topic {

int64_t count_nonzeros(const float* x, int64_t m);
// Writes the non-zeros of B rows x[r] (m floats each) as (r, j, x[r][j]) at rows/cols/vals and
// returns how many. Order: by blocks of eight columns, then row, then column — so the loss
// kernels, which read topic-term rows at these columns, sweep them front to back instead of
// jumping (cache-friendly, no transposed copy needed). The outputs need room for the count
// plus 8 entries (the branch-free gather writes past its last entry).
int64_t gather_nonzeros(const float* const* x, int64_t B, int64_t m, int64_t* rows, int64_t* cols, float* vals);

}  // namespace tt::topic
