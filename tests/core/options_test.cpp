#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "tt/error.h"
#include "tt/options.h"

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

std::string error_of(const std::string& yaml) {
  try {
    Options::parse(YAML::Load(yaml), schema(), "trainer", "x.yaml");
  } catch (const tt::ConfigError& e) {
    return e.what();
  }
  return "";
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

TEST(Options, UnknownKeyNamesLineColumnAndNearestKey) {
  std::string e = error_of("lr: 0.1\n  \nbatchsize: 4\n");
  EXPECT_NE(e.find("x.yaml:3:1"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'batchsize' in trainer"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'batch_size'?"), std::string::npos) << e;
}

TEST(Options, WrongTypeNamesExpectedType) {
  std::string e = error_of("batch_size: sixteen\n");
  EXPECT_NE(e.find("x.yaml:1:13"), std::string::npos) << e;
  EXPECT_NE(e.find("trainer.batch_size must be an integer, got 'sixteen'"), std::string::npos) << e;
  EXPECT_NE(error_of("shuffle: maybe").find("must be a boolean"), std::string::npos);
  EXPECT_NE(error_of("lr: [1, 2]").find("must be a number, got a list"), std::string::npos);
  EXPECT_NE(error_of("cap: 3 parsecs").find("unknown unit"), std::string::npos);
  EXPECT_NE(error_of("batch_size: 2.5").find("must be an integer"), std::string::npos);
}

TEST(Options, NotAMap) {
  EXPECT_NE(error_of("[1, 2]").find("must be a map of options"), std::string::npos);
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

TEST(Options, ParseBytes) {
  EXPECT_EQ(tt::parse_bytes("4096"), 4096);
  EXPECT_EQ(tt::parse_bytes("1e9"), 1000000000);
  EXPECT_EQ(tt::parse_bytes("512MiB"), 512LL << 20);
  EXPECT_EQ(tt::parse_bytes("100 MB"), 100000000);
  EXPECT_EQ(tt::parse_bytes("0.5GiB"), 1LL << 29);
  EXPECT_THROW(tt::parse_bytes("lots"), tt::ConfigError);
  EXPECT_THROW(tt::parse_bytes("-1GiB"), tt::ConfigError);
  EXPECT_EQ(tt::format_bytes(1536), "1.50 KiB");
}

TEST(Options, Nearest) {
  EXPECT_EQ(tt::nearest("trainr", {"trainer", "model", "data"}), "trainer");
  EXPECT_EQ(tt::nearest("xyzzy", {"trainer", "model", "data"}), "");
}
