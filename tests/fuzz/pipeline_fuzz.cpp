// Pipeline validation from YAML text (core/src/pipeline.cpp, options.cpp, option_text.cpp,
// yaml_util.cpp): parse_pipeline with the component schemas of the modules on the search path
// (lib/tt beside libtt_core, as tt-run finds them), command-line overrides taken from the
// lines after the first NUL, and the resolved YAML of an accepted pipeline, which must itself
// be accepted and resolve to the same text.
#include <sstream>

#include "fuzz_util.h"
#include "tt/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt::fuzz;
  const auto [text, tail] = split_at_nul(as_view(data, size));
  const std::string yaml(text);
  std::vector<std::string> overrides;
  std::istringstream lines{std::string(tail)};
  for (std::string line; std::getline(lines, line) && overrides.size() < 4;)
    if (!line.empty()) overrides.push_back(line);
  refusing([&] {
    const tt::Pipeline p = tt::parse_pipeline(yaml, "fuzz.yaml", overrides);
    const std::string resolved = p.resolved_yaml();
    tt::Pipeline again;
    try {
      again = tt::parse_pipeline(resolved, "fuzz.yaml");
    } catch (const tt::Error& e) {
      std::fprintf(stderr, "resolved pipeline refused: %s\n--- resolved:\n%s\n", e.what(), resolved.c_str());
      expect(false, "the resolved YAML of an accepted pipeline is accepted");
    }
    expect(again.resolved_yaml() == resolved, "the resolved YAML resolves to itself");
  });
  return 0;
}
