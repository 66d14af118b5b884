#pragma once
// Small yaml-cpp helpers shared by options and pipeline parsing (core-internal use).
#include <yaml-cpp/yaml.h>

#include <string>

#include "tt/export.h"

namespace tt {
// "file:line:col" of a node (1-based), or the file alone when the node has no mark.
TT_API std::string location(const std::string& file, const YAML::Node& node);
// Throws ConfigError at the second of two equal keys in any map under `node` ("seed:" twice,
// "{k: 3, k: 4}"): YAML forbids them and yaml-cpp would keep one silently. `where` names the
// source for nodes without a mark of their own.
TT_API void check_unique_keys(const YAML::Node& node, const std::string& file);
TT_API std::string emit_yaml(const YAML::Node& node);       // block style
TT_API std::string emit_yaml_flow(const YAML::Node& node);  // one line
}  // namespace tt
