#pragma once
// Typed options with documented defaults, validated from YAML.
//
// Every component (model, dataset, plugin, optimizer, schedule, the trainer itself)
// declares a Schema: its keys, their types, defaults and one-line docs. Options::parse
// checks a YAML map against it: an unknown key is an error naming the file, line:column
// and the nearest valid key; a wrong type names the expected type. tt-run --list prints
// schemas, --dry-run prints the resolved values.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tt/export.h"

namespace YAML {
class Node;
}

namespace tt {

enum class Type { Bool, Int, Float, String, Bytes, List, Map };
TT_API const char* type_name(Type t);

struct OptionSpec {
  std::string key;
  Type type;
  std::string default_yaml;  // YAML text of the default; "~" means unset
  std::string doc;
};

class TT_API Schema {
 public:
  Schema& add(std::string key, Type type, std::string default_yaml, std::string doc);
  const std::vector<OptionSpec>& specs() const { return specs_; }
  const OptionSpec* find(const std::string& key) const;
  std::vector<std::string> keys() const;

 private:
  std::vector<OptionSpec> specs_;
};

// Where a value came from, for error messages: "configs/x.yaml:12:5" or "command line 'k=v'".
struct Location {
  std::string text;
};

// Resolved, typed values of one component. Cheap to copy.
class TT_API Options {
 public:
  Options() = default;
  // Validates `node` (a YAML map, or null for "all defaults") against `schema`.
  // `context` names the section in messages (e.g. "trainer" or "plugins[1] (amp)");
  // `ignore` lists keys consumed by the caller (e.g. "name"); `origins` names keys that
  // came from the command line (key -> "command line 'trainer.lr=1'") for messages.
  static Options parse(const YAML::Node& node, const Schema& schema, const std::string& context,
                       const std::string& file, const std::vector<std::string>& ignore = {},
                       const std::map<std::string, std::string>& origins = {});
  static Options defaults(const Schema& schema, const std::string& context);

  bool is_set(const std::string& key) const;  // present and not null
  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  int64_t get_bytes(const std::string& key) const;
  std::vector<std::string> get_list(const std::string& key) const;
  std::string get_yaml(const std::string& key) const;  // raw YAML text (Map or anything)

  // Throws tt::Error "<location>: <context>.<key> <message>" (for range checks).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  void check(bool ok, const std::string& key, const std::string& message) const {
    if (!ok) fail(key, message);
  }
  const std::string& context() const { return context_; }
  // All keys with their resolved YAML text, schema order; for --dry-run and the run dir.
  std::vector<std::pair<std::string, std::string>> resolved() const;

 private:
  struct Value {
    Type type = Type::String;
    bool null = true;
    std::string yaml;  // canonical YAML text
    std::string where;
  };
  const Value& value(const std::string& key, Type expected) const;
  std::string context_;
  std::vector<std::string> order_;
  std::map<std::string, Value> values_;
};

// Parses "1.5GiB", "512MiB", "100MB", "4096", "1e9" into bytes; throws tt::Error otherwise.
TT_API int64_t parse_bytes(const std::string& text);
// A memory budget: a positive size written without spaces ("1.5GiB", "512MiB", "2GB"); "1.5 GB"
// and "abc" are refused with the forms that work.
TT_API int64_t parse_budget(const std::string& text);
TT_API std::string format_bytes(int64_t bytes);  // "1.50 GiB"
// Levenshtein-nearest candidate, or "" if nothing is reasonably close.
TT_API std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace tt
