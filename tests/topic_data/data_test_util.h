#pragma once
// Helpers of the topic data tests: options from YAML text (the rest is in test_support.h).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <string>

#include "test_support.h"
#include "tt/error.h"
#include "tt/options.h"

namespace tt::test {

inline Options options(const Schema& schema, const std::string& yaml) {
  return Options::parse(YAML::Load(yaml), schema, "data", "test.yaml", {"name"});
}

}  // namespace tt::test
