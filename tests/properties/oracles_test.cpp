// One RapidCheck property per oracle, on generated cases (few cases each, so the suite stays
// fast), plus unit tests of evaluate on hand-made cases.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>

#include "harness/runtime/phase.h"
#include "properties/generators.h"
#include "harness/sut/worker.h"
#include "properties/diagnosis.h"
#include "properties/oracles.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {
namespace {

using training::CheckpointPolicy;

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
RC_GTEST_PROP(Oracles, Training, ()) { holds("training"); }
RC_GTEST_PROP(Oracles, Hygiene, ()) { holds("hygiene", *rc::gen::element(CheckpointPolicy::GraphSafe, CheckpointPolicy::Skip, CheckpointPolicy::Naive)); }
RC_GTEST_PROP(Oracles, SkipIsCorrect, ()) {
  GenConfig g;
  g.policy = CheckpointPolicy::Skip;
  const auto spec = *gen_case(g);
  CaseReport r = evaluate(spec, {});
  RC_ASSERT(r.disposition == Disposition::Passed);
}

training::CaseSpec one_layer(const std::string& kind, CheckpointPolicy policy, training::ExecutorKind ex) {
  training::CaseSpec s;
  s.model.hidden = 8;
  s.model.tokens = 4;
  models::LayerSpec l;
  l.kind = kind;
  l.heads = 2;
  l.ffn_hidden = 8;
  l.dropout = kind == "block" || kind == "dropout" ? 0.1f : 0.0f;
  for (int i = 0; i < 3; ++i) {
    s.model.layers.push_back(l);
    training::LayerFlags f;
    f.checkpoint = training::CheckpointGranularity::Full;
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
  auto s = one_layer("block", CheckpointPolicy::Naive, training::ExecutorKind::PerLayer);
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
  auto s = one_layer("block", CheckpointPolicy::Naive, training::ExecutorKind::Eager);
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
  auto s = one_layer("block", CheckpointPolicy::Skip, training::ExecutorKind::PerLayer);
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

// A system under test without a graph-safe policy (megatron-core 0.19.2 skips recompute inside
// graphs and has nothing else): its graphs hold as much as the no-checkpoint twin's, and the
// memory oracle says so with bytes instead of waiting for a graph-safe twin that never runs.
// Non-vacuity: the same system saving memory inside graphs passes.
class SkipOnlySut : public sut::Sut {
 public:
  explicit SkipOnlySut(bool saves) : saves_(saves) {}
  std::string name() const override { return "skip-only"; }
  bool recap_runtime() const override { return false; }
  sut::SutRun run(const training::CaseSpec& spec, const sut::RunRequest&) override {
    if (spec.policy == CheckpointPolicy::GraphSafe) throw sut::SkippedBySut("policy graph-safe: not in this version");
    sut::SutRun r;
    r.result.captured = spec.executor != training::ExecutorKind::Eager;
    auto& act = r.result.capture_memory.allocator.tensors[static_cast<int>(device::MemCategory::Activations)];
    act.peak_bytes = spec.any_checkpoint() && saves_ ? 4096 : 65536;
    return r;
  }

 private:
  bool saves_;
};

TEST(Evaluate, SkipWithoutAGraphSafeTwinIsJudgedAgainstNoCheckpoint) {
  auto s = one_layer("mlp", CheckpointPolicy::Skip, training::ExecutorKind::PerLayer);
  OracleOptions o;
  o.properties = {"memory"};
  o.require_memory_savings = true;
  o.sut = std::make_shared<SkipOnlySut>(false);
  CaseReport r = evaluate(s, o);
  const CheckResult& m = check(r, "memory");
  EXPECT_EQ(m.disposition, Disposition::Incorrect) << m.reason;
  EXPECT_NE(m.reason.find("recompute lost inside graphs (skip)"), std::string::npos) << m.reason;
  EXPECT_NE(m.reason.find("no graph-safe twin"), std::string::npos) << m.reason;
  // 3 full checkpoints x 1 microbatch x 4 tokens x 8 hidden x 4 bytes of inputs kept
  EXPECT_EQ(m.bytes, 65536 - 3 * 4 * 8 * 4);
  o.sut = std::make_shared<SkipOnlySut>(true);
  EXPECT_EQ(check(evaluate(s, o), "memory").disposition, Disposition::Passed);
}

// Issue 23, leftover: a skip-only system whose graphs and no-checkpoint twin's graphs both hold
// 0 B of activations showed nothing a recompute could save; "0 B vs 0 B" is no evidence, so the
// check is skipped with that reason, never passed. Non-vacuity: the same system holding bytes is judged.
class ZeroHoldingSut : public sut::Sut {
 public:
  explicit ZeroHoldingSut(int64_t peak) : peak_(peak) {}
  std::string name() const override { return "zero-holding"; }
  bool recap_runtime() const override { return false; }
  sut::SutRun run(const training::CaseSpec& spec, const sut::RunRequest&) override {
    if (spec.policy == CheckpointPolicy::GraphSafe) throw sut::SkippedBySut("policy graph-safe: not in this version");
    sut::SutRun r;
    r.result.captured = spec.executor != training::ExecutorKind::Eager;
    r.result.capture_memory.allocator.tensors[static_cast<int>(device::MemCategory::Activations)].peak_bytes = peak_;
    return r;
  }

 private:
  int64_t peak_;
};

TEST(Evaluate, SkipWithZeroBytesOnBothSidesIsSkippedNotPassed) {
  auto s = one_layer("mlp", CheckpointPolicy::Skip, training::ExecutorKind::PerLayer);
  OracleOptions o;
  o.properties = {"memory"};
  o.sut = std::make_shared<ZeroHoldingSut>(0);
  const CheckResult m = check(evaluate(s, o), "memory");
  EXPECT_EQ(m.disposition, Disposition::Skipped) << m.evidence;
  EXPECT_NE(m.reason.find("both hold 0 B of activations inside graphs"), std::string::npos) << m.reason;
  EXPECT_NE(m.reason.find("no graph-safe twin"), std::string::npos) << m.reason;
  o.sut = std::make_shared<ZeroHoldingSut>(4096);
  const CheckResult held = check(evaluate(s, o), "memory");
  EXPECT_NE(held.disposition, Disposition::Skipped) << held.reason;
}

// What a system is asked to send is the oracles' decision (run_request): another system's masks
// only while an fp64 oracle that applies them is selected, for fp32 cases of at most 64 K mask
// elements; recap's runtime never (its draws are its own).
TEST(RunRequest, MasksAreAskedOnlyForTheFp64OraclesOfAnotherSystem) {
  auto s = one_layer("mlp", CheckpointPolicy::GraphSafe, training::ExecutorKind::PerLayer);
  ASSERT_EQ(s.model.dtype, models::DType::F32);
  OracleOptions o;
  EXPECT_FALSE(run_request(s, o).mask_frames);  // recap's runtime in process
  o.sut = std::make_shared<SkipOnlySut>(true);
  EXPECT_TRUE(run_request(s, o).mask_frames);
  o.properties = {"memory", "rng_ledger"};
  EXPECT_FALSE(run_request(s, o).mask_frames);
  o.properties = {"training"};
  EXPECT_TRUE(run_request(s, o).mask_frames);
  training::CaseSpec big = s;
  big.model.hidden = 1024;
  big.model.tokens = 128;
  EXPECT_FALSE(run_request(big, o).mask_frames);
  training::CaseSpec bf16 = s;
  bf16.model.dtype = models::DType::BF16;
  EXPECT_FALSE(run_request(bf16, o).mask_frames);
}

TEST(Evaluate, GraphSafeSavesMemoryInsideGraphs) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, training::ExecutorKind::PerLayer);
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Passed) << r.first_failure();
  EXPECT_GT(r.memory.value("saved_in_graphs", 0), 0) << r.memory.dump();
}

TEST(Evaluate, IsDeterministic) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, training::ExecutorKind::FullIteration);
  Json a = case_report_to_json(evaluate(s, {}));
  Json b = case_report_to_json(evaluate(s, {}));
  a.erase("timings");
  b.erase("timings");
  EXPECT_EQ(a, b);
}

// --profile (docs/profile.md): off, no profile key and no twin is timed twice; on, the case's own
// run and its twins with their phases, every oracle's own time, and the parts within the case's wall
// time (structure and consistency only: no timing is asserted).
TEST(Evaluate, ProfileOnlyWhenAsked) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, training::ExecutorKind::PerLayer);
  CaseReport off = evaluate(s, {});
  EXPECT_FALSE(off.timings.contains("profile")) << off.timings.dump();
  EXPECT_FALSE(case_report_to_json(off)["timings"].contains("profile"));
  OracleOptions o;
  o.profile = true;
  CaseReport on = evaluate(s, o);
  EXPECT_EQ(on.disposition, Disposition::Passed) << on.first_failure();
  ASSERT_TRUE(on.timings.contains("profile")) << on.timings.dump();
  const Json& p = on.timings["profile"];
  ASSERT_TRUE(p["runs"].contains("case")) << p.dump();
  EXPECT_TRUE(p["runs"].contains("eager_twin")) << p.dump();
  const Json& own = p["runs"]["case"];
  for (const char* k : {"startup_ms", "model_build_ms", "warmup_ms", "capture_ms", "replay_ms", "teardown_ms",
                        "sync_ms", "h2d_ms", "d2h_ms", "sim_work_ms", "total_ms", "other_ms"})
    EXPECT_TRUE(own.contains(k)) << k << " missing from " << own.dump();
  EXPECT_TRUE(p["oracles"].contains("reference_ms")) << p.dump();
  double parts = p["other_ms"].get<double>();
  for (const auto& [name, run] : p["runs"].items()) parts += run["total_ms"].get<double>();
  for (const auto& [name, ms] : p["oracles"].items()) parts += ms.get<double>();
  EXPECT_NEAR(parts, p["wall_ms"].get<double>(), 1e-6 * std::max(1.0, p["wall_ms"].get<double>()));
  // the verdicts do not depend on it
  Json a = case_report_to_json(off), b = case_report_to_json(on);
  a.erase("timings");
  b.erase("timings");
  EXPECT_EQ(a, b);
}

TEST(Evaluate, InvalidCaseIsSkippedNotThrown) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, training::ExecutorKind::Eager);
  s.model.hidden = 7;  // not divisible by heads 2
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Skipped);
}

// checkpoint_style non-reentrant is torch's checkpoint: recap's runtime reports it skipped with the
// reason (the in-process SUT as `recap worker` does), and runs it where no layer checkpoints.
TEST(Evaluate, NonReentrantCheckpointsAreSkippedByRecapsRuntime) {
  auto s = one_layer("block", CheckpointPolicy::Naive, training::ExecutorKind::Eager);
  s.style = training::CheckpointStyle::NonReentrant;
  ASSERT_TRUE(s.any_checkpoint());
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Skipped);
  ASSERT_EQ(r.checks.size(), 1u);
  EXPECT_EQ(r.checks[0].reason,
            "the system under test cannot run this case: checkpoint_style non-reentrant: recap's runtime does not model "
            "torch.utils.checkpoint(use_reentrant=False) (its checkpoints are reentrant or without-output)");
  for (auto& f : s.layers) f.checkpoint = training::CheckpointGranularity::None;
  EXPECT_EQ(evaluate(s, {}).disposition, Disposition::Passed);
}

// ---- reference -----------------------------------------------------------------------------------

training::CaseSpec lone(const std::string& kind, models::DType dtype, float dropout = 0.0f) {
  training::CaseSpec s;
  s.model.hidden = 16;
  s.model.tokens = 8;
  s.model.dtype = dtype;
  models::LayerSpec l;
  l.kind = kind;
  l.heads = 2;
  l.ffn_hidden = 32;
  l.dropout = dropout;
  s.model.layers = {l};
  s.layers.resize(1);
  return s;
}

TEST(Reference, PassesWithTheWorstQuantityAsTheDivergence) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, training::ExecutorKind::PerLayer);
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(r.disposition, Disposition::Passed) << r.first_failure();
  const auto& c = check(r, "reference");
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  ASSERT_TRUE(c.divergence.has_value());
  ASSERT_TRUE(c.divergence->rel_l2_error.has_value());
  EXPECT_GT(*c.divergence->rel_l2_error, 0.0);  // fp32 against fp64: never exact over a block stack
  EXPECT_LE(*c.divergence->rel_l2_error, models::check::kTolF32);
  EXPECT_EQ(c.divergence->tolerance, models::check::kTolF32);
  EXPECT_FALSE(c.divergence->tensor.empty());
  EXPECT_TRUE(r.timings.contains("reference_ms"));
  Json j = case_report_to_json(r);
  bool found = false;
  for (const auto& k : j["checks"])
    if (k["property"] == "reference") {
      found = true;
      EXPECT_TRUE(k["divergence"].contains("rel_l2_error")) << k.dump();
      EXPECT_TRUE(k["divergence"].contains("tolerance")) << k.dump();
    }
  EXPECT_TRUE(found);
}

TEST(Reference, BothDtypesOfEveryKindPass) {
  for (models::DType dt : {models::DType::F32, models::DType::BF16})
    for (const char* kind : {"linear", "layernorm", "rmsnorm", "gelu", "swiglu", "dropout", "attention", "mlp", "block"}) {
      auto s = lone(kind, dt, std::string(kind) == "dropout" || std::string(kind) == "block" ? 0.1f : 0.0f);
      CheckResult c = reference_check(s, device::Backend::Sim);
      EXPECT_EQ(c.disposition, Disposition::Passed) << kind << ": " << c.reason;
    }
}

// The fp64 reference runs on the CPU; past its budget of multiply-adds it checks fewer tokens,
// still at the layer's full width, and says so. One mlp at hidden 256 and 256 tokens costs about
// 5e8 multiply-adds (over the 2e8 budget); at 16 tokens (under it) nothing is reduced.
TEST(Reference, BoundsItsCostByCheckingFewerTokens) {
  auto big = lone("mlp", models::DType::F32);
  big.model.hidden = 256;
  big.model.tokens = 256;
  CheckResult c = reference_check(big, device::Backend::Sim);
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_NE(c.reason.find("fewer tokens than the case's 256"), std::string::npos) << c.reason;
  auto small = big;
  small.model.tokens = 16;
  CheckResult d = reference_check(small, device::Backend::Sim);
  EXPECT_EQ(d.disposition, Disposition::Passed) << d.reason;
  EXPECT_EQ(d.reason, "");
}

TEST(Reference, PlantedWrongGradientIsIncorrectAndNamed) {
  auto s = one_layer("block", CheckpointPolicy::GraphSafe, training::ExecutorKind::Eager);
  std::string planted;
  // A 1e-4 relative error in one gradient: ten times the fp32 tolerance, far below what the
  // bitwise oracles could see (they compare the case with itself).
  CheckResult c = reference_check(s, device::Backend::Sim, [&](models::check::RunOutput& run) {
    for (size_t i = 0; i < run.names.size(); ++i)
      if (run.names[i].find("mlp.fc1.weight") != std::string::npos) {
        planted = run.names[i];
        for (float& g : run.grads[i]) g *= 1.0f + 1e-4f;
        return;
      }
  });
  ASSERT_FALSE(planted.empty());
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  ASSERT_TRUE(c.divergence.has_value());
  EXPECT_EQ(c.divergence->tensor, "grad " + planted);
  EXPECT_NEAR(*c.divergence->rel_l2_error, 1e-4, 1e-5);
  EXPECT_GT(c.divergence->max_abs_error, 0.0);
  EXPECT_NE(c.reason.find("grad " + planted), std::string::npos) << c.reason;
}

TEST(Reference, PerturbedReferenceParameterShowsInTheOutput) {
  // The reference built with a wrong bias: y is off, dx and the gradients are not (a linear
  // layer's backward does not read its bias).
  auto s = lone("linear", models::DType::F32);
  CheckResult c = reference_check(s, device::Backend::Sim, {}, [](models::reference::Params& p) {
    for (auto& [name, v] : p)
      if (name.find("bias") != std::string::npos)
        for (double& b : v) b += 0.05;
  });
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  ASSERT_TRUE(c.divergence.has_value());
  EXPECT_EQ(c.divergence->tensor, "y") << c.reason;
}

TEST(Reference, Bf16ToleranceIsLooserButNotBlind) {
  auto s = lone("mlp", models::DType::BF16);
  CheckResult ok = reference_check(s, device::Backend::Sim);
  EXPECT_EQ(ok.disposition, Disposition::Passed) << ok.reason;
  EXPECT_EQ(ok.divergence->tolerance, models::check::kTolBf16Layer);
  CheckResult c = reference_check(s, device::Backend::Sim, [](models::check::RunOutput& run) {
    for (float& v : run.dx) v *= 1.5f;  // 50%: what a wrong bf16 kernel looks like
  });
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_EQ(c.divergence->tensor, "dx");
}

TEST(Reference, Bf16NoisePastTheToleranceIsAFinding) {
  auto s = lone("mlp", models::DType::BF16);
  CheckResult c = reference_check(s, device::Backend::Sim, [](models::check::RunOutput& run) {
    for (float& v : run.dx) v *= 1.04f;  // 4%: twice the single-layer bound, within the noise factor
  });
  EXPECT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_GT(*c.divergence->rel_l2_error, c.divergence->tolerance);
  auto f = s;
  f.model.dtype = models::DType::F32;  // fp32 has no noise allowance
  CheckResult g = reference_check(f, device::Backend::Sim, [](models::check::RunOutput& run) {
    for (float& v : run.dx) v *= 1.0001f;
  });
  EXPECT_EQ(g.disposition, Disposition::Incorrect);
}

TEST(Reference, NonFiniteIsIncorrect) {
  auto s = lone("gelu", models::DType::F32);
  CheckResult c = reference_check(s, device::Backend::Sim, [](models::check::RunOutput& run) { run.dx[3] = NAN; });
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  ASSERT_TRUE(c.divergence.has_value());
  EXPECT_EQ(c.divergence->tensor, "dx");
  EXPECT_TRUE(std::isinf(*c.divergence->rel_l2_error));
  EXPECT_NE(c.reason.find("non-finite"), std::string::npos) << c.reason;
}

TEST(Reference, MissingDrawIsIncorrect) {
  auto s = lone("dropout", models::DType::F32, 0.1f);
  CheckResult c = reference_check(s, device::Backend::Sim, [](models::check::RunOutput& run) { run.draws.clear(); });
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("no forward draw"), std::string::npos) << c.reason;
}

TEST(Reference, ToleranceByDtypeAndDepth) {
  using models::check::tolerance;
  EXPECT_EQ(tolerance(lone("block", models::DType::F32).model), models::check::kTolF32);
  EXPECT_EQ(tolerance(lone("linear", models::DType::BF16).model), models::check::kTolBf16Layer);
  EXPECT_EQ(tolerance(lone("attention", models::DType::BF16).model), models::check::kTolBf16Stack);
  EXPECT_EQ(tolerance(lone("block", models::DType::BF16).model), models::check::kTolBf16Stack);
  auto two = lone("linear", models::DType::BF16).model;
  two.layers.push_back(two.layers[0]);
  EXPECT_EQ(tolerance(two), models::check::kTolBf16Stack);
  auto eight = lone("block", models::DType::BF16).model;
  eight.layers.resize(8, eight.layers[0]);
  EXPECT_EQ(tolerance(eight), 2 * models::check::kTolBf16Stack);  // linear in depth past 4 layers
  auto eight32 = eight;
  eight32.dtype = models::DType::F32;
  EXPECT_EQ(tolerance(eight32), models::check::kTolF32);
}

// Manual: the margin of the reference check over generated cases (worst error / tolerance, by
// dtype). CASES=n (default 300).
TEST(ReferenceProbe, DISABLED_Margins) {
  const int n = std::getenv("CASES") ? std::atoi(std::getenv("CASES")) : 300;
  std::map<std::string, double> worst;
  std::map<std::string, std::string> worst_case;
  std::map<std::string, int> count;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    training::CaseSpec s = gen_case(GenConfig{})(rc::Random(static_cast<uint64_t>(i) * 7919 + 1), rc::kNominalSize).value();
    CheckResult c = reference_check(s, device::Backend::Sim);
    const std::string dt = s.model.dtype == models::DType::BF16 ? "bf16" : "fp32";
    const std::string key = dt + (s.model.layers.size() == 1 ? " 1 layer" : " stack");
    ++count[key];
    double ratio = c.divergence ? *c.divergence->rel_l2_error / c.divergence->tolerance : INFINITY;
    if (c.disposition != Disposition::Passed) std::cout << "NOT PASSED " << c.reason << "\n" << training::case_to_json(s).dump() << "\n";
    if (ratio > worst[key]) {
      worst[key] = ratio;
      worst_case[key] = c.divergence ? c.divergence->describe() : c.reason;
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << n << " reference checks in " << secs << " s (" << 1000 * secs / n << " ms each)\n";
  for (auto& [k, v] : worst) std::cout << "  " << k << " (" << count[k] << "): worst/tolerance " << v << "  " << worst_case[k] << "\n";
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
  const std::vector<std::string> order = {"capture_clean", "eager_vs_graphed", "recompute_on_off", "rng_ledger",
                                          "memory",        "reference",        "training",         "hygiene",
                                          "differential", "rank_recompute_equal", "tp_masks_differ",
                                          "outside_masks_equal", "grads_match_one_rank", "pp_schedule_1f1b",
                                          "pp_stage_masks_differ", "dp_grads_reduced"};
  EXPECT_EQ(property_names(), order);
  // differential is judged only when asked for (--differential OTHER); the cross-rank ones only
  // with a rank group (--ranks N); the others by default
  for (const auto& p : order) {
    EXPECT_EQ(opt_in_property(p), p == "differential") << p;
    EXPECT_EQ(ranks_property(p), p == "rank_recompute_equal" || p == "tp_masks_differ" || p == "outside_masks_equal" ||
                                     p == "grads_match_one_rank" || p == "pp_schedule_1f1b" || p == "pp_stage_masks_differ" ||
                                     p == "dp_grads_reduced")
        << p;
  }
}

// A framework's failure is diagnosed from what its driver reports: the megatron-core driver's
// RunawayBackward (results/FINDINGS.md M7) is class 25, and only that error is.
TEST(Diagnosis, RunawayBackwardIsClass25) {
  CaseReport r;
  r.spec = one_layer("block", CheckpointPolicy::Skip, training::ExecutorKind::Eager);
  r.disposition = Disposition::Failed;
  CheckResult c;
  c.property = "capture_clean";
  c.disposition = Disposition::Failed;
  c.reason = "eager step failed in the backward of block0: a backward that does not end";
  c.cuda_error = "RunawayBackward";
  r.checks = {c};
  EXPECT_EQ(diagnose(r).rfind("class 25:", 0), 0u) << diagnose(r);
  r.checks[0].cuda_error = "TypeError";
  EXPECT_EQ(diagnose(r).find("class 25"), std::string::npos) << diagnose(r);
}

}  // namespace
// The first replay is the step the system reported as one, not the case's warmup: megatron-core's
// per-layer graphs replay from step 1 whatever cuda_graph_warmup_steps is, and M9's wrong weight
// gradient at that first replay was once diagnosed "a later replay departs" (classes 8, 21, 4).
TEST(Diagnosis, TheFirstReplayIsTheObservedOne) {
  CaseReport r;
  r.spec = one_layer("linear", CheckpointPolicy::Skip, training::ExecutorKind::PerLayer);
  r.spec.warmup = 0;
  r.disposition = Disposition::Incorrect;
  CheckResult c;
  c.property = "eager_vs_graphed";
  c.disposition = Disposition::Incorrect;
  Divergence d;
  d.step = 1;
  d.microbatch = 0;
  d.tensor = "grad linear0.weight";
  c.divergence = d;
  r.checks = {c};
  r.first_replay_step = 1;
  EXPECT_EQ(diagnose(r).rfind("class 9, 10, 13 or 24:", 0), 0u) << diagnose(r);
  // Non-vacuity: reported no replay, the case's warmup (0) stands for it and step 1 is a later one.
  r.first_replay_step = -1;
  EXPECT_EQ(diagnose(r).rfind("class 8, 21 or 4:", 0), 0u) << diagnose(r);
}

}  // namespace recap::properties
