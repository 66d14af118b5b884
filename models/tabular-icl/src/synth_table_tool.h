#pragma once
// tt-data synth-table: one table from the synthetic prior written as a CSV file (features f0..,
// the class in the last column, target), for benchmarks on held-out prior seeds.
#include <string>
#include <vector>

namespace tt::tab {
int synth_table_tool(const std::vector<std::string>& args);
}
