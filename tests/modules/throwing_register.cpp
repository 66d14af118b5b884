// Throws while registering its components.
#include <stdexcept>

#include "tt/module.h"
#include "tt/registry.h"

namespace {
void reg(tt::Registry&) { throw std::runtime_error("boom while registering"); }
}  // namespace

TT_MODULE("plugin", "test-throwing-register", "a plugin whose registration throws", reg)
