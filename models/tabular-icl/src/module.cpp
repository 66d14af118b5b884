// Entry point of the tabular in-context learner: the model, the synthetic prior it is
// pretrained on, and CSV tables (episodic fine-tuning, a stratified test split as validation).
#include "prior.h"
#include "synth_table_tool.h"
#include "tabular_data.h"
#include "tabular_model.h"
#include "tt/module.h"
#include "tt/registry.h"

namespace {
void register_tabular(tt::Registry& r) {
  r.add_model("tabular-icl",
              "TabPFN/TabICL-style in-context learner over table rows (support rows carry labels, query rows attend "
              "to them) from core's blocks",
              tt::tab::model_schema(), &tt::tab::make_model,
              std::vector<std::string>{"block_stack", "attention", "linear"}, std::vector<std::string>{"predict"});
  r.add_dataset("tabular-prior", "synthetic classification tables from random MLP structural causal models (pretraining)",
                tt::tab::prior_schema(), &tt::tab::make_prior);
  r.add_dataset("tabular-csv", "a CSV table: stratified train/test split; episodes of support+query rows for fine-tuning",
                tt::tab::csv_schema(), &tt::tab::make_csv);
  r.add_data_tool("synth-table", "one table from tabular-icl's pretraining prior as CSV (any features and classes)",
                  &tt::tab::synth_table_tool);
  r.add_data_tool("split-table", "a CSV table's stratified train/test split (the rows tt and scikit-learn pick) as two CSV files",
                  &tt::tab::split_table_tool);
}
}  // namespace

TT_MODULE("model", "tabular-icl", "tabular in-context learner, its synthetic prior and CSV tables", register_tabular)
