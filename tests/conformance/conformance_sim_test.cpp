// Every conformance scenario on a fresh sim device: each observation must match the rule's
// prediction (docs/cuda-capture-rules.md).
#include <set>

#include <gtest/gtest.h>

#include "harness/conformance/scenario.h"
#include "tests/conformance/test_names.h"

namespace recap::conformance {
namespace {

using testing::describe_mismatches;
using testing::test_name;

class SimConformance : public ::testing::TestWithParam<size_t> {};

TEST_P(SimConformance, MatchesTheRule) {
  const Scenario& s = all_scenarios().at(GetParam());
  std::string error;
  auto dev = device::make_device(device::BackendChoice::Sim, device::DeviceOptions{}, &error);
  ASSERT_NE(dev, nullptr) << error;
  ScenarioResult res = run_scenario(s, *dev);
  EXPECT_EQ(res.backend, "sim");
  EXPECT_TRUE(res.error.empty()) << s.name << " could not run: " << res.error;
  EXPECT_TRUE(res.mismatches().empty()) << s.name << "\nrule: " << s.rule << "\nmismatches:\n"
                                        << describe_mismatches(res);
  EXPECT_FALSE(res.outcome.observations.empty()) << s.name << " recorded nothing";
}

INSTANTIATE_TEST_SUITE_P(Scenarios, SimConformance, ::testing::Range<size_t>(0, all_scenarios().size()),
                         testing::param_name);

// Outcomes must not depend on timing: the same predictions hold when sim runs pending work on
// different streams in seeded interleavings that respect only real dependencies.
class SimConformanceExplored : public ::testing::TestWithParam<size_t> {};

TEST_P(SimConformanceExplored, MatchesTheRuleInEveryOrder) {
  const Scenario& s = all_scenarios().at(GetParam());
  for (uint64_t seed : {1u, 2u, 3u}) {
    device::DeviceOptions opts;
    opts.explore_seed = seed;
    std::string error;
    auto dev = device::make_device(device::BackendChoice::Sim, opts, &error);
    ASSERT_NE(dev, nullptr) << error;
    ScenarioResult res = run_scenario(s, *dev);
    EXPECT_TRUE(res.error.empty()) << s.name << " (seed " << seed << ") could not run: " << res.error;
    EXPECT_TRUE(res.mismatches().empty()) << s.name << " (explore seed " << seed << ")\nmismatches:\n"
                                          << describe_mismatches(res);
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, SimConformanceExplored, ::testing::Range<size_t>(0, all_scenarios().size()),
                         testing::param_name);

TEST(ConformanceRegistry, AtLeastSixtyScenariosWithUniqueNames) {
  const auto& all = all_scenarios();
  EXPECT_GE(all.size(), 60u);
  std::set<std::string> names, test_names;
  for (const auto& s : all) {
    EXPECT_FALSE(s.name.empty());
    EXPECT_FALSE(s.rule.empty()) << s.name;
    EXPECT_TRUE(static_cast<bool>(s.run)) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate scenario name " << s.name;
    EXPECT_TRUE(test_names.insert(test_name(s.name)).second) << "duplicate test name for " << s.name;
  }
}

TEST(ConformanceRegistry, FixedOrder) {
  const auto& a = all_scenarios();
  const auto& b = all_scenarios();
  EXPECT_EQ(&a, &b);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.front().name.rfind("during_capture.", 0), 0u);
}

// compare_outcomes: one line per differing observation, one for a differing count.
TEST(CompareOutcomes, ReportsDifferencesAndCount) {
  ScenarioResult a, b;
  a.name = b.name = "x";
  a.backend = "cuda";
  b.backend = "sim";
  a.outcome.observations = {{"call 1", "cudaSuccess", "cudaSuccess"}, {"status", "active", "active"},
                            {"extra", "1", "1"}};
  b.outcome.observations = {{"call 1", "cudaSuccess", "cudaSuccess"}, {"status", "invalidated", "active"}};
  auto diff = compare_outcomes(a, b);
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_NE(diff[0].find("status"), std::string::npos);
  EXPECT_NE(diff[0].find("cuda got active"), std::string::npos);
  EXPECT_NE(diff[0].find("sim got invalidated"), std::string::npos);
  EXPECT_NE(diff[1].find("count"), std::string::npos);
  EXPECT_TRUE(compare_outcomes(a, a).empty());
  EXPECT_EQ(b.mismatches().size(), 1u);
  EXPECT_FALSE(b.passed());
}

TEST(Recorder, CanonicalText) {
  EXPECT_EQ(words_text({1, 2, 3}), "[1,2,3]");
  EXPECT_EQ(words_text({}), "[]");
  EXPECT_EQ(graph_text(-1), "none");
  EXPECT_EQ(graph_text(1), "graph with 1 node");
  EXPECT_EQ(graph_text(3), "graph with 3 nodes");
  EXPECT_EQ(update_result_name(device::GraphExecUpdateResult::ErrorTopologyChanged),
            "cudaGraphExecUpdateErrorTopologyChanged");
}

// A scenario that aborts half-way leaves nothing behind: the next scenario on the same device
// starts with no live bytes and no active capture.
TEST(Recorder, AbortCleansUp) {
  std::string error;
  auto dev = device::make_device(device::BackendChoice::Sim, device::DeviceOptions{}, &error);
  ASSERT_NE(dev, nullptr) << error;
  int64_t live_before = dev->memory_stats().live_bytes;
  device::Stream captured{};
  Scenario s{"test.abort", "aborts during a capture", [&](Recorder& r) {
               device::Stream st = r.stream(true);
               captured = st;
               r.alloc(16);
               r.begin("begin", st, device::CaptureMode::Global);
               r.abort("stop here");
             }};
  ScenarioResult res = run_scenario(s, *dev);
  EXPECT_EQ(res.error, "stop here");
  EXPECT_EQ(dev->memory_stats().live_bytes, live_before);
  EXPECT_EQ(dev->get_last_error(), device::Status::Success);
}

}  // namespace
}  // namespace recap::conformance
