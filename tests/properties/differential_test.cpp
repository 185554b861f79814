// Property differential (issue 21): the comparator of two backends' runs on synthetic RunResults
// (equal, a ledger offset, a gradient beyond and within tolerance, different failures, the other
// backend unavailable), and evaluate() with --differential sim on sim (a self-check, the only
// pair the CPU can run).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "properties/generators.h"
#include "properties/oracles.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {
namespace {

training::CaseSpec fp32_case() {
  training::CaseSpec s;
  s.model.dtype = runtime::DType::F32;
  return s;
}

// Two steps, two microbatches, two parameters, two ledger entries per step.
training::RunResult synthetic() {
  training::RunResult r;
  r.backend = "sim";
  r.param_names = {"block0.fc1.weight", "block0.fc1.bias"};
  for (int s = 0; s < 2; ++s) {
    training::StepRecord st;
    st.step = s;
    st.phase = s == 0 ? "warmup" : "replay";
    for (int m = 0; m < 2; ++m) {
      training::MicrobatchRecord mb;
      mb.microbatch = m;
      mb.loss = 0.5f + 0.1f * m + 0.01f * s;
      mb.grads = {{0.25f, -0.5f, 1.0f, 0.0f}, {0.125f, 2.0f}};
      st.microbatches.push_back(mb);
    }
    st.grads = {{0.5f, -1.0f, 2.0f, 0.0f}, {0.25f, 4.0f}};
    st.params = {{1.0f, 2.0f, 3.0f, 4.0f}, {-1.0f, 0.5f}};
    for (int e = 0; e < 2; ++e) {
      training::LedgerEntry le;
      le.site.layer = "block0.attn";
      le.site.op = "attn_dropout";
      le.site.phase = e == 0 ? runtime::Phase::Forward : runtime::Phase::Recompute;
      le.step = s;
      le.seed = 42;
      le.offset = 16 * s;
      le.count = 64;
      le.generator = "model-parallel-rng";
      st.ledger.push_back(le);
    }
    r.steps.push_back(st);
  }
  return r;
}

Run run_of(training::RunResult r) {
  Run x;
  x.result = std::move(r);
  x.backend = "cuda";
  return x;
}

CheckResult judge(const training::RunResult& own, const Run& other, const training::CaseSpec& spec = fp32_case()) {
  return compare_backends(spec, own, "sim", other, "cuda");
}

TEST(Differential, EqualRunsPassWithEvidence) {
  const CheckResult c = judge(synthetic(), run_of(synthetic()));
  ASSERT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_EQ(c.property, "differential");
  // 2 steps x (2 microbatches x (loss + 2 grads) + 2 grads + 2 params) = 2 x 10 tensors
  EXPECT_NE(c.evidence.find("sim vs cuda: both ran through; 2 steps, 4 ledger entries bitwise equal"), std::string::npos)
      << c.evidence;
  EXPECT_NE(c.evidence.find("compared through their ledger entries"), std::string::npos) << c.evidence;
  EXPECT_NE(c.evidence.find("20 tensors"), std::string::npos) << c.evidence;
  EXPECT_NE(c.evidence.find("worst relative error 0.00e+00"), std::string::npos) << c.evidence;
}

TEST(Differential, LedgerOffsetNamesStepAndEntry) {
  training::RunResult other = synthetic();
  other.steps[1].ledger[1].offset += 4;
  const CheckResult c = judge(synthetic(), run_of(other));
  ASSERT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("sim vs cuda: step 1, ledger entry 1: "), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("offset 16, count 64) vs "), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("offset 20, count 64)"), std::string::npos) << c.reason;
  // the other fields too: seed, count, generator, site
  for (auto tamper : {+[](training::LedgerEntry& e) { e.seed ^= 1; }, +[](training::LedgerEntry& e) { e.count = 65; },
                      +[](training::LedgerEntry& e) { e.generator = "default"; },
                      +[](training::LedgerEntry& e) { e.site.microbatch = 1; }}) {
    training::RunResult o = synthetic();
    tamper(o.steps[0].ledger[0]);
    EXPECT_EQ(judge(synthetic(), run_of(o)).disposition, Disposition::Incorrect);
  }
  training::RunResult fewer = synthetic();
  fewer.steps[0].ledger.pop_back();
  const CheckResult f = judge(synthetic(), run_of(fewer));
  EXPECT_EQ(f.disposition, Disposition::Incorrect);
  EXPECT_NE(f.reason.find("step 0: 2 ledger entries vs 1"), std::string::npos) << f.reason;
}

TEST(Differential, MaskBitsAreComparedWhenBothSendThem) {
  training::RunResult a = synthetic(), b = synthetic();
  for (auto* r : {&a, &b})
    for (auto& s : r->steps)
      for (auto& e : s.ledger) e.mask = {1, 0, 1, 1};
  EXPECT_NE(judge(a, run_of(b)).evidence.find("4 compared bit for bit"), std::string::npos);
  b.steps[0].ledger[0].mask[1] = 1;
  const CheckResult c = judge(a, run_of(b));
  EXPECT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("masks differ"), std::string::npos) << c.reason;
}

TEST(Differential, GradientBeyondToleranceIsIncorrect) {
  const DifferentialTolerance t = differential_tolerance(runtime::DType::F32);
  training::RunResult other = synthetic();
  // element 2 of microbatch 1's first gradient at step 0: 1.0 off by 10 x rtol
  other.steps[0].microbatches[1].grads[0][2] = static_cast<float>(1.0 + 10 * t.rtol);
  const CheckResult c = judge(synthetic(), run_of(other));
  ASSERT_EQ(c.disposition, Disposition::Incorrect);
  EXPECT_NE(c.reason.find("sim vs cuda: step 0, microbatch 1, grad block0.fc1.weight: max abs 1.00e-03, max rel 9.99e-04, "
                          "first at element 2"),
            std::string::npos)
      << c.reason;
  // a loss, a parameter, a NaN against a number
  training::RunResult loss = synthetic();
  loss.steps[1].microbatches[0].loss += 0.25f;
  EXPECT_NE(judge(synthetic(), run_of(loss)).reason.find("step 1, microbatch 0, loss"), std::string::npos);
  training::RunResult param = synthetic();
  param.steps[1].params[1][0] = NAN;
  const CheckResult p = judge(synthetic(), run_of(param));
  EXPECT_EQ(p.disposition, Disposition::Incorrect);
  EXPECT_NE(p.reason.find("step 1, param block0.fc1.bias: max abs inf"), std::string::npos) << p.reason;
}

TEST(Differential, WithinTolerancePassesAndReportsTheWorst) {
  const DifferentialTolerance t = differential_tolerance(runtime::DType::F32);
  training::RunResult other = synthetic();
  other.steps[1].grads[1][1] = 4.0f + 0x1p-13f;  // relative 2^-15 ~ 3.05e-5, under rtol
  other.steps[0].grads[0][3] = static_cast<float>(t.atol / 2);              // near zero: atol
  const CheckResult c = judge(synthetic(), run_of(other));
  ASSERT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_NE(c.evidence.find("worst relative error 3.05e-05 (step 1, grad block0.fc1.bias)"), std::string::npos) << c.evidence;
  // bf16 is judged by its own, wider tolerance: 1% passes there, not in fp32
  training::CaseSpec bf16 = fp32_case();
  bf16.model.dtype = runtime::DType::BF16;
  training::RunResult wide = synthetic();
  wide.steps[0].params[0][1] = 2.0f * 1.01f;
  EXPECT_EQ(judge(synthetic(), run_of(wide), bf16).disposition, Disposition::Passed);
  EXPECT_EQ(judge(synthetic(), run_of(wide)).disposition, Disposition::Incorrect);
  EXPECT_GT(differential_tolerance(runtime::DType::BF16).rel_l2, 0.0);
  EXPECT_EQ(t.rel_l2, 0.0);  // fp32: element by element
}

// bf16 is judged per tensor in relative L2: an element that cancels to near zero may differ by a
// large part of itself (a rounding flip upstream), a tensor moved by a wrong mask may not.
TEST(Differential, Bf16JudgesTensorsInRelativeL2) {
  training::CaseSpec bf16 = fp32_case();
  bf16.model.dtype = runtime::DType::BF16;
  ASSERT_DOUBLE_EQ(differential_tolerance(runtime::DType::BF16).rel_l2, 0.08);
  // microbatch 1's first gradient at step 0 is {0.25, -0.5, 1.0, 0.0} (norm 1.146): element 0 20%
  // off is relative L2 0.043 of the tensor, within; element by element it would not be
  training::RunResult near = synthetic();
  near.steps[0].microbatches[1].grads[0][0] = 0.3f;
  const CheckResult c = judge(synthetic(), run_of(near), bf16);
  ASSERT_EQ(c.disposition, Disposition::Passed) << c.reason;
  EXPECT_NE(c.evidence.find("within relative L2 8.00e-02 x (1 + step) (+ atol 9.77e-04 x sqrt(n)), worst relative error 4.32e-02 "
                            "(step 0, microbatch 1, grad block0.fc1.weight)"),
            std::string::npos)
      << c.evidence;
  EXPECT_EQ(judge(synthetic(), run_of(near)).disposition, Disposition::Incorrect);  // fp32
  // element 0 doubled: relative L2 0.204 (of the other run's norm), past the bound
  training::RunResult far = synthetic();
  far.steps[0].microbatches[1].grads[0][0] = 0.5f;
  const CheckResult d = judge(synthetic(), run_of(far), bf16);
  ASSERT_EQ(d.disposition, Disposition::Incorrect);
  EXPECT_NE(d.reason.find("sim vs cuda: step 0, microbatch 1, grad block0.fc1.weight: relative L2 2.04e-01 (bound 8.00e-02) over 4 values "
                          "(max abs 2.50e-01 at element 0: 0.25 vs 0.5)"),
            std::string::npos)
      << d.reason;
  // relative L2 0.110: past step 0's bound, within step 1's (each SGD step feeds differences back)
  training::RunResult at0 = synthetic(), at1 = synthetic();
  at0.steps[0].microbatches[1].grads[0][0] = 0.38f;
  at1.steps[1].microbatches[1].grads[0][0] = 0.38f;
  EXPECT_EQ(judge(synthetic(), run_of(at0), bf16).disposition, Disposition::Incorrect);
  EXPECT_EQ(judge(synthetic(), run_of(at1), bf16).disposition, Disposition::Passed);
}

TEST(Differential, DispositionAndFailureMustAgree) {
  training::RunFailure f;
  f.phase = "capture";
  f.pass = "forward";
  f.layer = "block0";
  f.microbatch = 0;
  f.step = 1;
  f.api = "cudaStreamSynchronize";
  f.error = "cudaErrorStreamCaptureUnsupported";
  training::RunResult failed = synthetic();
  failed.failure = f;
  // one failed, the other ran through
  const CheckResult one = judge(failed, run_of(synthetic()));
  EXPECT_EQ(one.disposition, Disposition::Incorrect);
  EXPECT_NE(one.reason.find("sim failed (graph capture failed"), std::string::npos) << one.reason;
  EXPECT_NE(one.reason.find("cuda ran through"), std::string::npos) << one.reason;
  // both failed, another error
  training::RunResult other = failed;
  other.failure->error = "cudaErrorStreamCaptureInvalidated";
  const CheckResult two = judge(failed, run_of(other));
  EXPECT_EQ(two.disposition, Disposition::Incorrect);
  EXPECT_NE(two.reason.find("different failures: "), std::string::npos) << two.reason;
  EXPECT_NE(two.reason.find("error cudaErrorStreamCaptureInvalidated"), std::string::npos) << two.reason;
  // both failed the same way (the message is backend text, not compared)
  training::RunResult same = failed;
  same.failure->message = "another backend's words";
  const CheckResult three = judge(failed, run_of(same));
  EXPECT_EQ(three.disposition, Disposition::Passed) << three.reason;
  EXPECT_NE(three.evidence.find("both failed the same way (phase capture, pass forward, layer block0"), std::string::npos)
      << three.evidence;
  // graphs captured differ
  training::RunResult graphs = synthetic();
  graphs.graphs = 3;
  EXPECT_EQ(judge(synthetic(), run_of(graphs)).disposition, Disposition::Incorrect);
}

TEST(Differential, OtherBackendUnavailableIsSkippedNeverPassed) {
  properties::Run none;
  none.skipped = "no usable CUDA device: built without CUDA";
  const CheckResult c = judge(synthetic(), none);
  EXPECT_EQ(c.disposition, Disposition::Skipped);
  EXPECT_NE(c.reason.find("no usable CUDA device"), std::string::npos) << c.reason;
  properties::Run oom;
  oom.out_of_memory = "cudaErrorMemoryAllocation";
  EXPECT_EQ(judge(synthetic(), oom).disposition, Disposition::Skipped);
  properties::Run crash;
  crash.crash = "illegal address";
  EXPECT_EQ(judge(synthetic(), crash).disposition, Disposition::Crashed);
  // nothing recorded on either side: nothing compared, skipped
  EXPECT_EQ(judge(training::RunResult{}, run_of(training::RunResult{})).disposition, Disposition::Skipped);
}

// evaluate() with --differential cuda where no GPU is usable: skipped with the reason; without
// --differential the property is not judged at all (off unless asked).
TEST(Differential, EvaluateOffUnlessAskedAndSkippedWithoutCuda) {
  training::CaseSpec spec;  // one block with dropout, checkpointed, graphed per layer
  spec.model.hidden = 8;
  spec.model.tokens = 4;
  models::LayerSpec l;
  l.kind = "block";
  l.heads = 2;
  l.ffn_hidden = 8;
  l.dropout = 0.1f;
  spec.model.layers.push_back(l);
  training::LayerFlags f;
  f.checkpoint = training::CheckpointGranularity::Full;
  spec.layers.push_back(f);
  spec.policy = training::CheckpointPolicy::GraphSafe;
  spec.executor = training::ExecutorKind::PerLayer;
  spec.warmup = 1;
  spec.replays = 2;
  CaseReport plain = evaluate(spec, {});
  for (const auto& c : plain.checks) EXPECT_NE(c.property, "differential");
  std::string why;
  {  // sim against itself: judged, passed
    OracleOptions o;
    o.differential = device::BackendChoice::Sim;
    CaseReport r = evaluate(spec, o);
    ASSERT_EQ(r.checks.back().property, "differential");
    EXPECT_EQ(r.checks.back().disposition, Disposition::Passed) << r.checks.back().reason;
    EXPECT_NE(r.checks.back().evidence.find("sim vs sim: both ran through; "), std::string::npos)
        << r.checks.back().evidence;
  }
  if (!device::cuda_usable(&why)) {
    OracleOptions o;
    o.properties = {"differential"};
    o.differential = device::BackendChoice::Cuda;
    CaseReport r = evaluate(spec, o);
    ASSERT_EQ(r.checks.size(), 1u);
    EXPECT_EQ(r.checks[0].disposition, Disposition::Skipped);
    EXPECT_EQ(r.checks[0].reason, "no usable CUDA device: " + why);
  }
}

// sim against sim: the same runtime on two fresh devices agrees, bit for bit (worst relative error 0).
RC_GTEST_PROP(Differential, SimAgainstSimPasses, ()) {
  GenConfig g;
  g.policy = training::CheckpointPolicy::GraphSafe;
  const auto spec = *gen_case(g);
  OracleOptions o;
  o.properties = {"differential"};
  o.differential = device::BackendChoice::Sim;
  CaseReport r = evaluate(spec, o);
  RC_ASSERT(r.checks.size() == 1u);
  const CheckResult& c = r.checks[0];
  RC_CLASSIFY(c.disposition == Disposition::Skipped, "skipped");
  RC_ASSERT(c.disposition == Disposition::Passed || c.disposition == Disposition::Skipped);
  if (c.disposition == Disposition::Passed) RC_ASSERT(c.evidence.find("worst relative error 0.00e+00") != std::string::npos);
}

}  // namespace
}  // namespace recap::properties
