// A tt module that calls a core function this core does not define, as a module built
// against another tt would: the dynamic linker refuses it before its entry point is read.
#include "tt/export.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace tt {
TT_API int missing_in_this_core(int);  // declared here only, defined nowhere
}  // namespace tt

namespace {
void reg(tt::Registry&) { tt::missing_in_this_core(1); }
}  // namespace

TT_MODULE("plugin", "test-missing-symbol", "a plugin calling a function this core lacks", reg)
