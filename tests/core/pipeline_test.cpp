#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "tt/error.h"
#include "tt/pipeline.h"

using tt::test::temp_dir;
using tt::test::topic_yaml;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    tt::parse_pipeline(yaml, "p.yaml", overrides);
  } catch (const tt::ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Pipeline, ParsesAComponentPipeline) {
  auto p = tt::parse_pipeline(topic_yaml(temp_dir("pipe")), "p.yaml");
  EXPECT_EQ(p.name, "tiny");
  EXPECT_EQ(p.seed, 3u);
  EXPECT_EQ(p.model.name, "topic");
  EXPECT_EQ(p.model.options.get_int("k"), 4);
  EXPECT_EQ(p.data.options.get_int("n_docs"), 64);
  EXPECT_EQ(p.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(p.optimizer.options.get_float("lr"), 0.05);
  EXPECT_DOUBLE_EQ(p.optimizer.options.get_float("beta2"), 0.999);  // default filled in
  EXPECT_EQ(p.trainer.get_int("batch_size"), 16);
}

TEST(Pipeline, UnknownTopLevelKeySuggests) {
  std::string e = error_of("model: topic\ndata: topic-synthetic\ntrainr:\n  epochs: 1\n");
  EXPECT_NE(e.find("p.yaml:3:1: unknown key 'trainr'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'trainer'?"), std::string::npos) << e;
}

TEST(Pipeline, UnknownComponentOptionNamesSection) {
  std::string e = error_of("model: {name: topic, topics: 5}\ndata: topic-synthetic\n");
  EXPECT_NE(e.find("p.yaml:1:22: unknown key 'topics' in model (topic)"), std::string::npos) << e;
}

TEST(Pipeline, UnknownComponentNameListsAvailable) {
  std::string e = error_of("model: topik\ndata: topic-synthetic\n");
  EXPECT_NE(e.find("unknown model 'topik'; did you mean 'topic'?"), std::string::npos) << e;
  // Every installed model is listed (sorted); the topic model is among them.
  const auto avail = e.find("Available models: ");
  ASSERT_NE(avail, std::string::npos) << e;
  const std::string listed = e.substr(avail, e.find('.', avail) - avail);
  EXPECT_NE(listed.find("topic"), std::string::npos) << e;
  e = error_of("model: topic\ndata: topic-synthetic\noptimizer: adamm\n");
  EXPECT_NE(e.find("Available optimizers: adam, adamw, sgd"), std::string::npos) << e;
}

TEST(Pipeline, MissingEmptyAndBrokenFiles) {
  try {
    tt::load_pipeline("/nonexistent/dir/pipe.yaml");
    FAIL();
  } catch (const tt::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/pipe.yaml: pipeline file not found"), std::string::npos);
  }
  auto dir = temp_dir("pipe");
  std::ofstream(dir / "empty.yaml") << "# nothing here\n";
  try {
    tt::load_pipeline((dir / "empty.yaml").string());
    FAIL();
  } catch (const tt::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("empty.yaml: the pipeline is empty"), std::string::npos) << e.what();
  }
  std::string e = error_of("model: {name: topic\ndata: x\n");
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
  EXPECT_NE(e.find("p.yaml:"), std::string::npos) << e;
  EXPECT_NE(error_of("- a\n- b\n").find("a pipeline is a YAML map"), std::string::npos);
  EXPECT_NE(error_of("data: topic-synthetic\n").find("no 'model' section"), std::string::npos);
}

TEST(Pipeline, CommandLineOverrides) {
  auto yaml = topic_yaml(temp_dir("pipe"));
  auto p = tt::parse_pipeline(yaml, "p.yaml",
                              {"trainer.batch_size=64", "model.k=7", "optimizer.lr=0.5", "trainer.max_steps=3",
                               "plugins=[]", "seed=11"});
  EXPECT_EQ(p.trainer.get_int("batch_size"), 64);
  EXPECT_EQ(p.model.options.get_int("k"), 7);
  EXPECT_DOUBLE_EQ(p.optimizer.options.get_float("lr"), 0.5);
  EXPECT_EQ(p.trainer.get_int("max_steps"), 3);
  EXPECT_EQ(p.seed, 11u);
  // a scalar section becomes a map when an override reaches into it
  auto q = tt::parse_pipeline("model: topic\ndata: topic-synthetic\n", "p.yaml", {"model.k=3"});
  EXPECT_EQ(q.model.options.get_int("k"), 3);
}

TEST(Pipeline, OverrideErrorsNameTheCommandLine) {
  auto yaml = topic_yaml(temp_dir("pipe"));
  std::string e = error_of(yaml, {"trainer.batchsize=64"});
  EXPECT_NE(e.find("command line 'trainer.batchsize=64': unknown key 'batchsize' in trainer"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'batch_size'?"), std::string::npos) << e;
  e = error_of(yaml, {"trainer.batch_size=lots"});
  EXPECT_NE(e.find("command line 'trainer.batch_size=lots': trainer.batch_size must be an integer"), std::string::npos)
      << e;
  EXPECT_NE(error_of(yaml, {"trainer.batch_size"}).find("an override is key=value"), std::string::npos);
}

TEST(Pipeline, ResolvedYamlRoundTrips) {
  auto p = tt::parse_pipeline(topic_yaml(temp_dir("pipe")), "p.yaml", {"trainer.epochs=2"});
  std::string resolved = p.resolved_yaml();
  EXPECT_NE(resolved.find("beta1: 0.9"), std::string::npos) << resolved;
  auto q = tt::parse_pipeline(resolved, "resolved.yaml");
  EXPECT_EQ(q.resolved_yaml(), resolved);
  EXPECT_EQ(q.trainer.get_int("epochs"), 2);
}

#include "tt/batch.h"
#include <torch/torch.h>

TEST(Batch, SlicesPerExampleAndCoordinateTensors) {
  tt::Batch b;
  b.set("index", torch::tensor({10, 11, 12, 13}, torch::kLong));
  b.set_entries("rows", {{"rows", torch::tensor({0, 0, 1, 2, 2, 3}, torch::kLong)},
                         {"vals", torch::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f})}});
  EXPECT_EQ(b.size, 4);
  auto s = b.slice(1, 3);
  EXPECT_EQ(s.size, 2);
  EXPECT_TRUE(torch::equal(s.at("index"), torch::tensor({11, 12}, torch::kLong)));
  EXPECT_TRUE(torch::equal(s.at("rows"), torch::tensor({0, 1, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(s.at("vals"), torch::tensor({3.f, 4.f, 5.f})));
}
