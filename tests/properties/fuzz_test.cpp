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
  reports::CampaignResult st = fuzz(o);
  std::cout << st.cases << " cases in " << st.seconds << " s: " << st.cases / st.seconds * 60 << " cases/min\n";
  for (auto& [k, v] : st.by_disposition) std::cout << "  " << k << ": " << v << "\n";
  for (auto& [k, v] : st.classification) std::cout << "  [" << k << "] " << v << "\n";
  for (auto& f : st.findings) std::cout << "  finding " << f << "\n";
  if (std::getenv("LAST") && !st.reports.empty())
    std::cout << st.reports.back().dump(1) << "\n";
  for (auto& f : st.failures)
    std::cout << "FAIL " << f.property << " shrinks " << f.shrinks << " " << f.reproduce << "\n  " << f.reason << "\n"
              << f.case_json.dump() << "\n";
}

}  // namespace
}  // namespace recap::properties

namespace recap::properties {
namespace {

using reports::CampaignResult;

Json stripped(const CampaignResult& st) {
  Json j = Json::array();
  for (Json k : st.reports) {
    k.erase("timings");
    j.push_back(k);
  }
  return j;
}

// The case a counterexample holds (its JSON form, as the reports carry it).
training::CaseSpec spec_of(const reports::FailureRecord& f) {
  training::CaseSpec spec;
  EXPECT_EQ(training::case_from_json(f.case_json, &spec), "");
  return spec;
}

FuzzOptions campaign(uint64_t seed, int cases, training::CheckpointPolicy policy) {
  FuzzOptions o;
  o.seed = seed;
  o.cases = cases;
  o.gen.policy = policy;
  return o;
}

// Seed 1 under the naive policy: its first chunk fails within a few cases.
FuzzOptions naive_campaign(int cases) { return campaign(1, cases, training::CheckpointPolicy::Naive); }

TEST(Fuzz, NaiveFindsTheCaptureFailureAndShrinksItToOneLayer) {
  FuzzOptions o = naive_campaign(50);
  CampaignResult st = fuzz(o);
  ASSERT_EQ(st.failures.size(), 1u);
  EXPECT_LE(st.cases, 50);
  const reports::FailureRecord& cx = st.failures[0];
  const training::CaseSpec spec = spec_of(cx);
  EXPECT_EQ(cx.property, "capture_clean");
  EXPECT_EQ(spec.model.layers.size(), 1u);
  EXPECT_NE(spec.layers[0].checkpoint, training::CheckpointGranularity::None);
  EXPECT_NE(spec.executor, training::ExecutorKind::Eager);
  EXPECT_TRUE(spec.executor == training::ExecutorKind::FullIteration || spec.layers[0].graphed);
  EXPECT_EQ(cx.report["disposition"], "failed");
  EXPECT_EQ(cx.disposition, "failed");
  bool named = false;
  for (const auto& c : cx.report["checks"])
    if (c["property"] == "capture_clean")
      named = c["capture_error"]["error"] == "cudaErrorStreamCaptureUnsupported" && c["capture_error"]["api"] != "";
  EXPECT_TRUE(named);
  EXPECT_EQ(cx.error, "cudaErrorStreamCaptureUnsupported");
  EXPECT_GT(cx.shrinks, 0);
  EXPECT_EQ(cx.reproduce.rfind("RC_PARAMS=\"reproduce=", 0), 0u) << cx.reproduce;
  EXPECT_EQ(cx.seed, 1u);
  // The shrunk case replays verbatim to the same verdict.
  CaseReport again = evaluate(spec, {});
  EXPECT_EQ(again.disposition, Disposition::Failed);
  EXPECT_EQ(again.first_failure(), cx.reason);
  EXPECT_EQ(cx.report["first_failure"], cx.reason);
}

TEST(Fuzz, GraphSafePasses) {
  FuzzOptions o = campaign(7, 150, training::CheckpointPolicy::GraphSafe);
  CampaignResult st = fuzz(o);
  EXPECT_TRUE(st.failures.empty()) << st.failures[0].reason;
  EXPECT_EQ(st.cases, 150);
  EXPECT_EQ(st.by_disposition["passed"], 150);
  EXPECT_EQ(static_cast<int>(st.reports.size()), 150);
}

TEST(Fuzz, SkipPassesWithTheMemoryFinding) {
  FuzzOptions o = campaign(3, 60, training::CheckpointPolicy::Skip);
  CampaignResult st = fuzz(o);
  EXPECT_TRUE(st.failures.empty()) << st.failures[0].reason;
  ASSERT_FALSE(st.findings.empty());
  EXPECT_NE(st.findings[0].find("recompute lost inside graphs"), std::string::npos) << st.findings[0];
  EXPECT_NE(st.findings[0].find("bytes"), std::string::npos) << st.findings[0];
  o.oracle.require_memory_savings = true;
  CampaignResult strict = fuzz(o);
  ASSERT_EQ(strict.failures.size(), 1u);
  EXPECT_EQ(strict.failures[0].property, "memory");
}

TEST(Fuzz, SameSeedSameReports) {
  FuzzOptions o;
  o.seed = 11;
  o.cases = 40;
  CampaignResult a = fuzz(o), b = fuzz(o);
  EXPECT_EQ(stripped(a), stripped(b));
  EXPECT_EQ(a.by_disposition, b.by_disposition);
  EXPECT_EQ(a.classification, b.classification);
  ASSERT_EQ(a.failures.size(), b.failures.size());
  for (size_t i = 0; i < a.failures.size(); ++i) {
    EXPECT_EQ(a.failures[i].reproduce, b.failures[i].reproduce);
    EXPECT_EQ(a.failures[i].case_json, b.failures[i].case_json);
  }
}

TEST(Fuzz, ShardsAreDisjointAndCoverTheCampaign) {
  FuzzOptions o = campaign(5, 300, training::CheckpointPolicy::GraphSafe);
  CampaignResult whole = fuzz(o);
  std::vector<std::string> all, parts;
  for (const auto& r : whole.reports) all.push_back(r["spec"].dump());
  o.shard_count = 2;
  for (int i = 0; i < 2; ++i) {
    o.shard_index = i;
    CampaignResult s = fuzz(o);
    for (const auto& r : s.reports) parts.push_back(r["spec"].dump());
  }
  std::sort(all.begin(), all.end());
  std::sort(parts.begin(), parts.end());
  EXPECT_EQ(all, parts);
}

TEST(Fuzz, ClassificationAndProgress) {
  FuzzOptions o = campaign(2, 100, training::CheckpointPolicy::GraphSafe);
  int calls = 0, last = 0;
  CampaignResult st = fuzz(o, [&](const Progress& p) {
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
  CampaignResult st = fuzz(o);
  EXPECT_LT(st.cases, 100000);
  EXPECT_LT(st.seconds, 10.0);
}

// --shrink-limit: the shrink stops spending evaluations at the limit and keeps the smallest failing
// case found by then, which still fails the same way; without the limit the same campaign shrinks
// further (non-vacuity), and the limit is deterministic (same seed, same case).
TEST(Fuzz, ShrinkLimitBoundsTheShrink) {
  FuzzOptions o = naive_campaign(50);
  CampaignResult full = fuzz(o);
  ASSERT_EQ(full.failures.size(), 1u);
  o.shrink_limit = 2;
  CampaignResult a = fuzz(o), b = fuzz(o);
  ASSERT_EQ(a.failures.size(), 1u);
  EXPECT_LE(a.failures[0].shrinks, 4);  // 2 RapidCheck steps, then at most 2 layer deletions
  EXPECT_GT(full.failures[0].shrinks, a.failures[0].shrinks);
  EXPECT_EQ(a.failures[0].case_json.dump(), b.failures[0].case_json.dump());
  EXPECT_EQ(a.failures[0].reason.empty(), false);
  CaseReport again = evaluate(spec_of(a.failures[0]), {});
  EXPECT_EQ(again.first_failure(), a.failures[0].reason);
}

// --keep-going: the campaign runs every case instead of stopping at its first counterexample, and
// a failure like one already shrunk in its chunk is counted, not shrunk again: more failing cases
// than counterexamples, no two counterexamples of a chunk with one signature. Deterministic.
TEST(Fuzz, KeepGoingRunsEveryCaseAndShrinksEachSignatureOnce) {
  FuzzOptions o = naive_campaign(150);  // two chunks
  o.shrink_limit = 3;
  CampaignResult first = fuzz(o);
  ASSERT_EQ(first.failures.size(), 1u);
  EXPECT_LT(first.cases, 150);  // non-vacuity: without it the campaign stops early
  o.keep_going = true;
  CampaignResult a = fuzz(o), b = fuzz(o);
  EXPECT_EQ(a.cases, 150);
  EXPECT_EQ(a.reports.size(), 150u);
  int failing = 0;
  for (const auto& r : a.reports) failing += r["disposition"] == "failed" || r["disposition"] == "incorrect";
  EXPECT_GT(failing, static_cast<int>(a.failures.size()));
  ASSERT_GE(a.failures.size(), 1u);
  std::set<std::string> sigs;
  for (const auto& f : a.failures) sigs.insert(f.bucket);
  EXPECT_LE(a.failures.size(), 2 * sigs.size());  // at most once per bucket and chunk
  ASSERT_EQ(a.failures.size(), b.failures.size());
  for (size_t i = 0; i < a.failures.size(); ++i)
    EXPECT_EQ(a.failures[i].case_json.dump(), b.failures[i].case_json.dump());
  EXPECT_EQ(a.failures[0].case_json.dump(), first.failures[0].case_json.dump());
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
