#include "tt/yaml_util.h"

namespace tt {

std::string location(const std::string& file, const YAML::Node& node) {
  std::string f = file.empty() ? "<pipeline>" : file;
  if (!node.IsDefined()) return f;
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return f;
  return f + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

std::string emit_yaml(const YAML::Node& node) {
  YAML::Emitter out;
  out << node;
  return out.c_str();
}

std::string emit_yaml_flow(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

}  // namespace tt
