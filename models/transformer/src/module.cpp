// Entry point of the transformer LM library: the model, its streaming text dataset and its data
// tool (tt-data tokenizer; tt-data fetch is tt-data's own).
#include "data_tools.h"
#include "text_stream.h"
#include "transformer_model.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace {
void register_transformer(tt::Registry& r) {
  r.add_model("transformer", "GPT-style decoder-only LM (pre-norm, causal attention, GELU MLP) from core's blocks",
              tt::lm::model_schema(), &tt::lm::make_model,
              std::vector<std::string>{"block_stack", "attention", "linear", "embedding", "output_head"},
              std::vector<std::string>{"generate"});
  r.add_dataset("text", "text files streamed, tokenized on the fly (bytes or SentencePiece), seq_len windows",
                tt::lm::text_schema(), &tt::lm::make_text);
  r.add_data_tool("tokenizer",
                  "train a SentencePiece tokenizer (tok.model, tok.vocab) for the text dataset; decoding gives back "
                  "the exact text",
                  &tt::lm::tokenizer_tool);
}
}  // namespace

TT_MODULE("model", "transformer", "GPT-style transformer LM and its streaming text dataset", register_transformer)
