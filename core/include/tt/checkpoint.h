#pragma once
// Checkpoint files: written atomically (temp file in the same directory, fsync, rename,
// fsync of the directory), so a crash mid-write leaves the previous checkpoint intact.
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tt/export.h"

namespace tt {

// Writes `archive` to `path` atomically. Honours TT_FAULT_CHECKPOINT_CRASH="N:BYTES"
// (testing only): the process _exit()s after BYTES bytes of its N-th checkpoint write.
TT_API void save_archive_atomic(torch::serialize::OutputArchive& archive, const std::filesystem::path& path);

// checkpoints/step-00000100.pt files of a run, oldest first. Temp files are ignored.
TT_API std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);
// Why the checkpoint archive at `path` is damaged (a zip record failing its CRC-32, a directory
// outside the file, not a zip), or "" when every stored record checks out. tt checks before
// LibTorch reads an archive: LibTorch does not, and damage can crash its parser.
TT_API std::string archive_damage(const std::filesystem::path& path);
TT_API std::filesystem::path checkpoint_path(const std::filesystem::path& dir, int64_t step);
// Bytes kept in an archive: a uint8 tensor holding them, and back (a stream position, a
// serialized shard).
TT_API at::Tensor bytes_to_tensor(const std::string& bytes);
TT_API std::string tensor_to_bytes(const at::Tensor& tensor);

// Deletes all but the newest `keep` checkpoints (keep <= 0 keeps all).
TT_API void prune_checkpoints(const std::filesystem::path& dir, int keep);

}  // namespace tt
