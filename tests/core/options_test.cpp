#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <functional>

#include "test_support.h"
#include "tt/error.h"
#include "tt/options.h"
#include "tt/pipeline.h"

using tt::ge;
using tt::gt;
using tt::le;
using tt::lt;
using tt::Options;
using tt::Schema;
using tt::Type;

namespace {
Schema schema() {
  return Schema()
      .add("batch_size", Type::Int, "16", "")
      .add("lr", Type::Float, "0.001", "")
      .add("shuffle", Type::Bool, "true", "")
      .add("name", Type::String, "~", "")
      .add("cap", Type::Bytes, "~", "")
      .add("targets", Type::List, "[qkv, proj]", "");
}

std::string options_error(const std::string& yaml) {
  return tt::test::refusal_of([&] { Options::parse(YAML::Load(yaml), schema(), "trainer", "x.yaml"); });
}
}  // namespace

TEST(Options, DefaultsApplyAndTypesConvert) {
  Options o = Options::parse(YAML::Load("batch_size: 1e3\nlr: 3\ncap: 1.5GiB\ntargets: all-linear"), schema(),
                             "trainer", "x.yaml");
  EXPECT_EQ(o.get_int("batch_size"), 1000);
  EXPECT_DOUBLE_EQ(o.get_float("lr"), 3.0);
  EXPECT_TRUE(o.get_bool("shuffle"));
  EXPECT_FALSE(o.is_set("name"));
  EXPECT_EQ(o.get_bytes("cap"), 1610612736);
  EXPECT_EQ(o.get_list("targets"), std::vector<std::string>{"all-linear"});
  Options d = Options::defaults(schema(), "trainer");
  EXPECT_EQ(d.get_list("targets"), (std::vector<std::string>{"qkv", "proj"}));
}

// A list option given one value is a list of that value, whatever characters it holds: its
// resolved text reads back as the same one-item list (a '{' or ']' inside is quoted, not taken
// for the brackets of a flow collection).
TEST(Options, AListGivenOneValueResolvesToAListOfExactlyThatValue) {
  for (const std::string value : {"all-linear", "data/brown/train{n.txt", "a]b", "x, y", "{", "'q'"}) {
    YAML::Node map(YAML::NodeType::Map);
    map["targets"] = value;
    const Options o = Options::parse(map, schema(), "trainer", "x.yaml");
    EXPECT_EQ(o.get_list("targets"), std::vector<std::string>{value});
    std::string text;
    for (const auto& [k, v] : o.resolved())
      if (k == "targets") text = v;
    const YAML::Node back = YAML::Load(text);
    ASSERT_TRUE(back.IsSequence()) << text;
    ASSERT_EQ(back.size(), 1u) << text;
    EXPECT_EQ(back[0].Scalar(), value) << text;
  }
}

TEST(Options, UnknownKeyNamesLineColumnAndNearestKey) {
  std::string e = options_error("lr: 0.1\n  \nbatchsize: 4\n");
  EXPECT_NE(e.find("x.yaml:3:1"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'batchsize' in trainer"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'batch_size'?"), std::string::npos) << e;
}

TEST(Options, WrongTypeNamesExpectedType) {
  std::string e = options_error("batch_size: sixteen\n");
  EXPECT_NE(e.find("x.yaml:1:13"), std::string::npos) << e;
  EXPECT_NE(e.find("trainer.batch_size must be an integer, got 'sixteen'"), std::string::npos) << e;
  EXPECT_NE(options_error("shuffle: maybe").find("must be a boolean"), std::string::npos);
  EXPECT_NE(options_error("lr: [1, 2]").find("must be a number, got a list"), std::string::npos);
  EXPECT_NE(options_error("cap: 3 parsecs").find("unknown unit"), std::string::npos);
  EXPECT_NE(options_error("batch_size: 2.5").find("must be an integer"), std::string::npos);
}

TEST(Options, NotAMap) {
  EXPECT_NE(options_error("[1, 2]").find("must be a map of options"), std::string::npos);
}

TEST(Options, RangeChecksCarryLocation) {
  Options o = Options::parse(YAML::Load("batch_size: -3"), schema(), "trainer", "x.yaml");
  try {
    o.check(o.get_int("batch_size") > 0, "batch_size", "must be positive");
    FAIL() << "no error";
  } catch (const tt::Error& e) {
    EXPECT_STREQ(e.what(), "x.yaml:1:13: trainer.batch_size must be positive");
  }
}

// A schema's check of options taken together runs when they are read, and names the option at
// fault where it was written; options that pass are read as usual.
TEST(Options, ASchemasCheckOfOptionsTogetherRunsWhenTheyAreRead) {
  const Schema s = schema().validate([](const Options& o) {
    o.check(o.get_int("batch_size") % 2 == 0 || !o.get_bool("shuffle"), "batch_size", "must be even when shuffled");
  });
  const std::string e =
      tt::test::refusal_of([&] { Options::parse(YAML::Load("lr: 0.1\nbatch_size: 3"), s, "trainer", "x.yaml"); });
  EXPECT_EQ(e, "x.yaml:2:13: trainer.batch_size must be even when shuffled");
  EXPECT_EQ(Options::parse(YAML::Load("{batch_size: 3, shuffle: false}"), s, "trainer", "x.yaml").get_int("batch_size"), 3);
  EXPECT_EQ(Options::defaults(s, "trainer").get_int("batch_size"), 16);
}

TEST(Options, ParseBytes) {
  EXPECT_EQ(tt::parse_bytes("4096"), 4096);
  EXPECT_EQ(tt::parse_bytes("1e9"), 1000000000);
  EXPECT_EQ(tt::parse_bytes("512MiB"), 512LL << 20);
  EXPECT_EQ(tt::parse_bytes("100 MB"), 100000000);
  EXPECT_EQ(tt::parse_bytes("0.5GiB"), 1LL << 29);
  EXPECT_THROW(tt::parse_bytes("lots"), tt::ConfigError);
  EXPECT_THROW(tt::parse_bytes("-1GiB"), tt::ConfigError);
  // past 2^63 bytes the count overflowed into a negative "must be >= 0, got 1e20"
  EXPECT_EQ(tt::test::config_error([] { tt::parse_bytes("1e20"); }),
            "'1e20' is too large a size: at most 8 EiB (2^63 bytes) can be written");
  EXPECT_THROW(tt::parse_bytes("9000000TiB"), tt::ConfigError);
  EXPECT_EQ(tt::parse_bytes("1000000TiB"), 1000000LL << 40);
  EXPECT_EQ(tt::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(tt::format_mib(1572864), "1.5");
  EXPECT_EQ(tt::format_mib(1572864, 2), "1.50");
  EXPECT_EQ(tt::format_mib(0), "0.0");
  EXPECT_EQ(tt::format_mib(8000), "0.00763");  // not 0.0: a model of a few KiB
  EXPECT_EQ(tt::format_mib(-8000), "-0.00763");
  EXPECT_EQ(tt::format_mib(8000, 2), "0.01");
  EXPECT_EQ(tt::format_mib(4000, 2), "0.00381");
  EXPECT_EQ(tt::format_mib(60000, 1), "0.1");
}

TEST(Options, Nearest) {
  EXPECT_EQ(tt::nearest("trainr", {"trainer", "model", "data"}), "trainer");
  EXPECT_EQ(tt::nearest("xyzzy", {"trainer", "model", "data"}), "");
}

namespace {
// What an options struct looks like to Schema::field: plain members, defaults in the declaration.
struct Fit {
  int64_t steps;
  double lr;
  bool shuffle;
  std::string mode;
  std::vector<std::string> targets;
  std::optional<double> clip;
  std::optional<int64_t> cap;
};

Schema fit_schema() {
  return Schema()
      .field("steps", &Fit::steps, 100, "steps").range(ge(0))
      .field("lr", &Fit::lr, 1e-3, "learning rate").range(gt(0), le(1))
      .field("shuffle", &Fit::shuffle, true, "reshuffle")
      .field("mode", &Fit::mode, "fast", "how").choices({"fast", "exact"})
      .field("targets", &Fit::targets, {"qkv", "proj"}, "layers").choices({"qkv", "proj", "fc1", "fc2"})
      .field("clip", &Fit::clip, std::nullopt, "gradient clip").range(gt(0))
      .bytes_field("cap", &Fit::cap, "~", "memory cap").range(ge(1024));
}

std::string fit_options_error(const std::string& yaml, const std::map<std::string, std::string>& origins = {}) {
  return tt::test::refusal_of([&] { Options::parse(YAML::Load(yaml), fit_schema(), "trainer", "x.yaml", {}, origins); });
}

std::string declaration_error(const std::function<void()>& declare) {
  try {
    declare();
  } catch (const tt::ConfigError& e) {
    return std::string("a ConfigError (the user's fault): ") + e.what();
  } catch (const tt::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Options, RangeErrorNamesLocationKeyRangeAndValue) {
  EXPECT_EQ(fit_options_error("steps: -3"), "x.yaml:1:8: trainer.steps must be >= 0, got -3");
  EXPECT_EQ(fit_options_error("mode: fast\nlr: 1.5"), "x.yaml:2:5: trainer.lr must be in (0, 1], got 1.5");
  EXPECT_EQ(fit_options_error("clip: -1"), "x.yaml:1:7: trainer.clip must be > 0, got -1");
  EXPECT_EQ(fit_options_error("cap: 1000"), "x.yaml:1:6: trainer.cap must be >= 1024, got 1000");
  EXPECT_EQ(fit_options_error("steps: -3", {{"steps", "command line 'trainer.steps=-3'"}}),
            "command line 'trainer.steps=-3': trainer.steps must be >= 0, got -3");
}

TEST(Options, RangeBoundsAreInclusiveOrExclusiveAsDeclared) {
  EXPECT_EQ(fit_options_error("steps: 0\nlr: 1\ncap: 1KiB"), "");   // >= 0, <= 1, >= 1024: the bounds themselves
  EXPECT_NE(fit_options_error("lr: 0"), "");                        // > 0
  EXPECT_NE(fit_options_error("clip: 0"), "");                      // > 0
  EXPECT_NE(fit_options_error("lr: .nan").find("must be a finite number, got '.nan'"), std::string::npos);
  EXPECT_EQ(fit_options_error("clip: 1e-9"), "");
}

// A range with only a lower bound (clip > 0) or none does not let infinity through: .inf, inf
// and a number a double cannot hold (1e400, read as infinity) are refused, as NaN is.
TEST(Options, InfinityAndNanAreRefusedWhateverTheRange) {
  for (const char* v : {".inf", "inf", "1e400", "-1e999", ".nan"})
    EXPECT_EQ(fit_options_error(std::string("clip: ") + v),
              std::string("x.yaml:1:7: trainer.clip must be a finite number, got '") + v + "'")
        << v;
  EXPECT_EQ(fit_options_error("clip: 1e300"), "");
}

TEST(Options, ChoiceErrorNamesChoicesValueAndNearest) {
  EXPECT_EQ(fit_options_error("mode: exat"), "x.yaml:1:7: trainer.mode must be one of fast | exact, got 'exat'; did you mean 'exact'?");
  EXPECT_EQ(fit_options_error("mode: zzzzzz"), "x.yaml:1:7: trainer.mode must be one of fast | exact, got 'zzzzzz'");
  EXPECT_EQ(fit_options_error("targets: [qkv, fc3]"),
            "x.yaml:1:10: trainer.targets items must be one of qkv | proj | fc1 | fc2, got 'fc3'; did you mean 'fc1'?");
  EXPECT_EQ(fit_options_error("targets: fc2"), "");
}

TEST(Options, AllowedTextForList) {
  const Schema s = fit_schema();
  EXPECT_EQ(s.find("steps")->allowed(), ">= 0");
  EXPECT_EQ(s.find("lr")->allowed(), "in (0, 1]");
  EXPECT_EQ(s.find("mode")->allowed(), "fast | exact");
  EXPECT_EQ(s.find("shuffle")->allowed(), "");
  EXPECT_EQ((tt::Range{tt::ge(0).min, tt::lt(1).max}.text()), "in [0, 1)");
  EXPECT_EQ(tt::le(-2.5).text(), "<= -2.5");
}

TEST(Options, DefaultsOutsideTheirOwnDeclarationFailWhenDeclared) {
  std::string e = declaration_error([] { Schema().add("keep", Type::Int, "-2", "").range(ge(0)); });
  EXPECT_EQ(e, "schema: the default of option 'keep' must be >= 0, got -2 (a bug in the component that declares it)");
  e = declaration_error([] { Schema().add("on_nan", Type::String, "ignore", "").choices({"error", "skip"}); });
  EXPECT_NE(e.find("schema: the default of option 'on_nan' must be one of error | skip, got 'ignore'"),
            std::string::npos) << e;
  e = declaration_error([] { Schema().add("n", Type::Int, "many", ""); });
  EXPECT_NE(e.find("schema: the default of option 'n' must be an integer, got 'many'"), std::string::npos) << e;
  e = declaration_error([] { Schema().field("lr", &Fit::lr, -1.0, "").range(gt(0)); });
  EXPECT_NE(e.find("the default of option 'lr' must be > 0, got -1"), std::string::npos) << e;
  e = declaration_error([] { Schema().add("mode", Type::Bool, "true", "").choices({"a"}); });
  EXPECT_NE(e.find("only strings and lists take choices"), std::string::npos) << e;
  e = declaration_error([] { Schema().add("x", Type::Float, "0.5", "").range(gt(1), lt(1)); });
  EXPECT_NE(e.find("the range in (1, 1) is empty"), std::string::npos) << e;
  // unset defaults have nothing to check
  EXPECT_EQ(declaration_error([] { Schema().add("clip", Type::Float, "~", "").range(gt(0)); }), "");
}

TEST(Options, FieldDefaultsAreWrittenOnceAsYaml) {
  const Schema s = fit_schema();
  EXPECT_EQ(s.find("steps")->default_yaml, "100");
  EXPECT_EQ(s.find("lr")->default_yaml, "0.001");
  EXPECT_EQ(s.find("shuffle")->default_yaml, "true");
  EXPECT_EQ(s.find("mode")->default_yaml, "fast");
  EXPECT_EQ(s.find("targets")->default_yaml, "[qkv, proj]");
  EXPECT_EQ(s.find("clip")->default_yaml, "~");
  EXPECT_EQ(s.find("clip")->type, Type::Float);
  EXPECT_EQ(s.find("cap")->type, Type::Bytes);
  EXPECT_EQ(tt::detail::yaml_of(1e-8), "1e-8");
  EXPECT_EQ(tt::detail::yaml_of(0.1 + 0.2), "0.30000000000000004");  // reads back as the same double
  EXPECT_EQ(tt::detail::yaml_of(std::string("a: b")), "\"a: b\"");
}

// A field narrower than an int64_t or a double refuses, when read (--dry-run too), a value its
// member cannot hold, naming the range, rather than narrowing it or failing only in the factory.
TEST(Options, AFieldRefusesValuesItsMemberCannotHold) {
  struct Narrow {
    uint32_t count;
    float scale;
    int32_t workers;
    std::optional<uint64_t> seed;
  };
  const Schema s = Schema()
                       .field("count", &Narrow::count, 3u, "")
                       .field("scale", &Narrow::scale, 1.0f, "")
                       .field("workers", &Narrow::workers, 2, "")
                       .range(tt::ge(1))
                       .field("seed", &Narrow::seed, std::nullopt, "");
  const auto error = [&](const std::string& yaml) {
    return tt::test::refusal_of([&] { Options::parse(YAML::Load(yaml), s, "plugins[0] (x)", "x.yaml"); });
  };
  EXPECT_EQ(error("count: -1"), "x.yaml:1:8: plugins[0] (x).count must be in [0, 4294967295], got -1");
  EXPECT_EQ(error("count: 4294967296"), "x.yaml:1:8: plugins[0] (x).count must be in [0, 4294967295], got 4294967296");
  EXPECT_HAS(error("scale: 1e300"), "plugins[0] (x).scale must be in [-3.4028234663852886e38, 3.4028234663852886e38], got 1e300");
  EXPECT_HAS(error("workers: 0"), "plugins[0] (x).workers must be in [1, 2147483647], got 0");
  const auto to = [&](const std::string& yaml) {
    return tt::test::refusal_of([&] { Options::parse(YAML::Load(yaml), s, "plugins[0] (x)", "x.yaml").to<Narrow>(); });
  };
  EXPECT_HAS(to("scale: 1e-50"), "plugins[0] (x).scale is too close to 0 for its 32-bit float: give 0 or a magnitude of "
                                 "at least 1.1754943508222875e-38, got 1e-50");
  EXPECT_HAS(to("scale: -1e-45"), "got -1e-45");
  EXPECT_HAS(error("seed: -5"), "plugins[0] (x).seed must be >= 0, got -5");
  const Narrow n = Options::parse(YAML::Load("{count: 4294967295, scale: 0.5, workers: 7, seed: 9}"), s, "p", "x.yaml").to<Narrow>();
  EXPECT_EQ(n.count, 4294967295u);
  EXPECT_EQ(n.scale, 0.5f);
  EXPECT_EQ(Options::parse(YAML::Load("scale: 0"), s, "p", "x.yaml").to<Narrow>().scale, 0.0f);
  EXPECT_EQ(Options::parse(YAML::Load("scale: 2e-38"), s, "p", "x.yaml").to<Narrow>().scale, 2e-38f);
  EXPECT_EQ(n.workers, 7);
  EXPECT_EQ(n.seed, uint64_t{9});
}

TEST(Options, ToFillsTheBoundStructFromDefaultsAndValues) {
  Fit d = Options::defaults(fit_schema(), "trainer").to<Fit>();
  EXPECT_EQ(d.steps, 100);
  EXPECT_EQ(d.lr, 1e-3);
  EXPECT_TRUE(d.shuffle);
  EXPECT_EQ(d.mode, "fast");
  EXPECT_EQ(d.targets, (std::vector<std::string>{"qkv", "proj"}));
  EXPECT_FALSE(d.clip.has_value());
  EXPECT_FALSE(d.cap.has_value());

  Fit f = Options::parse(YAML::Load("steps: 7\nlr: 0.5\nshuffle: no\nmode: exact\ntargets: [fc1]\nclip: 2.5\ncap: 2KiB"),
                         fit_schema(), "trainer", "x.yaml")
              .to<Fit>();
  EXPECT_EQ(f.steps, 7);
  EXPECT_EQ(f.lr, 0.5);
  EXPECT_FALSE(f.shuffle);
  EXPECT_EQ(f.mode, "exact");
  EXPECT_EQ(f.targets, std::vector<std::string>{"fc1"});
  EXPECT_EQ(f.clip, 2.5);
  EXPECT_EQ(f.cap, 2048);
}

TEST(Options, ToRefusesAStructTheSchemaDoesNotBind) {
  struct Other {
    int64_t steps;
  };
  EXPECT_THROW(Options::defaults(fit_schema(), "trainer").to<Other>(), tt::Error);
  EXPECT_THROW(Options::defaults(schema(), "trainer").to<Fit>(), tt::Error);  // add() binds nothing
}

TEST(Options, TrainerSchemaRefusesValuesOutsideTheirRanges) {
  auto error = [](const std::string& yaml) {
    return tt::test::refusal_of([&] { Options::parse(YAML::Load(yaml), tt::trainer_schema(), "trainer", "p.yaml"); });
  };
  EXPECT_EQ(error("threads: -3"), "p.yaml:1:10: trainer.threads must be in [0, 1024], got -3");
  EXPECT_EQ(error("grad_clip: -1"), "p.yaml:1:12: trainer.grad_clip must be > 0, got -1");
  EXPECT_EQ(error("checkpoint_every: -1"), "p.yaml:1:19: trainer.checkpoint_every must be >= 0, got -1");
  EXPECT_EQ(error("keep_checkpoints: -2"), "p.yaml:1:19: trainer.keep_checkpoints must be >= 0, got -2");
  EXPECT_EQ(error("batch_size: 0"), "p.yaml:1:13: trainer.batch_size must be >= 1, got 0");
  EXPECT_EQ(error("on_nan: skp"), "p.yaml:1:9: trainer.on_nan must be one of error | skip, got 'skp'; did you mean 'skip'?");
  EXPECT_NE(error("dist_rows: own").find("trainer.dist_rows must be one of all-reduce | owned, got 'own'"),
            std::string::npos);
  EXPECT_NE(error("progress: quiet").find("trainer.progress must be one of auto | bar | lines | off"),
            std::string::npos);
  // what 0 means stays allowed: default threads, only the final checkpoint, keep all, no training
  EXPECT_EQ(error("threads: 0\ncheckpoint_every: 0\nkeep_checkpoints: 0\nmax_steps: 0\neval_every: 0"), "");
}

// Code outside namespace tt (a plugin's own) names the error type with its namespace; tt's own
// code without: both compile to the same throw.
TEST(Errors, TheCheckMacrosTakeTheErrorTypeWithItsNamespaceOutsideTt) {
  EXPECT_THROW(TT_CHECK_AS(tt::ConfigError, 1 + 1 == 3, "plugins[0] (mine).every must be ", 2), tt::ConfigError);
  try {
    TT_FAIL_AS(tt::ModuleError, "module ", 1, " refused");
  } catch (const tt::ModuleError& e) {
    EXPECT_STREQ(e.what(), "module 1 refused");
  }
}
