#pragma once
// Helpers of the topic data tests: options from YAML text, ConfigError messages, files.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.h"
#include "tt/error.h"
#include "tt/options.h"

namespace tt::test {

inline Options options(const Schema& schema, const std::string& yaml) {
  return Options::parse(YAML::Load(yaml), schema, "data", "test.yaml", {"name"});
}

// The message of the ConfigError `f` throws; a test failure if it throws nothing or another type.
template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a ConfigError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a ConfigError, nothing was thrown";
  return "";
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

inline std::string quote(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

}  // namespace tt::test

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)
