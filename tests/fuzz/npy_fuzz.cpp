// The .npy reader (core/src/npy.cpp): the header parser on the bytes, read_npy, NpyMap over
// the mapped data, and a tensor read back written again and re-read unchanged.
#include <ATen/ATen.h>

#include <cstring>

#include "fuzz_util.h"
#include "tt/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt::fuzz;
  const std::string_view bytes = as_view(data, size);
  refusing([&] {
    const tt::NpyHeader h = tt::parse_npy_header(bytes, "input.npy");
    expect(h.data_offset >= 10 && static_cast<size_t>(h.data_offset) <= size, "the data start inside the input");
    expect(h.item_size >= 1 && h.item_size <= 8, "a supported item size");
  });

  const auto path = write_file("input.npy", bytes);
  refusing([&] {
    const tt::NpyHeader h = tt::read_npy_header(path);
    // read_npy_header promised that the file holds all the data.
    expect(h.numel() >= 0 && h.data_offset + h.data_bytes() <= static_cast<int64_t>(size),
           "read_npy_header: the file holds the data the header promises");
  });
  refusing([&] {
    const at::Tensor t = tt::read_npy(path);
    const tt::NpyHeader h = tt::read_npy_header(path);
    expect(t.numel() == h.numel() && t.scalar_type() == h.dtype, "read_npy: the tensor the header describes");
    expect(t.nbytes() == 0 || std::memcmp(t.data_ptr(), bytes.data() + h.data_offset, t.nbytes()) == 0,
           "read_npy: the file's data");
    const auto again = scratch() / "again.npy";
    tt::write_npy(again, t);
    const at::Tensor u = tt::read_npy(again);
    expect(u.sizes() == t.sizes() && u.scalar_type() == t.scalar_type() &&
               (t.nbytes() == 0 || std::memcmp(u.data_ptr(), t.data_ptr(), t.nbytes()) == 0),
           "write_npy then read_npy gives the same tensor");
  });
  refusing([&] {
    tt::NpyMap map(path);
    const tt::NpyHeader& h = map.header();
    const int64_t n = h.data_bytes();
    // Every data byte is readable (a mapping shorter than the header promises would fault).
    unsigned sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<unsigned char>(map.data()[i]);
    expect(n == 0 || std::memcmp(map.data(), bytes.data() + h.data_offset, static_cast<size_t>(n)) == 0,
           "NpyMap: the file's data");
    map.will_need(map.data(), static_cast<size_t>(n));
    map.release(map.data(), static_cast<size_t>(n));
    (void)sum;
  });
  return 0;
}
