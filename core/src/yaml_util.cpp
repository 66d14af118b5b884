#include "tt/yaml_util.h"

#include <map>

#include "tt/error.h"

namespace tt {

std::string location(const std::string& file, const YAML::Node& node) {
  std::string f = file.empty() ? "<pipeline>" : file;
  if (!node.IsDefined()) return f;
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return f;
  return f + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

void check_unique_keys(const YAML::Node& node, const std::string& file) {
  if (node.IsSequence()) {
    for (const auto& item : node) check_unique_keys(item, file);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, YAML::Node> seen;
  for (const auto& kv : node) {
    if (kv.first.IsScalar()) {
      const std::string key = kv.first.Scalar();
      auto [it, fresh] = seen.emplace(key, kv.first);
      if (!fresh)
        TT_FAIL_AS(ConfigError, location(file, kv.first), ": '", key, "' appears twice in this map (first at ",
                   location(file, it->second), "); give each key once");
    }
    check_unique_keys(kv.second, file);
  }
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
