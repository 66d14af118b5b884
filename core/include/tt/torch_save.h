#pragma once
// Files that Python's torch.save (or LibTorch's torch::pickle_save) wrote: a zip archive whose
// data.pkl LibTorch's unpickler reads. Shared by the readers of such files (model.init_from's
// state dicts, the topic-pt dataset), so that each refusal reads the same.
#include <ATen/core/ivalue.h>

#include <filesystem>
#include <string>

#include "tt/export.h"

namespace tt {

// The object in `file`. A ConfigError naming the file when it is not a zip archive (the legacy
// pre-1.6 format named as such), the archive is damaged (tt::archive_damage), it holds a
// collections.OrderedDict (which LibTorch's unpickler turns into None), or LibTorch cannot
// unpickle it; each message ends with `fix`, how to save the file so that tt reads it.
TT_API c10::IValue read_torch_save(const std::filesystem::path& file, const std::string& fix);

}  // namespace tt
