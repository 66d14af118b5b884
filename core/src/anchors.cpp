// Out-of-line virtual destructors and defaults (and Plugin's one checked declaration): they anchor each interface's vtable and
// typeinfo in the core library, so plugins built with hidden visibility share them.
#include "tt/dataset.h"
#include "tt/error.h"
#include "tt/optimizer_state.h"
#include "tt/plugin.h"
#include "tt/schedule.h"

namespace tt {
Error::~Error() = default;
ConfigError::~ConfigError() = default;
UnknownKeyError::~UnknownKeyError() = default;
ModuleError::~ModuleError() = default;
OutOfMemory::~OutOfMemory() = default;
NumericError::~NumericError() = default;
Interrupted::~Interrupted() = default;
DistError::~DistError() = default;
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
void Plugin::runs_only_on(std::string device, std::string why) {
  TT_CHECK(device == "cpu" || device == "cuda", "plugin '", name_, "': runs_only_on takes \"cpu\" or \"cuda\", got '",
           device, "'");
  only_device_ = std::move(device);
  only_device_why_ = std::move(why);
}
}  // namespace tt
