// Entry point of the topic model library: the model, its datasets and its data tool (tt-data).
#include "source_mtx.h"
#include "source_npy.h"
#include "source_pt.h"
#include "source_text.h"
#include "synth_topics_tool.h"
#include "topic_model.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace {
void register_topic(tt::Registry& r) {
  r.add_model("topic", "tinytopics' Poisson NMF topic model (softmax L x softmax F, summed Poisson loss)",
              tt::topic::model_schema(), &tt::topic::make_model,
              std::vector<std::string>{},   // two matrices: none of tt::nn's parts
              std::vector<std::string>{});  // neither generates text nor predicts from files
  r.add_dataset("topic-synthetic", "synthetic document-term counts (tinytopics generate_synthetic_data)",
                tt::topic::synthetic_schema(), &tt::topic::make_synthetic);
  r.add_dataset("topic-npy", "documents x terms .npy, memory-mapped (tinytopics NumpyDiskDataset)",
                tt::topic::npy_schema(), &tt::topic::make_npy);
  r.add_dataset("topic-pt", "documents x terms tensor saved with torch.save (tinytopics TorchDiskDataset)",
                tt::topic::pt_schema(), &tt::topic::make_pt);
  r.add_dataset("topic-mtx", "sparse documents x terms Matrix Market file (scipy.io.mmwrite)",
                tt::topic::mtx_schema(), &tt::topic::make_mtx);
  r.add_dataset("topic-text", "text corpus tokenized into term counts (like CountVectorizer)",
                tt::topic::text_schema(), &tt::topic::make_text);
  r.add_data_tool("synth-topics",
                  "a synthetic corpus (tinytopics' generate_synthetic_data) streamed to X.npy, true_L.npy and "
                  "true_F.npy; X may be larger than memory",
                  &tt::topic::synth_topics_tool);
}
}  // namespace

TT_MODULE("model", "topic", "tinytopics' topic model (Poisson NMF) and its datasets", register_topic)
