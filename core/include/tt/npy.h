#pragma once
// NumPy .npy files (format 1.0/2.0, little-endian, C order) for fitted parameters.
#include <ATen/core/Tensor.h>

#include <filesystem>

#include "tt/export.h"

namespace tt {
TT_API void write_npy(const std::filesystem::path& path, const at::Tensor& t);
TT_API at::Tensor read_npy(const std::filesystem::path& path);  // loads into memory
TT_API void write_csv(const std::filesystem::path& path, const at::Tensor& matrix);
}  // namespace tt
