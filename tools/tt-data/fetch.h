#pragma once
// tt-data fetch CORPUS [--out DIR] [--from DIR]: tt-data's own data tool (fetch.cpp says what it
// fetches and from where). `args` are those after the tool's name; returns the exit code and
// throws tt::Error as tt::DataToolRun says.
#include <string>
#include <vector>

namespace tt::data {

int fetch_tool(const std::vector<std::string>& args);

}  // namespace tt::data
