// One RapidCheck property per oracle, on generated cases (few cases each, so the suite stays
// fast), plus unit tests of evaluate on hand-made cases.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "harness/runtime/phase.h"
#include "properties/generators.h"
#include "properties/oracles.h"

namespace recap::properties {
namespace {

using runtime::CheckpointPolicy;

// Judges only `property` on a case drawn with a capture-safe policy; the check must not fail.
void holds(const std::string& property, CheckpointPolicy policy = CheckpointPolicy::GraphSafe) {
  GenConfig g;
  g.policy = policy;
  const auto spec = *gen_case(g);
  OracleOptions o;
  o.properties = {property};
  CaseReport r = evaluate(spec, o);
  RC_ASSERT(r.checks.size() == 1u);
  RC_CLASSIFY(r.checks[0].disposition == Disposition::Skipped, "not applicable");
  RC_ASSERT_FALSE(r.checks[0].disposition == Disposition::Failed || r.checks[0].disposition == Disposition::Incorrect ||
                  r.checks[0].disposition == Disposition::Crashed);
}

RC_GTEST_PROP(Oracles, CaptureClean, ()) { holds("capture_clean"); }
RC_GTEST_PROP(Oracles, EagerVsGraphed, ()) { holds("eager_vs_graphed"); }
RC_GTEST_PROP(Oracles, RecomputeOnOff, ()) { holds("recompute_on_off"); }
RC_GTEST_PROP(Oracles, RngLedger, ()) { holds("rng_ledger"); }
RC_GTEST_PROP(Oracles, Memory, ()) { holds("memory"); }
RC_GTEST_PROP(Oracles, Reference, ()) { holds("reference"); }
RC_GTEST_PROP(Oracles, Hygiene, ()) { holds("hygiene", *rc::gen::element(CheckpointPolicy::GraphSafe, CheckpointPolicy::Skip, CheckpointPolicy::Naive)); }
RC_GTEST_PROP(Oracles, SkipIsCorrect, ()) {
  GenConfig g;
  g.policy = CheckpointPolicy::Skip;
  const auto spec = *gen_case(g);
  CaseReport r = evaluate(spec, {});
  RC_ASSERT(r.disposition == Disposition::Passed);
}

runtime::CaseSpec one_layer(const std::string& kind, CheckpointPolicy policy, runtime::ExecutorKind ex) {
  runtime::CaseSpec s;
  s.model.hidden = 8;
  s.model.tokens = 4;
  models::LayerSpec l;
  l.kind = kind;
  l.heads = 2;
  l.ffn_hidden = 8;
  l.dropout = kind == "block" || kind == "dropout" ? 0.1f : 0.0f;
  for (int i = 0; i < 3; ++i) {
    s.model.layers.push_back(l);
    runtime::LayerFlags f;
    f.checkpoint = runtime::CheckpointGranularity::Full;
    s.layers.push_back(f);
  }
  s.policy = policy;
  s.executor = ex;
  s.warmup = 1;
  s.replays = 2;
  return s;
}

const CheckResult& check(const CaseReport& r, const std::string& p) {
  for (const auto& c : r.checks)
    if (c.property == p) return c;
  throw std::runtime_error("no check " + p);
}

TEST(Evaluate, NaiveCaptureFailureNamesApiAndError) {
  auto s = one_layer("block", CheckpointPolicy::Naive, runtime::ExecutorKind::PerLayer);
  s.generator = runtime::GeneratorMode::Host;
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Failed);
  const auto& c = check(r, "capture_clean");
  EXPECT_EQ(c.disposition, Disposition::Failed);
  EXPECT_EQ(c.api, "cudaStreamSynchronize");
  EXPECT_EQ(c.cuda_error, "cudaErrorStreamCaptureUnsupported");
  EXPECT_EQ(check(r, "hygiene").disposition, Disposition::Passed) << check(r, "hygiene").reason;
  EXPECT_TRUE(runtime::phase_flags_clear());
  EXPECT_NE(r.first_failure().find("capture_clean: "), std::string::npos);
}

TEST(Evaluate, NaiveGraphSafeGeneratorGivesTheFirstDivergence) {
  auto s = one_layer("block", CheckpointPolicy::Naive, runtime::ExecutorKind::Eager);
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Incorrect);
  const auto& c = check(r, "recompute_on_off");
  ASSERT_TRUE(c.divergence.has_value()) << c.reason;
  EXPECT_EQ(c.divergence->step, 0);
  EXPECT_GT(c.divergence->max_abs_error, 0.0);
  EXPECT_GT(c.divergence->max_ulps, 0u);
  EXPECT_FALSE(c.divergence->tensor.empty());
  EXPECT_EQ(check(r, "rng_ledger").disposition, Disposition::Incorrect);
  EXPECT_EQ(check(r, "eager_vs_graphed").disposition, Disposition::Skipped);  // no eager twin for an eager case
}

TEST(Evaluate, SkipLosesTheSavingAsAFindingWithBytes) {
  auto s = one_layer("block", CheckpointPolicy::Skip, runtime::ExecutorKind::PerLayer);
  for (auto& l : s.model.layers) l.dropout = 0.0f;
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Passed) << r.first_failure();
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_NE(r.findings[0].find("recompute lost inside graphs"), std::string::npos) << r.findings[0];
  EXPECT_GT(check(r, "memory").bytes, 0);
  OracleOptions strict;
  strict.require_memory_savings = true;
  CaseReport f = evaluate(s, strict);
  EXPECT_EQ(f.disposition, Disposition::Incorrect);
  EXPECT_EQ(check(f, "memory").disposition, Disposition::Incorrect);
  EXPECT_GT(check(f, "memory").bytes, 0);
}

TEST(Evaluate, GraphSafeSavesMemoryInsideGraphs) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, runtime::ExecutorKind::PerLayer);
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Passed) << r.first_failure();
  EXPECT_GT(r.memory.value("saved_in_graphs", 0), 0) << r.memory.dump();
}

TEST(Evaluate, IsDeterministic) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, runtime::ExecutorKind::FullIteration);
  Json a = case_report_to_json(evaluate(s, {}));
  Json b = case_report_to_json(evaluate(s, {}));
  a.erase("timings");
  b.erase("timings");
  EXPECT_EQ(a, b);
}

TEST(Evaluate, InvalidCaseIsSkippedNotThrown) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, runtime::ExecutorKind::Eager);
  s.model.hidden = 7;  // not divisible by heads 2
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Skipped);
}

TEST(Dispositions, NamesAndOrder) {
  for (Disposition d : {Disposition::Passed, Disposition::Failed, Disposition::Incorrect, Disposition::Crashed,
                        Disposition::Skipped}) {
    Disposition back;
    ASSERT_TRUE(disposition_from_name(disposition_name(d), &back));
    EXPECT_EQ(back, d);
  }
  EXPECT_EQ(worse(Disposition::Passed, Disposition::Incorrect), Disposition::Incorrect);
  EXPECT_EQ(worse(Disposition::Failed, Disposition::Incorrect), Disposition::Failed);
  EXPECT_EQ(worse(Disposition::Failed, Disposition::Crashed), Disposition::Crashed);
  EXPECT_EQ(worse(Disposition::Skipped, Disposition::Passed), Disposition::Passed);
  EXPECT_EQ(property_names().size(), 7u);
}

}  // namespace
}  // namespace recap::properties
