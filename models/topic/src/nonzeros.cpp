#include "nonzeros.h"

#include <cstring>

#define TT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace tt::topic {

TT_CLONES int64_t count_nonzeros(const float* x, int64_t m) {
  int64_t n = 0;
  for (int64_t j = 0; j < m; ++j) n += x[j] != 0.0f;
  return n;
}

TT_CLONES int64_t gather_nonzeros(const float* const* x, int64_t B, int64_t m, int64_t* rows, int64_t* cols,
                                  float* vals) {
  int64_t q = 0;
  for (int64_t j = 0; j < m; j += 8) {
    const int64_t width = m - j < 8 ? m - j : 8;
    for (int64_t r = 0; r < B; ++r) {
      const float* xr = x[r] + j;
      if (width == 8) {
        uint64_t w[4];
        std::memcpy(w, xr, sizeof w);
        if ((w[0] | w[1] | w[2] | w[3]) == 0) continue;
      }
      for (int64_t t = 0; t < width; ++t) {
        rows[q] = r, cols[q] = j + t, vals[q] = xr[t];
        q += xr[t] != 0.0f;
      }
    }
  }
  return q;
}

}  // namespace tt::topic
