#pragma once
// Small yaml-cpp helpers shared by options and pipeline parsing (core-internal use).
#include <yaml-cpp/yaml.h>

#include <string>

#include "tt/export.h"

namespace tt {
// "file:line:col" of a node (1-based), or the file alone when the node has no mark.
TT_API std::string location(const std::string& file, const YAML::Node& node);
TT_API std::string emit_yaml(const YAML::Node& node);       // block style
TT_API std::string emit_yaml_flow(const YAML::Node& node);  // one line
}  // namespace tt
