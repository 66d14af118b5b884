// The Matrix Market reader of topic-mtx (models/topic/src/source_mtx.cpp): read_mtx, and the
// compressed rows it returns checked for what the dataset relies on.
#include <ATen/ATen.h>

#include <cmath>

#include "fuzz_util.h"
#include "source_mtx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt::fuzz;
  const auto path = write_file("input.mtx", as_view(data, size));
  refusing([&] {
    const tt::topic::CsrCounts c = tt::topic::read_mtx(path.string());
    const int64_t n = c.n_docs(), nnz = c.nnz();
    expect(n >= 1 && c.n_terms >= 1, "read_mtx: at least one document and one term");
    const auto ptr = c.row_ptr.accessor<int64_t, 1>();
    const auto cols = c.cols.accessor<int64_t, 1>();
    const auto vals = c.vals.accessor<float, 1>();
    expect(ptr[0] == 0 && ptr[n] == nnz && c.vals.size(0) == nnz, "read_mtx: row pointers span the entries");
    for (int64_t r = 0; r < n; ++r) {
      expect(ptr[r] < ptr[r + 1], "read_mtx: every document has a word");
      for (int64_t e = ptr[r]; e < ptr[r + 1]; ++e) {
        expect(cols[e] >= 0 && cols[e] < c.n_terms, "read_mtx: term ids within the terms");
        expect(e == ptr[r] || cols[e - 1] < cols[e], "read_mtx: terms ascending, duplicates added up");
        expect(std::isfinite(vals[e]) && vals[e] > 0, "read_mtx: counts finite and positive");
      }
    }
  });
  return 0;
}
