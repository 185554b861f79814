// Executors on sim: the acceptance (eager, per-layer graphs and full-iteration graph
// bitwise equal at every step and microbatch, with and without recompute), the naive policy's
// capture failure and the reentrant refusal, memory of skip vs graph-safe inside graphs, hygiene
// after a failed capture, replay order.
#include <gtest/gtest.h>

#include <cstdio>

#include "executor_test_util.h"
#include "harness/training/executor.h"
#include "harness/runtime/phase.h"

namespace recap::training {
namespace {

using testing::acceptance_spec;
using testing::first_difference;

std::unique_ptr<device::Device> sim() {
  std::string err;
  auto d = device::make_device(device::BackendChoice::Sim, {}, &err);
  EXPECT_TRUE(d) << err;
  return d;
}

RunResult run(const CaseSpec& s) {
  auto dev = sim();
  return run_case(*dev, s);
}

void expect_clean(const RunResult& r) {
  ASSERT_TRUE(r.ok()) << r.failure->line();
  EXPECT_EQ(static_cast<int>(r.steps.size()), r.spec.steps());
  EXPECT_EQ(r.recompute_mismatches, 0u) << r.ledger_summary;
  EXPECT_EQ(r.reused_masks, 0u) << r.ledger_summary;
  EXPECT_EQ(verdict(r).disposition, "passed") << verdict(r).reason;
}

int64_t act_peak(const MemorySnapshot& m) { return m.activations_peak(); }

// ---- the acceptance ---------------------------------------------------------------------------

struct OrderCase {
  std::vector<int> order;
};

class Acceptance : public ::testing::TestWithParam<std::vector<int>> {};

TEST_P(Acceptance, ExecutorsAndRecomputeAreBitwiseEqual) {
  auto spec = [&](ExecutorKind e, bool ckpt) {
    CaseSpec s = acceptance_spec(e, ckpt);
    s.order = GetParam();
    return s;
  };
  RunResult eager = run(spec(ExecutorKind::Eager, true));
  RunResult eager_plain = run(spec(ExecutorKind::Eager, false));
  RunResult per_layer = run(spec(ExecutorKind::PerLayer, true));
  RunResult full = run(spec(ExecutorKind::FullIteration, true));
  RunResult per_layer_plain = run(spec(ExecutorKind::PerLayer, false));
  for (const RunResult* r : {&eager, &eager_plain, &per_layer, &full, &per_layer_plain}) expect_clean(*r);
  testing::expect_non_vacuous(eager);

  EXPECT_EQ(first_difference(eager, eager_plain), "") << "recompute on vs off (eager)";
  EXPECT_EQ(first_difference(eager, per_layer), "") << "eager vs per-layer graphs";
  EXPECT_EQ(first_difference(eager, full), "") << "eager vs full-iteration graph";
  EXPECT_EQ(first_difference(eager, per_layer_plain), "") << "eager vs per-layer graphs without recompute";

  EXPECT_EQ(per_layer.graphs, 16);  // 4 layers x 2 microbatches x (forward, backward)
  EXPECT_EQ(full.graphs, 1);
  ASSERT_EQ(per_layer.steps.size(), 8u);
  EXPECT_EQ(per_layer.steps[2].phase, "warmup");
  EXPECT_EQ(per_layer.steps[3].phase, "replay");
  // Every step recomputed: 3 dropouts x 4 blocks x 2 microbatches, forward and recompute.
  for (const auto& st : per_layer.steps) {
    LedgerCounts lc = count_ledger(st.ledger);
    EXPECT_EQ(lc.forward, 24) << "step " << st.step;
    EXPECT_EQ(lc.recompute, 24) << "step " << st.step;
    EXPECT_EQ(lc.mismatches, 0) << "step " << st.step;
  }
  EXPECT_TRUE(phase_flags_clear());
}

INSTANTIATE_TEST_SUITE_P(Orders, Acceptance,
                         ::testing::Values(std::vector<int>{1, 1, -1, -1}, std::vector<int>{1, -1, 1, -1}),
                         [](const auto& info) { return info.param[1] == 1 ? std::string("AllForwardsFirst") : std::string("Interleaved"); });

TEST(Executors, VariantsStayBitwiseEqual) {
  RunResult reference = run(acceptance_spec(ExecutorKind::Eager, false));
  expect_clean(reference);
  struct Variant {
    const char* name;
    std::function<void(CaseSpec&)> edit;
  };
  std::vector<Variant> variants = {
      {"a pool per graph", [](CaseSpec& s) { s.shared_pool = false; }},
      {"per-capture device state", [](CaseSpec& s) { s.device_state = DeviceStateModel::PerCapture; }},
      {"no warmup", [](CaseSpec& s) { s.warmup = 0; }},
      {"layers 1 and 2 eager", [](CaseSpec& s) { s.layers[1].graphed = s.layers[2].graphed = false; }},
      {"selective attn_core+mlp", [](CaseSpec& s) {
         for (auto& l : s.layers) {
           l.checkpoint = CheckpointGranularity::Selective;
           l.modules = {"attn_core", "mlp"};
         }
       }},
      {"selective norm, mixed", [](CaseSpec& s) {
         s.layers[0].checkpoint = CheckpointGranularity::Selective;
         s.layers[0].modules = {"norm"};
         s.layers[3].checkpoint = CheckpointGranularity::None;
       }},
      {"without-output style", [](CaseSpec& s) { s.style = CheckpointStyle::WithoutOutput; }},
      {"skip policy, all graphed", [](CaseSpec& s) { s.policy = CheckpointPolicy::Skip; }},
  };
  for (ExecutorKind e : {ExecutorKind::Eager, ExecutorKind::PerLayer, ExecutorKind::FullIteration}) {
    for (const auto& v : variants) {
      CaseSpec s = acceptance_spec(e, true);
      s.replays = 3;
      v.edit(s);
      if (e == ExecutorKind::FullIteration && s.policy == CheckpointPolicy::Skip) continue;  // no flags there
      if (e == ExecutorKind::Eager && s.policy == CheckpointPolicy::Skip) continue;  // naive eagerly: bug class 3
      RunResult r = run(s);
      SCOPED_TRACE(std::string(v.name) + " / " + executor_name(e));
      expect_clean(r);
      RunResult ref = reference;
      ref.steps.resize(r.steps.size());
      EXPECT_EQ(first_difference(ref, r), "");
    }
  }
}

TEST(Executors, Bf16StaysBitwiseEqual) {
  CaseSpec e = acceptance_spec(ExecutorKind::Eager, false);
  e.model.dtype = DType::BF16;
  e.replays = 2;
  RunResult ref = run(e);
  expect_clean(ref);
  for (ExecutorKind k : {ExecutorKind::PerLayer, ExecutorKind::FullIteration}) {
    CaseSpec s = acceptance_spec(k, true);
    s.model.dtype = DType::BF16;
    s.replays = 2;
    RunResult r = run(s);
    expect_clean(r);
    EXPECT_EQ(first_difference(ref, r), "") << executor_name(k);
  }
}

// ---- the naive policy -------------------------------------------------------------------------

TEST(NaivePolicy, FailsInGraphCreationNamingCheckpointPhaseAndError) {
  for (ExecutorKind e : {ExecutorKind::PerLayer, ExecutorKind::FullIteration}) {
    CaseSpec s = acceptance_spec(e, true);
    s.policy = CheckpointPolicy::Naive;
    s.generator = GeneratorMode::Host;  // torch.cuda.get_rng_state: a synchronizing read
    RunResult r = run(s);
    SCOPED_TRACE(executor_name(e));
    ASSERT_FALSE(r.ok());
    const RunFailure& f = *r.failure;
    EXPECT_EQ(f.phase, "capture");
    EXPECT_EQ(f.pass, "forward");
    EXPECT_EQ(f.layer, "block0");
    EXPECT_EQ(f.microbatch, 0);
    EXPECT_EQ(f.api, "cudaStreamSynchronize");
    EXPECT_EQ(f.error, "cudaErrorStreamCaptureUnsupported");
    std::string line = f.line();
    EXPECT_NE(line.find("checkpoint block0"), std::string::npos) << line;
    EXPECT_NE(line.find("during graph capture"), std::string::npos) << line;
    EXPECT_NE(line.find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
    EXPECT_EQ(r.steps.size(), 3u) << "the warmup steps ran";
    EXPECT_FALSE(r.captured);
    EXPECT_EQ(verdict(r).disposition, "failed");
    std::printf("    [%s] %s\n", executor_name(e).c_str(), line.c_str());
  }
}

TEST(NaivePolicy, GradOfInputsWarmupGivesTheReentrantRefusal) {
  for (int warmup : {3, 0}) {
    CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, true);
    s.policy = CheckpointPolicy::Naive;
    s.warmup_backward = WarmupBackward::GradOfInputs;
    s.warmup = warmup;
    RunResult r = run(s);
    SCOPED_TRACE("warmup " + std::to_string(warmup));
    ASSERT_FALSE(r.ok());
    const RunFailure& f = *r.failure;
    EXPECT_EQ(f.phase, warmup > 0 ? "warmup" : "capture");
    EXPECT_EQ(f.pass, "backward");
    EXPECT_EQ(f.layer, "block3");  // the first backward
    EXPECT_EQ(f.error, "RuntimeError");
    EXPECT_NE(f.message.find(kCheckpointGradRefusal), std::string::npos) << f.message;
    EXPECT_TRUE(phase_flags_clear());
    std::printf("    %s\n", f.line().c_str());
  }
  // Skip bypasses the checkpoint while warming up and capturing (PR #3919): no refusal.
  CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, true);
  s.policy = CheckpointPolicy::Skip;
  s.warmup_backward = WarmupBackward::GradOfInputs;
  expect_clean(run(s));
}

TEST(NaivePolicy, GraphSafeGeneratorGivesWrongMasksWithoutError) {
  // Bug class 3: handles, not snapshots: no error, but recompute draws other masks.
  CaseSpec s = acceptance_spec(ExecutorKind::Eager, true);
  s.policy = CheckpointPolicy::Naive;
  s.replays = 1;
  RunResult r = run(s);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r.recompute_mismatches, 0u);
  EXPECT_EQ(verdict(r).disposition, "incorrect");
  CaseSpec p = acceptance_spec(ExecutorKind::Eager, false);
  p.replays = 1;
  EXPECT_NE(first_difference(run(p), r), "");
}

TEST(SkipPolicy, DoesNotProtectFullIterationGraphs) {
  // Full-iteration graphs set neither phase flag, so `skip` checkpoints as naive inside the
  // capture: with a graph-safe generator the handles make the recompute draw other masks.
  CaseSpec s = acceptance_spec(ExecutorKind::FullIteration, true);
  s.policy = CheckpointPolicy::Skip;
  s.warmup = 0;
  s.replays = 2;
  RunResult r = run(s);
  ASSERT_TRUE(r.ok()) << r.failure->line();
  EXPECT_GT(r.recompute_mismatches, 0u);
  s.generator = GeneratorMode::Host;
  RunResult h = run(s);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.failure->error, "cudaErrorStreamCaptureUnsupported");
}

TEST(Generator, HostModeGraphsReplayTheSameMasks) {
  // Bug classes 4/5: a host generator bakes (seed, offset) into the graphs.
  CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, true);
  s.generator = GeneratorMode::Host;
  s.replays = 3;
  RunResult r = run(s);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r.reused_masks, 0u);
  EXPECT_EQ(verdict(r).disposition, "incorrect");
  // The first replay still equals eager step `warmup` (the states were restored after capture).
  CaseSpec e = acceptance_spec(ExecutorKind::Eager, true);
  e.generator = GeneratorMode::Host;
  e.replays = 3;
  RunResult eager = run(e);
  RunResult head = r, ehead = eager;
  head.steps.resize(4);
  ehead.steps.resize(4);
  EXPECT_EQ(first_difference(ehead, head), "");
  EXPECT_NE(first_difference(eager, r), "");
}

// ---- memory -----------------------------------------------------------------------------------

TEST(Memory, SkipLosesTheSavingInsideGraphsGraphSafeKeepsIt) {
  auto spec = [](CheckpointPolicy p, bool ckpt) {
    CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, ckpt);
    s.policy = p;
    s.replays = 2;
    return s;
  };
  RunResult none = run(spec(CheckpointPolicy::GraphSafe, false));
  RunResult skip = run(spec(CheckpointPolicy::Skip, true));
  RunResult safe = run(spec(CheckpointPolicy::GraphSafe, true));
  for (const RunResult* r : {&none, &skip, &safe}) ASSERT_TRUE(r->captured);
  const int64_t a_none = act_peak(none.capture_memory), a_skip = act_peak(skip.capture_memory),
                a_safe = act_peak(safe.capture_memory);
  const int64_t p_none = none.capture_memory.allocator.pool_peak_reserved_bytes;
  const int64_t p_skip = skip.capture_memory.allocator.pool_peak_reserved_bytes;
  const int64_t p_safe = safe.capture_memory.allocator.pool_peak_reserved_bytes;
  std::printf("    activations peak during capture: none %lld, skip %lld, graph-safe %lld bytes\n",
              static_cast<long long>(a_none), static_cast<long long>(a_skip), static_cast<long long>(a_safe));
  std::printf("    graph pool reserved: none %lld, skip %lld, graph-safe %lld bytes\n", static_cast<long long>(p_none),
              static_cast<long long>(p_skip), static_cast<long long>(p_safe));
  EXPECT_EQ(a_skip, a_none) << "skip: same activation memory inside graphs as no checkpointing";
  EXPECT_EQ(p_skip, p_none);
  EXPECT_LT(a_safe * 2, a_none) << "graph-safe: recompute saves memory inside graphs";
  EXPECT_LT(p_safe, p_none);
  // And eagerly (warmup steps), graph-safe saves too while skip does not.
  EXPECT_EQ(act_peak(skip.steps[0].memory), act_peak(none.steps[0].memory));
  EXPECT_LT(act_peak(safe.steps[0].memory) * 2, act_peak(none.steps[0].memory));
}

TEST(Memory, WithoutOutputDropsTheOutputItsConsumerSaved) {
  // [layernorm (checkpointed), mlp, layernorm (checkpointed), mlp]: the mlp's fc1 saves the norm's
  // output; without-output drops it until the mlp's backward.
  auto spec = [](CheckpointStyle style, bool ckpt, ExecutorKind e) {
    CaseSpec s = acceptance_spec(e, false);
    s.model.layers.clear();
    s.layers.clear();
    for (int i = 0; i < 2; ++i) {
      models::LayerSpec n;
      n.kind = "layernorm";
      models::LayerSpec m;
      m.kind = "mlp";
      m.ffn_hidden = 32;
      m.dropout = 0.1f;
      s.model.layers.push_back(n);
      s.model.layers.push_back(m);
      LayerFlags fn;
      fn.checkpoint = ckpt ? CheckpointGranularity::Full : CheckpointGranularity::None;
      s.layers.push_back(fn);
      s.layers.push_back(LayerFlags{});
    }
    s.style = style;
    s.replays = 2;
    return s;
  };
  RunResult plain = run(spec(CheckpointStyle::Reentrant, false, ExecutorKind::Eager));
  RunResult reentrant = run(spec(CheckpointStyle::Reentrant, true, ExecutorKind::Eager));
  RunResult without = run(spec(CheckpointStyle::WithoutOutput, true, ExecutorKind::Eager));
  for (const RunResult* r : {&plain, &reentrant, &without}) expect_clean(*r);
  EXPECT_EQ(first_difference(plain, without), "");
  EXPECT_EQ(first_difference(plain, reentrant), "");
  int64_t a_plain = act_peak(plain.steps[0].memory), a_re = act_peak(reentrant.steps[0].memory),
          a_wo = act_peak(without.steps[0].memory);
  std::printf("    eager activations peak: plain %lld, reentrant %lld, without-output %lld bytes\n",
              static_cast<long long>(a_plain), static_cast<long long>(a_re), static_cast<long long>(a_wo));
  EXPECT_LT(a_wo, a_re);
  for (ExecutorKind e : {ExecutorKind::PerLayer, ExecutorKind::FullIteration}) {
    RunResult g = run(spec(CheckpointStyle::WithoutOutput, true, e));
    expect_clean(g);
    EXPECT_EQ(first_difference(plain, g), "") << executor_name(e);
    if (e == ExecutorKind::FullIteration) {  // one graph: the protocol runs inside it
      RunResult gr = run(spec(CheckpointStyle::Reentrant, true, e));
      EXPECT_LT(act_peak(g.capture_memory), act_peak(gr.capture_memory));
    }
  }
}

// ---- hygiene and order ------------------------------------------------------------------------

TEST(Hygiene, AfterAFailedCaptureFlagsAreClearAndAnEagerStepWorks) {
  CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, true);
  s.policy = CheckpointPolicy::Naive;
  s.generator = GeneratorMode::Host;
  auto dev = sim();
  Session session(*dev, s);
  RunResult r = session.run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure->phase, "capture");
  EXPECT_TRUE(phase_flags_clear());
  Trainer& t = session.trainer();
  for (device::Stream st : {t.main, t.side, t.capture}) {
    device::CaptureStatus cs;
    ASSERT_EQ(dev->stream_is_capturing(st, &cs), device::Status::Success);
    EXPECT_EQ(cs, device::CaptureStatus::None);
  }
  EXPECT_FALSE(t.rng.current().capturing());
  for (Checkpoint* c : t.checkpoints) EXPECT_EQ(c->pending(), 0u);

  // The next step, eagerly, equals the eager run's step 3 bit for bit (and recomputes).
  StepRecord after = session.eager_step(3);
  CaseSpec e = s;
  e.executor = ExecutorKind::Eager;
  RunResult eager = run(e);
  ASSERT_TRUE(eager.ok());
  RunResult a = eager, b = eager;
  a.steps = {eager.steps[3]};
  b.steps = {after};
  EXPECT_EQ(first_difference(a, b), "");
  EXPECT_EQ(count_ledger(after.ledger).recompute, 24);
}

TEST(ReplayOrder, OutOfRecordOrderIsRefused) {
  CaseSpec s = acceptance_spec(ExecutorKind::PerLayer, true);
  s.replays = 1;
  auto dev = sim();
  Session session(*dev, s);
  RunResult r = session.run();
  ASSERT_TRUE(r.ok());
  // The record order starts again with the forward graph of block0, microbatch 0.
  try {
    replay_one_graph(session.executor(), 3, 0, false);
    FAIL() << "an out-of-order replay was accepted";
  } catch (const ReplayOrderError& e) {
    EXPECT_EQ(std::string(e.what()),
              "graph replay out of record order: expected the forward graph of block0, microbatch 0 (graph 1 of 16), "
              "got the backward graph of block3, microbatch 0");
  }
  EXPECT_NO_THROW(replay_one_graph(session.executor(), 0, 0, true));
  EXPECT_THROW(replay_one_graph(session.executor(), 0, 1, true), ReplayOrderError);  // block1 mb0 is next
  dev->device_synchronize();
}

}  // namespace
}  // namespace recap::training

namespace recap::training {
namespace {

TEST(Report, JsonCarriesStepsDigestsAndFailure) {
  CaseSpec e = testing::acceptance_spec(ExecutorKind::Eager, true);
  e.replays = 1;
  CaseSpec g = e;
  g.executor = ExecutorKind::PerLayer;
  std::string err;
  auto dev = device::make_device(device::BackendChoice::Sim, {}, &err);
  Json je = run_result_to_json(run_case(*dev, e));
  Json jg = run_result_to_json(run_case(*dev, g));
  EXPECT_EQ(je["schema"], "recap.run/1");
  EXPECT_EQ(je["disposition"], "passed");
  ASSERT_EQ(je["steps"].size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(je["steps"][s]["grad_digest"], jg["steps"][s]["grad_digest"]);
    EXPECT_EQ(je["steps"][s]["param_digest"], jg["steps"][s]["param_digest"]);
    EXPECT_EQ(je["steps"][s]["losses"], jg["steps"][s]["losses"]);
  }
  EXPECT_EQ(jg["steps"][3]["phase"], "replay");
  EXPECT_EQ(jg["capture"]["graphs"], 16);
  EXPECT_TRUE(jg["failure"].is_null());
  EXPECT_GT(jg["capture"]["memory"]["categories"]["activations"]["tensors_peak"].get<int64_t>(), 0);

  CaseSpec n = g;
  n.policy = CheckpointPolicy::Naive;
  n.generator = GeneratorMode::Host;
  Json jn = run_result_to_json(run_case(*dev, n));
  EXPECT_EQ(jn["disposition"], "failed");
  EXPECT_EQ(jn["failure"]["api"], "cudaStreamSynchronize");
  EXPECT_EQ(jn["failure"]["error"], "cudaErrorStreamCaptureUnsupported");
  EXPECT_EQ(jn["failure"]["layer"], "block0");
  EXPECT_EQ(jn["failure"]["phase"], "capture");
  // The spec inside reads back.
  CaseSpec back;
  EXPECT_EQ(case_from_json(jn["spec"], &back), "");
}

}  // namespace
}  // namespace recap::training
