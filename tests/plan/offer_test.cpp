// What the budget planner weighs comes from the plugins' registrations (PlannerOffer): tt's own
// plugins offer the same dimensions and alternatives, in the same order, as before the planner
// read them from the registry; a pipeline that names a plugin keeps it as set; a declaration
// whose options the plugin's schema refuses is refused when the module registers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan.h"
#include "tt/error.h"
#include "tt/pipeline.h"
#include "tt/plugin.h"
#include "tt/registry.h"

namespace {
using tt::plan::Dimension;

tt::Pipeline tiny_lm(const std::string& extra) {
  return tt::parse_pipeline(
      "name: tiny-lm\n"
      "data: {name: text, train: train.txt, seq_len: 64}\n"
      "model: {name: transformer, d_model: 64, n_layers: 2, n_heads: 4}\n" +
          extra,
      "<offer test>");
}

// "name(label) = yaml" per alternative, dimension by dimension: the whole of what the planner weighs.
std::vector<std::string> flatten(const std::vector<Dimension>& dims) {
  std::vector<std::string> out;
  for (const auto& d : dims)
    for (const auto& a : d.alternatives) out.push_back(d.name + ": " + a.label + " = " + a.yaml);
  return out;
}

const std::vector<std::string> kCpu = {
    "checkpoint: checkpoint(all) = {name: checkpoint, policy: all}",
    "checkpoint: checkpoint(every 2) = {name: checkpoint, policy: every, every: 2}",
    "amp: amp(bf16) = {name: amp, dtype: bf16}",
    "attention: attention(chunked) = {name: attention, kernel: chunked}",
    "adam8bit: adam8bit = {name: adam8bit}",
    "offload: offload(disk) = {name: offload}",
};

}  // namespace

TEST(PlannerOffer, TtsPluginsOfferTheFiveDimensionsInOrderOnCpu) {
  std::vector<std::string> notes;
  const auto dims = tt::plan::offered_dimensions(tiny_lm(""), notes);
  EXPECT_EQ(flatten(dims), kCpu);
  EXPECT_EQ(notes, std::vector<std::string>{});
}

TEST(PlannerOffer, OnCudaFp16AndHostOffloadReplaceDiskOffload) {
  std::vector<std::string> notes;
  const auto dims = tt::plan::offered_dimensions(tiny_lm("trainer: {device: cuda}\n"), notes);
  const std::vector<std::string> cuda = {
      "checkpoint: checkpoint(all) = {name: checkpoint, policy: all}",
      "checkpoint: checkpoint(every 2) = {name: checkpoint, policy: every, every: 2}",
      "amp: amp(bf16) = {name: amp, dtype: bf16}",
      "amp: amp(fp16) = {name: amp, dtype: fp16}",
      "attention: attention(chunked) = {name: attention, kernel: chunked}",
      "adam8bit: adam8bit = {name: adam8bit}",
      "offload: offload(host) = {name: offload, target: host}",
  };
  EXPECT_EQ(flatten(dims), cuda);
}

TEST(PlannerOffer, APluginThePipelineNamesIsKeptAsSetAndNotWeighed) {
  std::vector<std::string> notes;
  const auto dims =
      tt::plan::offered_dimensions(tiny_lm("plugins: [{name: amp, dtype: bf16}, adam8bit]\n"), notes);
  std::vector<std::string> expected;
  for (const auto& line : kCpu)
    if (line.rfind("amp:", 0) != 0 && line.rfind("adam8bit:", 0) != 0) expected.push_back(line);
  EXPECT_EQ(flatten(dims), expected);
  EXPECT_EQ(notes, (std::vector<std::string>{"amp: kept as the pipeline sets it", "adam8bit: kept as the pipeline sets it"}));
}

TEST(PlannerOffer, OptionsTheSchemaRefusesAreRefusedAtRegistration) {
  const auto schema = tt::Schema().add("policy", tt::Type::String, "all", "").add("every", tt::Type::Int, "2", "");
  const tt::PluginFactory none = [](const tt::Options&) -> std::unique_ptr<tt::Plugin> { return nullptr; };
  auto refusal = [&](const std::string& name, tt::PlannerOffer offer) {
    try {
      tt::Registry::global().add_plugin(name, "refused by its planner offer", schema, none, std::move(offer));
    } catch (const tt::ModuleError& e) {
      return std::string(e.what());
    }
    return std::string("registered");
  };
  using A = tt::PlannerAlternative;
  std::string m = refusal("test-offer-key", {{A{"k(every 3)", "{evry: 3}"}}});
  EXPECT_NE(m.find("plugin 'test-offer-key' from built-in: planner alternative 'k(every 3)'"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key 'evry'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'every'?"), std::string::npos) << m;

  m = refusal("test-offer-type", {{A{"t(every x)", "{every: x}"}}});
  EXPECT_NE(m.find("planner alternative 't(every x)'"), std::string::npos) << m;
  EXPECT_NE(m.find("every"), std::string::npos) << m;

  m = refusal("test-offer-yaml", {{A{"y", "{policy: [all"}}});
  EXPECT_NE(m.find("its options '{policy: [all' are not YAML"), std::string::npos) << m;

  m = refusal("test-offer-list", {{A{"l", "[all]"}}});
  EXPECT_NE(m.find("must be a map of options"), std::string::npos) << m;

  m = refusal("test-offer-twice", {{A{"d", "{policy: all}"}, A{"d", "{every: 3}"}}});
  EXPECT_NE(m.find("planner alternative 'd' is declared twice"), std::string::npos) << m;

  m = refusal("test-offer-unlabelled", {{A{"", "{policy: all}"}}});
  EXPECT_NE(m.find("a planner alternative has no label"), std::string::npos) << m;

  // None of them was registered.
  for (const char* n : {"test-offer-key", "test-offer-type", "test-offer-yaml", "test-offer-list", "test-offer-twice",
                        "test-offer-unlabelled"})
    for (const auto& e : tt::Registry::global().entries(tt::Kind::Plugin)) EXPECT_NE(e.name, n);
}

// A plugin that acts on a part of the model the model declares it has not is not weighed: the
// topic model is two matrices, so checkpoint (block_stack), amp (linear: the matrix products
// autocast casts) and attention are left out, and the notes say why; the others are weighed as
// for any model.
TEST(PlannerOffer, APluginNeedingAPartTheModelHasNotIsNotWeighed) {
  std::vector<std::string> notes;
  const auto dims = tt::plan::offered_dimensions(
      tt::parse_pipeline("name: t\ndata: topic-synthetic\nmodel: {name: topic, k: 4}\n", "<offer test>"), notes);
  std::vector<std::string> expected;
  for (const auto& line : kCpu)
    if (line.rfind("checkpoint:", 0) != 0 && line.rfind("amp:", 0) != 0 && line.rfind("attention:", 0) != 0)
      expected.push_back(line);
  EXPECT_EQ(flatten(dims), expected);
  EXPECT_EQ(notes, (std::vector<std::string>{"checkpoint: acts on a model's block_stack, and model 'topic' has none",
                                             "amp: acts on a model's linear, and model 'topic' has none",
                                             "attention: acts on a model's attention, and model 'topic' has none"}));
}
