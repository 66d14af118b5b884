#pragma once
// The topic model's data tool, registered in module.cpp: tt-data synth-topics.
#include <string>
#include <vector>

namespace tt::topic {

// tt-data synth-topics --n N --m M --k K --avg-doc-length A --seed S --out DIR [--threads T]:
// a synthetic corpus (the topic-synthetic dataset's generator) streamed to DIR/X.npy,
// DIR/true_L.npy and DIR/true_F.npy. `args` are those after the tool's name; returns the exit
// code and throws tt::Error as tt::DataToolRun says.
int synth_topics_tool(const std::vector<std::string>& args);

}  // namespace tt::topic
