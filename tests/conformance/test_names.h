// Shared by the conformance tests: gtest parameter names from scenario names.
#pragma once

#include <cctype>
#include <string>

#include <gtest/gtest.h>

#include "harness/conformance/scenario.h"

namespace recap::conformance::testing {

// The scenario name with every character that is not a letter or a digit replaced by '_'.
inline std::string test_name(const std::string& scenario_name) {
  std::string out = scenario_name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return out;
}

inline std::string param_name(const ::testing::TestParamInfo<size_t>& info) {
  return test_name(all_scenarios().at(info.param).name);
}

// One line per mismatch: label, got, expected.
inline std::string describe_mismatches(const ScenarioResult& res) {
  std::string out;
  for (const auto& o : res.mismatches())
    out += "  " + o.label + ": got " + o.got + ", expected " + o.expected + "\n";
  return out;
}

}  // namespace recap::conformance::testing
