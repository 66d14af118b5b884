#pragma once
// topic-mtx: a sparse documents x terms matrix in a Matrix Market file (coordinate, real or
// integer, general: what scipy.io.mmwrite writes for a sparse count matrix), held in memory
// as compressed sparse rows; batches carry the non-zeros.
#include "topic_data.h"

namespace tt::topic {

// The counts of `path` (duplicate entries add up, explicit zeros are dropped); ConfigError
// naming the file and line for a bad header, entry, index or count, a truncated file, and
// for an empty document.
CsrCounts read_mtx(const std::string& path);

Schema mtx_schema();
Datasets make_mtx(const Options& o, uint64_t pipeline_seed);

}  // namespace tt::topic
