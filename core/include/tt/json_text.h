#pragma once
// The text of tt's JSON files (summary.json, metrics.jsonl, compare.json, plan.json, ...). A
// string in them that is not UTF-8 (a run directory's path in Latin-1 bytes) is written with
// U+FFFD in place of its bad bytes: nlohmann's dump would throw, and the run would end without
// its summary after training.
#include <nlohmann/json.hpp>
#include <string>

namespace tt {

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tt
