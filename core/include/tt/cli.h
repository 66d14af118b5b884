#pragma once
// How tt's command-line programs (tt-run, tt-data's tools) end on what CLI11 refuses: --help
// and --version print and give 0; a usage error is one line on stderr,
//   PROGRAM: error: WHAT (PROGRAM --help lists the options)
// and exit code 2, tt's code for a bad command line. Header-only: CLI11 is header-only too.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

namespace tt {

inline int cli_exit(CLI::App& app, const CLI::ParseError& e, const std::string& program) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
  std::fprintf(stderr, "%s: error: %s (%s --help lists the options)\n", program.c_str(), e.what(), program.c_str());
  return 2;
}

}  // namespace tt
