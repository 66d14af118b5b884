#pragma once
// The lines tt::log() gave before a run's log.txt was opened (the data-parallel rendezvous, the
// threads, warnings of the set-up), kept formatted as log.txt's so that the file begins with
// them. Kept from the process's start, and again after a run's log.txt is closed, up to the
// last 1000 lines. Core-internal: the run directory's set-up uses it.
#include <string>
#include <vector>

namespace tt::early_log {
// The lines kept, in order; none is kept after this until resume().
std::vector<std::string> take();
// Keeps lines again (a run's log.txt closed).
void resume();
}  // namespace tt::early_log
