// Entry point of the transformer LM library: the model and its streaming text dataset.
#include "text_stream.h"
#include "transformer_model.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace {
void register_transformer(tt::Registry& r) {
  r.add_model("transformer", "GPT-style decoder-only LM (pre-norm, causal attention, GELU MLP) from core's blocks",
              tt::lm::model_schema(), &tt::lm::make_model);
  r.add_dataset("text", "text files streamed, tokenized on the fly (bytes or SentencePiece), seq_len windows",
                tt::lm::text_schema(), &tt::lm::make_text);
}
}  // namespace

TT_MODULE("model", "transformer", "GPT-style transformer LM and its streaming text dataset", register_transformer)
