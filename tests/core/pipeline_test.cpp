#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "tt/error.h"
#include "tt/pipeline.h"
#include "tt/plugin.h"
#include "tt/registry.h"

using tt::test::temp_dir;
using tt::test::topic_yaml;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return tt::test::refusal_of([&] { tt::parse_pipeline(yaml, "p.yaml", overrides); });
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

TEST(Pipeline, UnknownComponentNameIsSaidWhereItIsAndListsAvailable) {
  std::string e = error_of("model: topik\ndata: topic-synthetic\n");
  EXPECT_EQ(e.rfind("p.yaml:1:8: model: unknown model 'topik'; did you mean 'topic'?", 0), 0u) << e;
  // Every installed model is listed (sorted); the topic model is among them.
  const auto avail = e.find("Available models: ");
  ASSERT_NE(avail, std::string::npos) << e;
  const std::string listed = e.substr(avail, e.find('.', avail) - avail);
  EXPECT_NE(listed.find("topic"), std::string::npos) << e;
  e = error_of("model: topic\ndata: topic-synthetic\noptimizer: adamm\n");
  EXPECT_EQ(e.rfind("p.yaml:3:12: optimizer: unknown optimizer 'adamm'", 0), 0u) << e;
  EXPECT_NE(e.find("Available optimizers: adam, adamw, sgd"), std::string::npos) << e;
  // the name's own line in a map, the entry's in a list, the override that set it
  e = error_of("model: topic\ndata: topic-synthetic\nplugins:\n  - adam8bit\n  - {dtype: bf16, name: chekpoint}\n");
  EXPECT_EQ(e.rfind("p.yaml:5:25: plugins[1]: unknown plugin 'chekpoint'", 0), 0u) << e;
  e = error_of("model: topic\ndata: topic-synthetic\n", {"schedule.name=cosin"});
  EXPECT_EQ(e.rfind("command line 'schedule.name=cosin': schedule: unknown schedule 'cosin'", 0), 0u) << e;
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
  EXPECT_EQ(e.find("tab"), std::string::npos) << e;
  // a tab in the indentation: yaml-cpp's message alone ("illegal map value") does not say so
  e = error_of("model: topic\ndata: topic-synthetic\ntrainer:\n\tepochs: 2\n");
  EXPECT_HAS(e, "YAML syntax error");
  EXPECT_HAS(e, "(line 4 is indented with a tab: YAML indents with spaces)");
  EXPECT_NE(error_of("- a\n- b\n").find("a pipeline is a YAML map"), std::string::npos);
  EXPECT_NE(error_of("data: topic-synthetic\n").find("no 'model' section"), std::string::npos);
}

// yaml-cpp reads any bytes; a string that is not UTF-8 (a Latin-1 file) used to pass --dry-run
// and train, then fail writing summary.json, and again on every --resume.
TEST(Pipeline, TextThatIsNotUtf8IsRefusedWhereItIs) {
  const std::string good = "model: topic\ndata: topic-synthetic\n";
  EXPECT_EQ(error_of("name: caf\xe9\n" + good),
            "p.yaml:1:10: not UTF-8 text (a byte of another encoding, such as Latin-1): save the file as UTF-8, "
            "e.g. iconv -f latin1 -t utf-8 p.yaml > NEW.yaml");
  EXPECT_HAS(error_of(good + "# caf\xc3\n"), "p.yaml:3:6: not UTF-8 text");  // a character cut short
  EXPECT_HAS(error_of(good + "name: \xed\xa0\x80\n"), "p.yaml:3:7: not UTF-8 text");  // a surrogate
  EXPECT_EQ(error_of(good, {"name=caf\xe9"}),
            "command line 'name=caf\xe9': not UTF-8 text (a byte of another encoding, such as Latin-1); give it in "
            "UTF-8");
  // a UTF-16 file (a Windows editor's "Unicode") is text of another encoding
  EXPECT_HAS(error_of(std::string("\xFF\xFEm\0o\0", 6)), "p.yaml is UTF-16 text (its byte-order mark): save it as UTF-8");
  // a data file (an .npy) given for the pipeline is not "not UTF-8": it is no pipeline at all
  EXPECT_HAS(error_of(std::string("\x93NUMPY\x01\x00v\x00{'descr': '<f4'", 25)),
             "p.yaml is not a pipeline file but binary data (a NUL byte at offset 7): tt-run takes a pipeline YAML file");
  EXPECT_EQ(tt::parse_pipeline("name: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n" + good, "p.yaml").name,
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // UTF-8 of 2, 3 and 4 bytes
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
  // Another component named on the command line keeps the file's keys of the one it replaces:
  // the refusal of the first that does not fit says so and how to give the whole section.
  std::string adam = yaml;
  adam.replace(adam.find("weight_decay: 1.0e-5"), 20, "beta2: 0.95");
  e = error_of(adam, {"optimizer.name=sgd"});
  EXPECT_HAS(e, ": unknown key 'beta2' in optimizer (sgd)");
  EXPECT_HAS(e, ". The command line's optimizer.name=sgd keeps p.yaml's other optimizer keys: give the whole section "
                "instead, e.g. 'optimizer={name: sgd}'");
  adam.replace(adam.find("name: adamw"), 11, "name: sgd");
  EXPECT_EQ(error_of(adam).find("command line"), std::string::npos) << error_of(adam);
}

namespace {
// A plugin registered in-process (no module file): a scalar list entry with an option.
void register_dtype_plugin() {
  static const bool once = [] {
    for (const char* name : {"pipeline-test-dtype", "pipeline-test-dtype-b"})
      tt::Registry::global().add_plugin(name, "a plugin with one option, for override tests",
                                        tt::Schema().add("dtype", tt::Type::String, "bf16", "bf16 or fp16"),
                                        [](const tt::Options&) { return std::make_unique<tt::Plugin>(); });
    return true;
  }();
  (void)once;
}

std::string dotted_error(YAML::Node root, const std::string& key, const std::string& value) {
  return tt::test::refusal_of([&] { tt::set_dotted(root, key, YAML::Load(value), "plan"); });
}
}  // namespace

// The pipeline's overrides: a scalar list entry addressed with a sub-key becomes {name, key}.
TEST(Pipeline, OverrideIntoAScalarListEntryMakesItAComponentMap) {
  register_dtype_plugin();
  const std::string yaml = "model: topic\ndata: topic-synthetic\nplugins: [pipeline-test-dtype, pipeline-test-dtype-b]\n";
  auto p = tt::parse_pipeline(yaml, "p.yaml", {"plugins.1.dtype=fp16"});
  ASSERT_EQ(p.plugins.size(), 2u);
  EXPECT_EQ(p.plugins[0].name, "pipeline-test-dtype");
  EXPECT_EQ(p.plugins[0].options.get_string("dtype"), "bf16");  // untouched: still the scalar, defaults
  EXPECT_EQ(p.plugins[1].name, "pipeline-test-dtype-b");
  EXPECT_EQ(p.plugins[1].options.get_string("dtype"), "fp16");
  // a whole entry replaced by index, then reached into
  auto q = tt::parse_pipeline("model: topic\ndata: topic-synthetic\nplugins: [pipeline-test-dtype]\n", "p.yaml",
                              {"plugins.0=pipeline-test-dtype", "plugins.0.dtype=fp16"});
  ASSERT_EQ(q.plugins.size(), 1u);
  EXPECT_EQ(q.plugins[0].options.get_string("dtype"), "fp16");
  // the error in an option set this way names the command line
  std::string e = error_of(yaml, {"plugins.0.dtyp=fp16"});
  EXPECT_NE(e.find("command line 'plugins.0.dtyp=fp16': unknown key 'dtyp' in plugins[0] (pipeline-test-dtype)"),
            std::string::npos)
      << e;
}

// What compare's variants (set:) and the planner's probes call: the same parser on a YAML tree.
TEST(Pipeline, SetDottedOnAYamlTree) {
  YAML::Node root = YAML::Load("model: transformer\nplugins: [amp, checkpoint]\ntrainer: {batch_size: 8}\n");
  tt::set_dotted(root, "plugins.0.dtype", YAML::Node("fp16"), "plan");
  ASSERT_TRUE(root["plugins"][0].IsMap());
  EXPECT_EQ(root["plugins"][0]["name"].as<std::string>(), "amp");
  EXPECT_EQ(root["plugins"][0]["dtype"].as<std::string>(), "fp16");
  EXPECT_EQ(root["plugins"][1].as<std::string>(), "checkpoint");  // the other entry stays a scalar
  tt::set_dotted(root, "plugins.1", YAML::Load("{name: checkpoint, policy: every}"), "plan");
  EXPECT_EQ(root["plugins"][1]["policy"].as<std::string>(), "every");
  tt::set_dotted(root, "model.d_model", YAML::Node(64), "plan");  // a scalar section becomes a map
  EXPECT_EQ(root["model"]["name"].as<std::string>(), "transformer");
  EXPECT_EQ(root["model"]["d_model"].as<int>(), 64);
  tt::set_dotted(root, "trainer.micro_batch_size", YAML::Node(4), "plan");
  EXPECT_EQ(root["trainer"]["batch_size"].as<int>(), 8);
  EXPECT_EQ(root["trainer"]["micro_batch_size"].as<int>(), 4);
  tt::set_dotted(root, "output.plots", YAML::Node(false), "plan");  // a missing section is created
  EXPECT_FALSE(root["output"]["plots"].as<bool>());
  EXPECT_EQ(YAML::Dump(root),
            "model:\n  name: transformer\n  d_model: 64\nplugins: [{name: amp, dtype: fp16}, {name: checkpoint, "
            "policy: every}]\ntrainer: {batch_size: 8, micro_batch_size: 4}\noutput:\n  plots: false");

  // errors start with the caller's `where`
  EXPECT_NE(dotted_error(root, "plugins.x.dtype", "fp16").find("plan: 'x' indexes a list; use a number"),
            std::string::npos);
  EXPECT_NE(dotted_error(root, "plugins.2.dtype", "fp16").find("plan: index 2 is past the end of the list (2 entries)"),
            std::string::npos);
  EXPECT_NE(dotted_error(root, "plugins.2", "amp").find("index 2 is past the end"), std::string::npos);
  // an index into a list the pipeline does not have: the whole list is the way
  EXPECT_EQ(dotted_error(YAML::Load("model: topic"), "plugins.0", "{name: amp, dtype: bf16}"),
            "plan: the pipeline has no 'plugins' list for '0' to index; give the whole list, e.g. "
            "plugins=[{name: amp, dtype: bf16}]");
  EXPECT_EQ(dotted_error(YAML::Load("model: topic"), "plugins.0.every", "2"),
            "plan: the pipeline has no 'plugins' list for '0' to index; give the whole list");
  EXPECT_NE(dotted_error(root, "plugins.-1", "amp").find("'-1' indexes a list"), std::string::npos);
  EXPECT_NE(dotted_error(root, "trainer..batch_size", "1").find("plan: 'trainer..batch_size' has an empty key segment"),
            std::string::npos);
  EXPECT_NE(dotted_error(root, "trainer.", "1").find("empty key segment"), std::string::npos);
}

// A comparison variant's set: is keyed by dotted paths, so an override into it takes the rest of
// its key as one of them (it used to make set: {model: {size: ...}}, a model without a name).
TEST(Pipeline, AnOverrideIntoAVariantsSetTakesTheRestOfItsKeyAsOnePath) {
  YAML::Node root = YAML::Load("compare: {variants: {a: {set: {data.rows: 512}}, b: {plugins: []}}}\n");
  tt::set_dotted(root, "compare.variants.a.set.model.size", YAML::Node("large"), "cli");
  tt::set_dotted(root, "compare.variants.b.set.plugins.0.kernel", YAML::Node("chunked"), "cli");
  tt::set_dotted(root, "compare.variants.a.set.data.rows", YAML::Node(768), "cli");
  EXPECT_EQ(YAML::Dump(root["compare"]["variants"]),
            "{a: {set: {data.rows: 768, model.size: large}}, b: {plugins: [], set: {plugins.0.kernel: chunked}}}");
  tt::set_dotted(root, "compare.steps", YAML::Node(3), "cli");  // elsewhere in compare: a path as before
  EXPECT_EQ(root["compare"]["steps"].as<int>(), 3);
}

// An override whose value is a structure: its errors are on the command line, not at the
// value's position read as a position in the pipeline file.
TEST(Pipeline, ErrorsInsideAStructuredOverrideValueNameTheCommandLine) {
  register_dtype_plugin();
  const std::string yaml = "model: topic\ndata: topic-synthetic\n";
  struct Case {
    std::string override_, expect;
  };
  for (const Case& k : std::vector<Case>{
           {"trainer={epochs: 1, batch_size: abc}", "trainer.batch_size must be an integer"},
           {"model={name: topic, k: abc}", "model (topic).k must be an integer"},
           {"model={name: topic, topics: 5}", "unknown key 'topics' in model (topic)"},
           {"model={k: 5}", "model needs a 'name'"},
           {"plugins=[{name: pipeline-test-dtype, dtype: [a]}]", "plugins[0] (pipeline-test-dtype).dtype"},
           {"plugins.0={name: pipeline-test-dtype, dtyp: fp16}", "unknown key 'dtyp'"},
           {"plugins={name: pipeline-test-dtype}", "plugins must be a list"},
           {"trainer=5", "trainer must be a map of options (key: value), got '5'"},
           {"output=[a]", "output must be a map of options (key: value), got a list"},
       }) {
    const std::string e = error_of(yaml + (k.override_.rfind("plugins.0", 0) == 0 ? "plugins: [x]\n" : ""),
                                   {"trainer.max_steps=1", k.override_});
    EXPECT_EQ(e.rfind("command line '" + k.override_ + "': ", 0), 0u) << e;
    EXPECT_NE(e.find(k.expect), std::string::npos) << e;
    EXPECT_EQ(e.find("p.yaml:1:"), std::string::npos) << e;
  }
  // a key set on its own after the whole section is named by its own override
  std::string e = error_of(yaml, {"trainer={batch_size: 4}", "trainer.epochs=abc"});
  EXPECT_EQ(e.rfind("command line 'trainer.epochs=abc': trainer.epochs must be an integer", 0), 0u) << e;
  // a value the file set is still located in the file
  e = error_of("model: topic\ndata: topic-synthetic\ntrainer: {batch_size: abc}\n", {"trainer.epochs=1"});
  EXPECT_EQ(e.rfind("p.yaml:3:", 0), 0u) << e;
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

TEST(Pipeline, AnOverrideIntoAMissingSectionWithADefaultChangesTheDefaultComponent) {
  const std::string yaml = "model: topic\ndata: topic-synthetic\n";  // no optimizer, no schedule
  auto p = tt::parse_pipeline(yaml, "p.yaml", {"optimizer.lr=0.02", "schedule.warmup_steps=3"});
  EXPECT_EQ(p.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(p.optimizer.options.get_float("lr"), 0.02);
  auto q = tt::parse_pipeline(yaml + "optimizer: {lr: 0.5}\n", "p.yaml");
  EXPECT_EQ(q.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(q.optimizer.options.get_float("lr"), 0.5);
  // a model has no default: it still needs its name
  EXPECT_NE(error_of("model: {k: 5}\ndata: topic-synthetic\n").find("model needs a 'name'"), std::string::npos);
  // {name:topic} is one key to YAML: the message says what to write
  EXPECT_NE(error_of("model: {name:topic}\ndata: topic-synthetic\n")
                .find("model needs a 'name' (tt-run --list shows the choices); it has the key 'name:topic': YAML needs "
                      "a space after the colon, 'name: topic'"),
            std::string::npos)
      << error_of("model: {name:topic}\ndata: topic-synthetic\n");
  // a component's options nested under its name, as DeepSpeed's and torchtune's configs have them
  const std::string nested =
      error_of("model: topic\ndata: topic-synthetic\nplugins: [{checkpoint: {policy: every}}]\n");
  EXPECT_HAS(nested, "needs a 'name' (tt-run --list shows the choices); it has the one key 'checkpoint': the "
                     "options go beside the name, {name: checkpoint, option: value, ...}");
}

// YAML forbids a key twice in one map; yaml-cpp would keep one of them silently.
TEST(Pipeline, ADuplicateKeyIsRefusedWhereverItIs) {
  const std::string yaml = topic_yaml(temp_dir("pipe"));
  std::string e = error_of("seed: 1\n" + yaml);  // topic_yaml has its own seed: on line 3
  EXPECT_NE(e.find("p.yaml:3:1: 'seed' appears twice in this map (first at p.yaml:1:1); give each key once"),
            std::string::npos) << e;
  e = error_of(yaml + "trainer: {batch_size: 4}\n");
  EXPECT_NE(e.find("'trainer' appears twice in this map"), std::string::npos) << e;
  e = error_of(yaml + "compare: {variants: {a: {k: 3, k: 4}}}\n");
  EXPECT_NE(e.find("'k' appears twice in this map"), std::string::npos) << e;
  e = error_of(yaml, {"model={name: topic, k: 3, k: 4}"});
  EXPECT_NE(e.find("command line 'model={name: topic, k: 3, k: 4}'"), std::string::npos) << e;
  EXPECT_NE(e.find("'k' appears twice"), std::string::npos) << e;
}

TEST(Pipeline, AnEmptyOverrideValueIsAnErrorNotTheDefault) {
  const std::string e = error_of(topic_yaml(temp_dir("pipe")), {"trainer.batch_size="});
  EXPECT_NE(e.find("command line 'trainer.batch_size=': no value after '='; give one, or ~ for the default"),
            std::string::npos) << e;
}

TEST(Pipeline, NumbersNoRunCouldUseAreRefused) {
  const std::string yaml = topic_yaml(temp_dir("pipe"));
  for (const auto& [override, expect] : std::vector<std::pair<std::string, std::string>>{
           {"trainer.threads=-3", "trainer.threads must be in [0, 1024], got -3"},
           {"trainer.threads=100000", "trainer.threads must be in [0, 1024], got 100000"},
           {"trainer.grad_clip=-1", "trainer.grad_clip must be > 0, got -1"},
           {"trainer.checkpoint_every=-1", "trainer.checkpoint_every must be >= 0, got -1"},
           {"trainer.keep_checkpoints=-2", "trainer.keep_checkpoints must be >= 0, got -2"}}) {
    const std::string e = error_of(yaml, {override});
    EXPECT_NE(e.find(expect), std::string::npos) << override << ": " << e;
  }
}

// What no machine could run is refused when the pipeline is read (so --dry-run and a
// comparison's check refuse it too), not when the run sets up: a device that is not one, a
// micro-batch larger than the batch, a name that would put the run outside output.dir.
TEST(Pipeline, ADeviceMicroBatchOrNameNoRunCouldUseIsRefusedWhenRead) {
  const std::string yaml = topic_yaml(temp_dir("pipe"));
  for (const auto& [override, expect] : std::vector<std::pair<std::string, std::string>>{
           {"trainer.device=tpu", "command line 'trainer.device=tpu': trainer.device must be cpu, cuda or cuda:N, got 'tpu'"},
           {"trainer.device=cuda:x", "trainer.device must be cpu, cuda or cuda:N, got 'cuda:x'"},
           {"trainer.device=cuda:-1", "trainer.device must be cpu, cuda or cuda:N, got 'cuda:-1'"},
           {"trainer.micro_batch_size=32", "trainer.micro_batch_size must be at most batch_size (16)"},
           {"name=../../escaped", "name '../../escaped' is not a file name"}}) {
    const std::string e = error_of(yaml, {override});
    EXPECT_NE(e.find(expect), std::string::npos) << override << ": " << e;
  }
  for (const char* fine : {"trainer.device=cpu", "trainer.device=cuda", "trainer.device=cuda:1",
                           "trainer.micro_batch_size=16", "name=my-run.2"})
    EXPECT_EQ(error_of(yaml, {fine}), "") << fine;
}

TEST(Pipeline, APluginListedTwiceIsRefusedNamingBothEntries) {
  const std::string e = error_of(topic_yaml(temp_dir("pipe"), "", "plugins: [oom-guard, {name: oom-guard, min_micro_batch: 2}]\n"));
  EXPECT_NE(e.find("plugins[1] lists 'oom-guard' again (it is plugins[0], at p.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("list each plugin once, with all its options in one entry ('oom-guard' does not declare that "
                   "repeats are meaningful)"),
            std::string::npos)
      << e;
}

TEST(Pipeline, APluginListLongerThanAnyPipelineNeedsIsRefused) {
  std::string list = "plugins: [";
  for (int i = 0; i < 65; ++i) list += i ? ", oom-guard" : "oom-guard";
  const std::string e = error_of(topic_yaml(temp_dir("pipe"), "", list + "]\n"));
  EXPECT_NE(e.find("plugins lists 65 entries; a pipeline takes at most 64"), std::string::npos) << e;
}

// A model declares the parts of tt::nn it is built from, a plugin the part it acts on: a pipeline
// pairing them wrongly is refused when it is read, at the plugin's entry; a model that declares
// nothing (the test model) leaves it to the plugin when the run starts.
TEST(Pipeline, APluginThatActsOnAPartTheModelHasNotIsRefusedWhenRead) {
  std::string e = error_of("model: {name: topic, k: 4}\ndata: topic-synthetic\nplugins: [checkpoint]\n");
  EXPECT_EQ(e.rfind("p.yaml:3:11: plugins[0] (checkpoint) acts on a model's block_stack, and model 'topic' has none "
                    "(its parts: none); remove it from plugins",
                    0),
            0u)
      << e;
  e = error_of("model: {name: topic, k: 4}\ndata: topic-synthetic\nplugins: [adam8bit, {name: lora, r: 2}]\n");
  EXPECT_NE(e.find("plugins[1] (lora) acts on a model's linear, and model 'topic' has none"), std::string::npos) << e;
  // amp: autocast casts matrix products, and the topic model's loss is tt's own float32 kernels
  e = error_of("model: {name: topic, k: 4}\ndata: topic-synthetic\nplugins: [amp]\n");
  EXPECT_NE(e.find("plugins[0] (amp) acts on a model's linear, and model 'topic' has none"), std::string::npos) << e;
  // tabular-icl has a block stack, attention and linear layers, and no embedding: the parts it
  // has are listed for a plugin that needs one
  EXPECT_EQ(error_of("model: {name: tabular-icl}\ndata: {name: tabular-prior}\nplugins: [checkpoint, attention, lora]\n"), "");
  tt::Registry::global().add_plugin(
      "test-needs-embedding", "a plugin acting on a model's embedding", tt::Schema(),
      [](const tt::Options&) -> std::unique_ptr<tt::Plugin> { return nullptr; }, {}, tt::Repeats::Once, {"embedding"});
  e = error_of("model: {name: tabular-icl}\ndata: {name: tabular-prior}\nplugins: [test-needs-embedding]\n");
  EXPECT_NE(e.find("plugins[0] (test-needs-embedding) acts on a model's embedding, and model 'tabular-icl' has none "
                   "(its parts: block_stack, attention, linear)"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_of("model: transformer\ndata: {name: text, train: t.txt}\nplugins: [checkpoint, attention, lora]\n"), "");
  tt::test::register_test_components();
  EXPECT_EQ(error_of("model: test-regression\ndata: test-regression-data\nplugins: [checkpoint]\n"), "")
      << "a model that declares nothing is not refused when read";
}
