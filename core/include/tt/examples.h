#pragma once
// Where the example pipelines are, for messages that point a user at one: an installed tt's
// DATADIR/tt/configs (found from its core library's directory, as its modules are), else a
// checkout's configs/ (tt-run run from its root).
#include <string>

#include "tt/export.h"

namespace tt {

// "configs", or the installed directory's absolute path.
TT_API std::string examples_dir();

}  // namespace tt
