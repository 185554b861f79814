// The campaign: throughput probe (manual), naive shrink, graph-safe clean, skip finding.
#include <set>

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

// Seed 1 under the naive policy: its first chunk fails within a few cases.
FuzzOptions naive_campaign(int cases) {
  FuzzOptions o;
  o.seed = 1;
  o.cases = cases;
  o.gen.policy = training::CheckpointPolicy::Naive;
  return o;
}

TEST(Fuzz, NaiveFindsTheCaptureFailureAndShrinksItToOneLayer) {
  FuzzOptions o = naive_campaign(50);
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
  FuzzOptions o = naive_campaign(50);
  FuzzStats full = fuzz(o);
  ASSERT_EQ(full.failures.size(), 1u);
  o.shrink_limit = 2;
  FuzzStats a = fuzz(o), b = fuzz(o);
  ASSERT_EQ(a.failures.size(), 1u);
  EXPECT_LE(a.failures[0].shrinks, 4);  // 2 RapidCheck steps, then at most 2 layer deletions
  EXPECT_GT(full.failures[0].shrinks, a.failures[0].shrinks);
  EXPECT_EQ(training::case_to_json(a.failures[0].spec).dump(), training::case_to_json(b.failures[0].spec).dump());
  EXPECT_EQ(a.failures[0].report.first_failure().empty(), false);
  CaseReport again = evaluate(a.failures[0].spec, {});
  EXPECT_EQ(again.first_failure(), a.failures[0].report.first_failure());
}

// --keep-going: the campaign runs every case instead of stopping at its first counterexample, and
// a failure like one already shrunk in its chunk is counted, not shrunk again: more failing cases
// than counterexamples, no two counterexamples of a chunk with one signature. Deterministic.
TEST(Fuzz, KeepGoingRunsEveryCaseAndShrinksEachSignatureOnce) {
  FuzzOptions o = naive_campaign(150);  // two chunks
  o.shrink_limit = 3;
  FuzzStats first = fuzz(o);
  ASSERT_EQ(first.failures.size(), 1u);
  EXPECT_LT(first.cases, 150);  // non-vacuity: without it the campaign stops early
  o.keep_going = true;
  FuzzStats a = fuzz(o), b = fuzz(o);
  EXPECT_EQ(a.cases, 150);
  EXPECT_EQ(a.reports.size(), 150u);
  int failing = 0;
  for (const auto& r : a.reports) failing += r.disposition == Disposition::Failed || r.disposition == Disposition::Incorrect;
  EXPECT_GT(failing, static_cast<int>(a.failures.size()));
  ASSERT_GE(a.failures.size(), 1u);
  std::set<std::string> sigs;
  for (const auto& f : a.failures) sigs.insert(f.bucket);
  EXPECT_LE(a.failures.size(), 2 * sigs.size());  // at most once per bucket and chunk
  ASSERT_EQ(a.failures.size(), b.failures.size());
  for (size_t i = 0; i < a.failures.size(); ++i)
    EXPECT_EQ(training::case_to_json(a.failures[i].spec).dump(), training::case_to_json(b.failures[i].spec).dump());
  EXPECT_EQ(training::case_to_json(a.failures[0].spec).dump(), training::case_to_json(first.failures[0].spec).dump());
}

// A naive checkpoint of a dropout (whose recompute draws a new mask) sits behind four plain layers, where RapidCheck's shrink
// (which trims the layer list from its end) cannot reach it: delete_layers leaves that one layer,
// failing the same way; a budget of 1 deletes at most one.
TEST(Fuzz, DeleteLayersLeavesTheFailingLayer) {
  training::CaseSpec s;
  s.model.hidden = 8;
  s.model.tokens = 4;
  for (int i = 0; i < 5; ++i) {
    models::LayerSpec l;
    l.kind = i == 4 ? "dropout" : "linear";
    l.dropout = i == 4 ? 0.1f : 0.0f;
    s.model.layers.push_back(l);
    training::LayerFlags f;
    f.checkpoint = i == 4 ? training::CheckpointGranularity::Full : training::CheckpointGranularity::None;
    s.layers.push_back(f);
  }
  s.policy = training::CheckpointPolicy::Naive;
  s.executor = training::ExecutorKind::PerLayer;
  ASSERT_EQ(training::validate(s), "");
  OracleOptions o;
  CaseReport rep = evaluate(s, o);
  ASSERT_EQ(rep.disposition, Disposition::Incorrect) << rep.first_failure();  // the recompute's new mask
  training::CaseSpec one = s;
  CaseReport one_rep = rep;
  EXPECT_EQ(delete_layers(&one, &one_rep, o, 0), 4);
  ASSERT_EQ(one.model.layers.size(), 1u);
  EXPECT_EQ(one.layers[0].checkpoint, training::CheckpointGranularity::Full);
  EXPECT_EQ(one_rep.disposition, Disposition::Incorrect);
  EXPECT_EQ(evaluate(one, o).first_failure(), one_rep.first_failure());
  training::CaseSpec bounded = s;
  CaseReport bounded_rep = rep;
  EXPECT_LE(delete_layers(&bounded, &bounded_rep, o, 1), 1);
  EXPECT_GE(bounded.model.layers.size(), 4u);
}

}  // namespace
}  // namespace recap::properties
