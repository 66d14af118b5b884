#include "tt/module_loader.h"

#define BOOST_DLL_USE_STD_FS
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "tt/error.h"
#include "tt/examples.h"
#include "tt/log.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace fs = std::filesystem;

namespace tt {
namespace {

std::recursive_mutex g_mu;

// Loaded libraries are never unloaded (objects they made may live until exit).
std::vector<boost::dll::shared_library>& libraries() {
  static auto* libs = new std::vector<boost::dll::shared_library>();
  return *libs;
}

fs::path core_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_library_dir), &info) && info.dli_fname)
    return fs::absolute(fs::path(info.dli_fname)).parent_path();
  return fs::current_path();
}

}  // namespace

std::string examples_dir() {
  std::error_code ec;
  const fs::path installed = (core_library_dir() / TT_CONFIGS_FROM_LIBDIR).lexically_normal();
  return fs::is_directory(installed, ec) ? installed.string() : "configs";
}

namespace {

std::string fingerprint_of(const char* torch, uint32_t gxx, int32_t abi, int32_t cuda) {
  std::ostringstream o;
  o << "LibTorch " << torch << ", C++ ABI " << gxx << ", _GLIBCXX_USE_CXX11_ABI=" << abi << ", "
    << (cuda ? "CUDA" : "CPU-only");
  return o.str();
}

bool is_symbol_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$'; }

// The dynamic linker's text with every mangled C++ name in it shown demangled, the mangled
// name kept beside it for nm and c++filt: "undefined symbol tt::foo() (_ZN2tt3fooEv)".
std::string demangle_symbols(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "_Z") != 0 || (i > 0 && is_symbol_char(text[i - 1]))) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && is_symbol_char(text[end])) ++end;
    const std::string mangled = text.substr(i, end - i);
    int status = -1;
    std::unique_ptr<char, decltype(&std::free)> plain(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                                      &std::free);
    out += status == 0 ? detail::cat(plain.get(), " (", mangled, ")") : mangled;
    i = end;
  }
  return out;
}

// Why dlopen refused `file`, without glibc's repetition of the file name it was given.
std::string load_failure(const std::string& file, const char* dl_error, const std::string& fallback) {
  std::string why = dl_error ? dl_error : fallback;
  if (why.rfind(file + ": ", 0) == 0) why.erase(0, file.size() + 2);
  const std::string undefined = "undefined symbol: ";
  if (const size_t at = why.find(undefined); at != std::string::npos)
    why.replace(at, undefined.size(), "undefined symbol ");
  return demangle_symbols(why);
}

// Why a 64-bit ELF file is shorter than its own headers say (a build or copy cut off), or ""
// when it is not (or is no 64-bit ELF file: dlopen says why). The dynamic linker maps the
// segments without checking and dies of SIGBUS touching the missing part, so tt checks first.
std::string elf_cut_short(const fs::path& file) {
  std::error_code ec;
  const uint64_t size = fs::file_size(file, ec);
  if (ec) return "";
  std::ifstream in(file, std::ios::binary);
  Elf64_Ehdr h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h) || std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 ||
      h.e_ident[EI_CLASS] != ELFCLASS64)
    return "";
  uint64_t need = sizeof h;
  const auto table_end = [](uint64_t offset, uint64_t count, uint64_t entry) { return offset + count * entry; };
  need = std::max(need, table_end(h.e_phoff, h.e_phnum, h.e_phentsize));
  if (h.e_shoff != 0) need = std::max(need, table_end(h.e_shoff, h.e_shnum, h.e_shentsize));
  if (need <= size && h.e_phentsize == sizeof(Elf64_Phdr)) {
    in.seekg(static_cast<std::streamoff>(h.e_phoff));
    for (int i = 0; i < h.e_phnum; ++i) {
      Elf64_Phdr ph{};
      if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) break;
      need = std::max<uint64_t>(need, ph.p_offset + ph.p_filesz);
    }
  }
  if (need <= size) return "";
  return detail::cat("the file is cut short: ", size, " bytes, where its ELF headers need ", need,
                     " (a build or copy that did not finish?); build or copy it again");
}

// tt_<kind>_<name>.so promises a <kind> named <name>; other file names promise nothing.
struct Promise {
  std::string kind, name;
};
std::optional<Promise> promised_by(const fs::path& file) {
  const std::string fn = file.filename().string();
  for (const std::string kind : {"plugin", "model"}) {
    const std::string prefix = "tt_" + kind + "_";
    if (fn.size() > prefix.size() + 3 && fn.rfind(prefix, 0) == 0 && fn.compare(fn.size() - 3, 3, ".so") == 0)
      return Promise{kind, fn.substr(prefix.size(), fn.size() - prefix.size() - 3)};
  }
  return std::nullopt;
}

// The registry finds a pipeline's name through the file name, so a module declaring another
// name than its file's would load and still not be found. Empty when they agree.
std::string misnamed(const fs::path& file, const std::string& kind, const std::string& name) {
  const auto promise = promised_by(file);
  if (!promise || (promise->kind == kind && promise->name == name)) return "";
  const bool same_kind = promise->kind == kind;
  return detail::cat(file.filename().string(), " registered ", same_kind ? "" : kind + " ", "'", name, "', not ",
                     same_kind ? "" : promise->kind + " ", "'", promise->name, "': rename the file to tt_", kind, "_",
                     name, ".so, or the registration (TT_MODULE and its register function) to ", promise->kind, " '",
                     promise->name, "'");
}

// The module declared `name` in TT_MODULE and its register function added `added` (the new
// names of its kind). Empty when `name` is among them.
std::string misregistered(const fs::path& file, const std::string& kind, const std::string& name,
                          const std::vector<std::string>& added) {
  if (std::find(added.begin(), added.end(), name) != added.end()) return "";
  const bool named_file = promised_by(file).has_value();
  std::string registered;
  for (const auto& a : added) registered += detail::cat(registered.empty() ? "" : ", ", "'", a, "'");
  if (registered.empty()) registered = "no " + kind;
  std::string s = detail::cat(named_file ? file.filename().string() : "module '" + name + "'", " registered ",
                              registered, ", not '", name, "': register the ", kind, " as '", name,
                              "', the name in TT_MODULE", named_file ? " and the file name" : "");
  if (added.size() == 1)
    s += detail::cat(", or rename the module", named_file ? " and the file" : "", " to '", added[0], "'");
  return s;
}

}  // namespace

ModuleLoader& ModuleLoader::global() {
  static ModuleLoader* l = new ModuleLoader();
  return *l;
}

std::vector<fs::path> ModuleLoader::search_path() const {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("TT_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string d;
    while (std::getline(ss, d, ':'))
      if (!d.empty()) dirs.emplace_back(d);
  }
  dirs.push_back(core_library_dir() / "tt");
  return dirs;
}

std::string ModuleLoader::describe_search_path() const {
  std::string s;
  const char* env = std::getenv("TT_PLUGIN_PATH");
  const auto dirs = search_path();
  for (const auto& d : dirs) {
    if (!s.empty()) s += ", ";
    s += d.string();
    if (&d == &dirs.back()) break;  // the directory installed with tt, as it is
    std::error_code ec;  // what is wrong with an entry the user wrote
    if (fs::is_regular_file(d, ec))
      s += " (a file: TT_PLUGIN_PATH lists directories; give " + d.parent_path().string() + ")";
    else if (!fs::exists(d, ec))
      s += " (does not exist)";
    else if (!fs::is_directory(d, ec))
      s += " (not a directory)";
  }
  s += env ? " (TT_PLUGIN_PATH, then the directory installed with tt)"
           : " (the directory installed with tt; set TT_PLUGIN_PATH to add more)";
  return s;
}

void ModuleLoader::load_file(const fs::path& file_in) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const fs::path file = fs::absolute(file_in);
  const std::string f = file.string();
  for (const auto& done : loaded_files_)
    if (done == f) return;
  if (auto it = refused_.find(f); it != refused_.end()) throw ModuleError(it->second);
  TT_CHECK_AS(ModuleError, fs::exists(file), f, ": no such file");
  if (const std::string why = elf_cut_short(file); !why.empty()) throw ModuleError(f + ": cannot be loaded: " + why);

  boost::dll::shared_library lib;
  boost::dll::fs::error_code ec;
  lib.load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec)
    TT_FAIL_AS(ModuleError, f, ": cannot be loaded: ", load_failure(f, dlerror(), ec.message()),
               " (was it built against this tt and LibTorch? rebuild it with tt's CMake package)");
  if (!lib.has(TT_MODULE_ENTRY_SYMBOL))
    TT_FAIL_AS(ModuleError, f, ": not a tt module: it does not export '", TT_MODULE_ENTRY_SYMBOL,
               "'. Define the entry point with TT_MODULE(...) from <tt/module.h>.");
  using Entry = const tt_module_info*();
  const tt_module_info* info = lib.get<Entry>(TT_MODULE_ENTRY_SYMBOL)();
  TT_CHECK_AS(ModuleError, info != nullptr, f, ": its entry point returned no module info");
  if (info->api_version != TT_API_VERSION)
    TT_FAIL_AS(ModuleError, f, ": built for tt module API version ", info->api_version,
               ", this tt supports version ", TT_API_VERSION, ". Rebuild the module against this tt.");
  const std::string expected =
      fingerprint_of(TT_TORCH_VERSION_STRING, __GXX_ABI_VERSION, _GLIBCXX_USE_CXX11_ABI, TT_WITH_CUDA);
  const std::string found = fingerprint_of(info->torch_version ? info->torch_version : "?", info->gxx_abi_version,
                                           info->cxx11_abi, info->cuda);
  if (expected != found)
    TT_FAIL_AS(ModuleError, f, ": build fingerprint mismatch: expected ", expected, ", found ", found,
               " (module compiled by ", info->compiler ? info->compiler : "?",
               "). Rebuild the module against the same LibTorch as this tt.");
  const std::string kind = info->kind ? info->kind : "", name = info->name ? info->name : "";
  TT_CHECK_AS(ModuleError, kind == "plugin" || kind == "model", f, ": module kind '", kind,
              "' must be \"plugin\" or \"model\"");
  TT_CHECK_AS(ModuleError, info->register_components != nullptr, f, ": module '", name,
              "' has no register function");
  if (std::string why = misnamed(file, kind, name); !why.empty()) throw ModuleError(f + ": " + why);

  Registry& reg = Registry::global();
  const Kind registry_kind = kind == "plugin" ? Kind::Plugin : Kind::Model;
  const std::vector<std::string> before = reg.names(registry_kind);
  reg.set_current_origin(f);
  std::string refusal;
  try {
    info->register_components(reg);
  } catch (const std::exception& e) {
    refusal = detail::cat(f, ": ", kind, " '", name, "' failed to register: ", e.what());
  }
  reg.set_current_origin("built-in");
  // Whatever it registered, even before failing, points into the library: never unload it.
  libraries().push_back(std::move(lib));
  if (refusal.empty()) {
    const std::vector<std::string> after = reg.names(registry_kind);  // sorted, as `before`
    std::vector<std::string> added;
    std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
    if (std::string why = misregistered(file, kind, name, added); !why.empty()) refusal = f + ": " + why;
  }
  if (!refusal.empty()) {
    reg.remove_origin(f);           // nothing of a refused module is listed or used
    refused_.emplace(f, refusal);  // and it is not loaded again
    throw ModuleError(refusal);
  }
  loaded_files_.push_back(f);
  loaded_.push_back({kind, name, info->description ? info->description : "", f,
                     info->torch_version ? info->torch_version : "", info->compiler ? info->compiler : ""});
}

bool ModuleLoader::load_by_name(const std::string& kind, const std::string& name) {
  // A name that cannot be part of one file's name (empty, a '/' or a NUL in it) names no module;
  // nor does one the file system cannot look up (too long for a file name): the caller's
  // "unknown model 'x'" follows, not an exception from the file system.
  if (name.empty() || name.find_first_of(std::string("/\0", 2)) != std::string::npos) return false;
  const std::string file = "tt_" + kind + "_" + name + ".so";
  const auto dirs = search_path();
  for (size_t i = 0; i < dirs.size(); ++i) {
    const fs::path p = dirs[i] / file;
    std::error_code ec;
    if (fs::exists(p, ec)) {
      load_file(p);
      // one of TT_PLUGIN_PATH's in place of the one installed with tt: said, not silent
      if (i + 1 < dirs.size() && fs::exists(dirs.back() / file, ec) && !fs::equivalent(p, dirs.back() / file, ec))
        log().info("{} '{}' from {}, in place of the one installed with tt ({})", kind, name, p.string(),
                   (dirs.back() / file).string());
      return true;
    }
  }
  return false;
}

std::vector<std::string> ModuleLoader::load_all() {
  std::vector<std::string> refusals;
  std::set<std::string> seen;  // the first directory on the path wins, as for load_by_name
  for (const auto& dir : search_path()) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string fn = entry.path().filename().string();
      if (fn.rfind("tt_", 0) == 0 && entry.path().extension() == ".so") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      if (!seen.insert(p.filename().string()).second) continue;
      try {
        load_file(p);
      } catch (const std::exception& e) {
        refusals.push_back(e.what());
      }
    }
  }
  return refusals;
}

std::vector<ModuleRecord> ModuleLoader::loaded() const { return loaded_; }

}  // namespace tt
