#pragma once
// The transformer LM's data tool, registered in module.cpp: tt-data tokenizer.
// `args` are those after the tool's name; each returns the exit code and throws tt::Error as
// tt::DataToolRun says.
#include <string>
#include <vector>

namespace tt::lm {

// tt-data tokenizer --input FILES... --vocab-size N --out tok.model [--model-type bpe] ...:
// trains a SentencePiece model (tok.model, tok.vocab beside it) for the text dataset, then
// reports how many characters a token covers (tokenizer_tool.cpp).
int tokenizer_tool(const std::vector<std::string>& args);

}  // namespace tt::lm
