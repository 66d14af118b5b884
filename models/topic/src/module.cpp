// Entry point of the topic model library: the model and its datasets.
#include "topic_model.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace {
void register_topic(tt::Registry& r) {
  r.add_model("topic", "tinytopics' Poisson NMF topic model (softmax L x softmax F, summed Poisson loss)",
              tt::topic::model_schema(), &tt::topic::make_model);
  r.add_dataset("topic-synthetic", "synthetic document-term counts (tinytopics generate_synthetic_data)",
                tt::topic::synthetic_schema(), &tt::topic::make_synthetic);
}
}  // namespace

TT_MODULE("model", "topic", "tinytopics' topic model (Poisson NMF) and its datasets", register_topic)
