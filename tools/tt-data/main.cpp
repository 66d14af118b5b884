// tt-data: make and convert data sets for tt's models.
//
//   tt-data synth-topics --n N --m M --k K --avg-doc-length A --seed S --out DIR [--threads T]
//   tt-data tokenizer --input FILES... --vocab-size N --out tok.model [--model-type bpe] ...
//   tt-data fetch brown [--out DIR]
//
// Exit codes: 0 done, 1 error, 2 bad command line or arguments, 130 interrupted.
#include <c10/util/Exception.h>

#include <cstdio>

#include "commands.h"
#include "tt/error.h"
#include "tt/runtime.h"

int main(int argc, char** argv) {
  CLI::App app{"tt-data: make and convert data sets for tt's models"};
  app.require_subcommand(1);
  app.footer("Exit codes: 0 done, 1 error, 2 bad command line or arguments, 130 interrupted.");
  std::vector<tt::data::Command> commands = {tt::data::add_synth_topics(app), tt::data::add_tokenizer(app),
                                             tt::data::add_fetch(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  tt::install_interrupt_handlers("\ntt-data: stopping after this chunk (Ctrl-C again to abort)\n");
  try {
    for (auto& c : commands)
      if (c.app->parsed()) c.run();
    return 0;
  } catch (const tt::Error& e) {
    std::fprintf(stderr, "tt-data: %s%s\n", e.exit_code() == 130 ? "" : "error: ", e.what());
    return e.exit_code();
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "tt-data: error in LibTorch: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tt-data: error: %s\n", e.what());
    return 1;
  }
}
