// The campaign: throughput probe (manual), naive shrink, graph-safe clean, skip finding.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "properties/fuzz.h"

namespace recap::properties {
namespace {

TEST(FuzzProbe, DISABLED_Throughput) {
  FuzzOptions o;
  o.seed = 1;
  o.cases = std::getenv("CASES") ? std::atoi(std::getenv("CASES")) : 200;
  if (const char* p = std::getenv("POLICY")) {
    training::CheckpointPolicy pol = training::CheckpointPolicy::GraphSafe;
    ASSERT_TRUE(training::policy_from_name(p, &pol));
    o.gen.policy = pol;
  }
  if (std::getenv("WITHOUT")) {  // WITHOUT=reference: every property but that one (its cost)
    for (const auto& p : property_names())
      if (p != std::getenv("WITHOUT")) o.oracle.properties.push_back(p);
  }
  FuzzStats st = fuzz(o);
  std::cout << st.cases << " cases in " << st.seconds << " s: " << st.cases / st.seconds * 60 << " cases/min\n";
  for (auto& [k, v] : st.by_disposition) std::cout << "  " << k << ": " << v << "\n";
  for (auto& [k, v] : st.classification) std::cout << "  [" << k << "] " << v << "\n";
  for (auto& f : st.findings) std::cout << "  finding " << f << "\n";
  if (std::getenv("LAST") && !st.reports.empty())
    std::cout << case_report_to_json(st.reports.back()).dump(1) << "\n";
  for (auto& f : st.failures)
    std::cout << "FAIL " << f.property << " shrinks " << f.shrinks << " " << f.reproduce << "\n  "
              << f.report.first_failure() << "\n" << training::case_to_json(f.spec).dump() << "\n";
}

}  // namespace
}  // namespace recap::properties

namespace recap::properties {
namespace {

Json stripped(const FuzzStats& st) {
  Json j = Json::array();
  for (const auto& r : st.reports) {
    Json k = case_report_to_json(r);
    k.erase("timings");
    j.push_back(k);
  }
  return j;
}

TEST(Fuzz, NaiveFindsTheCaptureFailureAndShrinksItToOneLayer) {
  FuzzOptions o;
  o.seed = 1;
  o.cases = 50;
  o.gen.policy = training::CheckpointPolicy::Naive;
  FuzzStats st = fuzz(o);
  ASSERT_EQ(st.failures.size(), 1u);
  EXPECT_LE(st.cases, 50);
  const Counterexample& cx = st.failures[0];
  EXPECT_EQ(cx.property, "capture_clean");
  EXPECT_EQ(cx.spec.model.layers.size(), 1u);
  EXPECT_NE(cx.spec.layers[0].checkpoint, training::CheckpointGranularity::None);
  EXPECT_NE(cx.spec.executor, training::ExecutorKind::Eager);
  EXPECT_TRUE(cx.spec.executor == training::ExecutorKind::FullIteration || cx.spec.layers[0].graphed);
  EXPECT_EQ(cx.report.disposition, Disposition::Failed);
  bool named = false;
  for (const auto& c : cx.report.checks)
    if (c.property == "capture_clean") named = c.cuda_error == "cudaErrorStreamCaptureUnsupported" && !c.api.empty();
  EXPECT_TRUE(named);
  EXPECT_GT(cx.shrinks, 0);
  EXPECT_EQ(cx.reproduce.rfind("RC_PARAMS=\"reproduce=", 0), 0u) << cx.reproduce;
  EXPECT_EQ(cx.seed, 1u);
  // The shrunk case replays verbatim to the same verdict.
  CaseReport again = evaluate(cx.spec, {});
  EXPECT_EQ(again.disposition, Disposition::Failed);
  EXPECT_EQ(again.first_failure(), cx.report.first_failure());
}

TEST(Fuzz, GraphSafePasses) {
  FuzzOptions o;
  o.seed = 7;
  o.cases = 150;
  o.gen.policy = training::CheckpointPolicy::GraphSafe;
  FuzzStats st = fuzz(o);
  EXPECT_TRUE(st.failures.empty()) << st.failures[0].report.first_failure();
  EXPECT_EQ(st.cases, 150);
  EXPECT_EQ(st.by_disposition["passed"], 150);
  EXPECT_EQ(static_cast<int>(st.reports.size()), 150);
}

TEST(Fuzz, SkipPassesWithTheMemoryFinding) {
  FuzzOptions o;
  o.seed = 3;
  o.cases = 60;
  o.gen.policy = training::CheckpointPolicy::Skip;
  FuzzStats st = fuzz(o);
  EXPECT_TRUE(st.failures.empty()) << st.failures[0].report.first_failure();
  ASSERT_FALSE(st.findings.empty());
  EXPECT_NE(st.findings[0].find("recompute lost inside graphs"), std::string::npos) << st.findings[0];
  EXPECT_NE(st.findings[0].find("bytes"), std::string::npos) << st.findings[0];
  o.oracle.require_memory_savings = true;
  FuzzStats strict = fuzz(o);
  ASSERT_EQ(strict.failures.size(), 1u);
  EXPECT_EQ(strict.failures[0].property, "memory");
}

TEST(Fuzz, SameSeedSameReports) {
  FuzzOptions o;
  o.seed = 11;
  o.cases = 40;
  FuzzStats a = fuzz(o), b = fuzz(o);
  EXPECT_EQ(stripped(a), stripped(b));
  EXPECT_EQ(a.by_disposition, b.by_disposition);
  EXPECT_EQ(a.classification, b.classification);
  ASSERT_EQ(a.failures.size(), b.failures.size());
  for (size_t i = 0; i < a.failures.size(); ++i) {
    EXPECT_EQ(a.failures[i].reproduce, b.failures[i].reproduce);
    EXPECT_EQ(training::case_to_json(a.failures[i].spec), training::case_to_json(b.failures[i].spec));
  }
}

TEST(Fuzz, ShardsAreDisjointAndCoverTheCampaign) {
  FuzzOptions o;
  o.seed = 5;
  o.cases = 300;
  o.gen.policy = training::CheckpointPolicy::GraphSafe;
  FuzzStats whole = fuzz(o);
  std::vector<std::string> all, parts;
  for (const auto& r : whole.reports) all.push_back(training::case_to_json(r.spec).dump());
  o.shard_count = 2;
  for (int i = 0; i < 2; ++i) {
    o.shard_index = i;
    FuzzStats s = fuzz(o);
    for (const auto& r : s.reports) parts.push_back(training::case_to_json(r.spec).dump());
  }
  std::sort(all.begin(), all.end());
  std::sort(parts.begin(), parts.end());
  EXPECT_EQ(all, parts);
}

TEST(Fuzz, ClassificationAndProgress) {
  FuzzOptions o;
  o.seed = 2;
  o.cases = 100;
  o.gen.policy = training::CheckpointPolicy::GraphSafe;
  int calls = 0, last = 0;
  FuzzStats st = fuzz(o, [&](const Progress& p) {
    ++calls;
    EXPECT_GE(p.done, last);
    last = p.done;
    EXPECT_EQ(p.time_left_s, -1.0);
  });
  EXPECT_EQ(calls, 100);
  EXPECT_GE(st.classification["checkpoint+capture+dropout"], 10);
  int executors = st.classification["executor=eager"] + st.classification["executor=per-layer"] +
                  st.classification["executor=full-iteration"];
  EXPECT_EQ(executors, st.cases);
  EXPECT_EQ(st.classification["policy=graph-safe"], st.cases);
}

TEST(Fuzz, TimeBudgetStopsTheCampaign) {
  FuzzOptions o;
  o.seed = 4;
  o.cases = 100000;
  o.time_budget_s = 0.5;
  o.gen.policy = training::CheckpointPolicy::GraphSafe;
  FuzzStats st = fuzz(o);
  EXPECT_LT(st.cases, 100000);
  EXPECT_LT(st.seconds, 10.0);
}

// --shrink-limit: the shrink stops spending evaluations at the limit and keeps the smallest failing
// case found by then, which still fails the same way; without the limit the same campaign shrinks
// further (non-vacuity), and the limit is deterministic (same seed, same case).
TEST(Fuzz, ShrinkLimitBoundsTheShrink) {
  FuzzOptions o;
  o.seed = 1;
  o.cases = 50;
  o.gen.policy = training::CheckpointPolicy::Naive;
  FuzzStats full = fuzz(o);
  ASSERT_EQ(full.failures.size(), 1u);
  o.shrink_limit = 2;
  FuzzStats a = fuzz(o), b = fuzz(o);
  ASSERT_EQ(a.failures.size(), 1u);
  EXPECT_LE(a.failures[0].shrinks, 2);
  EXPECT_GT(full.failures[0].shrinks, a.failures[0].shrinks);
  EXPECT_EQ(training::case_to_json(a.failures[0].spec).dump(), training::case_to_json(b.failures[0].spec).dump());
  EXPECT_EQ(a.failures[0].report.first_failure().empty(), false);
  CaseReport again = evaluate(a.failures[0].spec, {});
  EXPECT_EQ(again.first_failure(), a.failures[0].report.first_failure());
}

}  // namespace
}  // namespace recap::properties
