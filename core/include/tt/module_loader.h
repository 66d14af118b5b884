#pragma once
// Loads plugin and model shared libraries (Boost.DLL) and explains every refusal.
//
// Search path: each directory in TT_PLUGIN_PATH (colon-separated), then lib/tt/ beside
// the core library (the build tree and the install tree have the same layout).
// A module for `name` of kind K is the file tt_<K>_<name>.so, and it must register the K
// `name` (a file named otherwise promises no name). Libraries are never unloaded: objects
// they created may live until the process ends, and what a refused module registered
// before it was refused stays registered.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tt/export.h"

namespace tt {

struct ModuleRecord {
  std::string kind, name, description, file, torch_version, compiler;
};

class TT_API ModuleLoader {
 public:
  static ModuleLoader& global();

  std::vector<std::filesystem::path> search_path() const;
  std::string describe_search_path() const;  // for messages
  // Loads one file; throws tt::ModuleError explaining why it was refused (undefined
  // symbols demangled). Loading the same file twice is a no-op, or the same refusal once
  // its register function has run.
  void load_file(const std::filesystem::path& file);
  // Finds tt_<kind>_<name>.so on the search path and loads it. Returns false if no such
  // file exists; throws if it exists but is refused.
  bool load_by_name(const std::string& kind, const std::string& name);
  // Loads every tt_*.so on the search path; refusals are collected, not thrown.
  std::vector<std::string> load_all();
  std::vector<ModuleRecord> loaded() const;

 private:
  std::vector<ModuleRecord> loaded_;
  std::vector<std::string> loaded_files_;
  std::map<std::string, std::string> refused_;  // file -> refusal, for those refused after registering
};

}  // namespace tt
