#pragma once
// tt-data synth-table: one table from the synthetic prior written as a CSV file (features f0..,
// the class in the last column, target), for benchmarks on held-out prior seeds.
// tt-data split-table: a CSV table's stratified split, the rows tabular-csv's (and scikit-learn's)
// split picks, written as two CSV files of the file's own lines (the header, then the rows in
// file order): to hold out a test set, or to evaluate on splits of the training rows alone.
#include <string>
#include <vector>

namespace tt::tab {
int synth_table_tool(const std::vector<std::string>& args);
int split_table_tool(const std::vector<std::string>& args);
}
