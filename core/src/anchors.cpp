// Out-of-line virtual destructors and defaults: they anchor each interface's vtable and
// typeinfo in the core library, so plugins built with hidden visibility share them.
#include "tt/dataset.h"
#include "tt/error.h"
#include "tt/optimizer_state.h"
#include "tt/plugin.h"
#include "tt/schedule.h"

namespace tt {
Error::~Error() = default;
ConfigError::~ConfigError() = default;
ModuleError::~ModuleError() = default;
OutOfMemory::~OutOfMemory() = default;
NumericError::~NumericError() = default;
Interrupted::~Interrupted() = default;
WriteError::~WriteError() = default;
Dataset::~Dataset() = default;
StreamDataset::~StreamDataset() = default;
Batch StreamDataset::get(const at::Tensor&) {
  TT_FAIL("this dataset is a stream (", describe(), "): it is read in order with next(), not by index");
}
Schedule::~Schedule() = default;
StateTensors::~StateTensors() = default;
PerParameterStep::~PerParameterStep() = default;
Scope::~Scope() = default;
Plugin::~Plugin() = default;
void Plugin::on(Event, State&) {}
std::unique_ptr<Scope> Plugin::forward_scope(State&) { return nullptr; }
void Plugin::save_state(torch::serialize::OutputArchive&) const {}
void Plugin::load_state(torch::serialize::InputArchive&) {}
}  // namespace tt
