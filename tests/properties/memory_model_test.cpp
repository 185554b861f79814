// Issue 23's remaining blind spots: the memory model's predictions (by hand, then against what the
// runtime holds), and each new fault point caught by the check built for it, with its non-vacuity
// twin (the same case without the fault passes that check).
#include <gtest/gtest.h>

#include "harness/training/executor.h"
#include "properties/memory_model.h"
#include "properties/oracles.h"

namespace recap::properties {
namespace {

using training::CaseSpec;
using training::CheckpointGranularity;
using training::CheckpointPolicy;
using training::CheckpointStyle;
using training::ExecutorKind;

CaseSpec stack(const std::vector<std::string>& kinds, ExecutorKind ex, CheckpointPolicy policy = CheckpointPolicy::GraphSafe) {
  CaseSpec s;
  s.model.hidden = 8;
  s.model.tokens = 4;
  for (const auto& k : kinds) {
    models::LayerSpec l;
    l.kind = k;
    l.heads = 2;
    l.ffn_hidden = 16;
    l.dropout = k == "linear" || k == "layernorm" ? 0.0f : 0.1f;
    s.model.layers.push_back(l);
    s.layers.push_back(training::LayerFlags{});
  }
  s.policy = policy;
  s.executor = ex;
  s.warmup = 1;
  s.replays = 3;
  return s;
}

const CheckResult& check(const CaseReport& r, const std::string& p) {
  for (const auto& c : r.checks)
    if (c.property == p) return c;
  throw std::runtime_error("no check " + p);
}

CaseReport judged(const CaseSpec& s, const std::string& property) {
  OracleOptions o;
  o.properties = {property};
  return evaluate(s, o);
}

// Worked by hand from models/layers.cpp (fp32, 4 tokens x 8 hidden: a [4, 8] tensor is 128 B).
TEST(MemoryModel, PredictsByHand) {
  // One graphed linear layer: it saves its static input (not an activation) and its graph keeps
  // its output; checkpointed (graph-safe) it adds the 16-byte RNG pair.
  CaseSpec s = stack({"linear"}, ExecutorKind::PerLayer);
  EXPECT_EQ(predicted_held_in_graphs(s), (std::map<std::string, int64_t>{{"linear0 mb0", 128}}));
  s.layers[0].checkpoint = CheckpointGranularity::Full;
  EXPECT_EQ(predicted_held_in_graphs(s).at("linear0 mb0"), 128 + 16);
  // skip bypasses a reentrant checkpoint while per-layer graphs capture: as without it.
  s.policy = CheckpointPolicy::Skip;
  EXPECT_EQ(predicted_held_in_graphs(s).at("linear0 mb0"), 128);
  // A layernorm keeps rstd and mean (fp32, one per token: 16 B each) besides its output.
  CaseSpec n = stack({"layernorm"}, ExecutorKind::PerLayer);
  EXPECT_EQ(predicted_held_in_graphs(n).at("layernorm0 mb0"), 128 + 16 + 16);
  // Full iteration, two linears: the first's output is saved by the second; the second's is dropped.
  CaseSpec f = stack({"linear", "linear"}, ExecutorKind::FullIteration);
  f.microbatches = 2;
  EXPECT_EQ(predicted_held_in_graphs(f), (std::map<std::string, int64_t>{{"mb0", 128}, {"mb1", 128}}));
  // Without-output style, the first checkpointed: its consumer's reference is discarded after the
  // consumer's forward, so only the pair is left.
  f.style = CheckpointStyle::WithoutOutput;
  f.layers[0].checkpoint = CheckpointGranularity::Full;
  EXPECT_EQ(predicted_held_in_graphs(f).at("mb0"), 16);
  // Eager: nothing inside graphs.
  EXPECT_TRUE(predicted_held_in_graphs(stack({"block"}, ExecutorKind::Eager)).empty());
}

// The capture's figures, worked by hand (fp32, [4, 8] = 128 B, so every tensor here takes one
// 512-byte block; a 4-byte loss or a 16-byte pair too).
TEST(MemoryModel, PredictsTheCaptureByHand) {
  // One graphed linear: its forward graph allocates the output (an activation), its backward graph
  // the input gradient (workspace); nothing is freed, so two blocks.
  CaseSpec s = stack({"linear"}, ExecutorKind::PerLayer);
  std::optional<CaptureMemory> m = predicted_capture_memory(s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->activations_peak, 128);
  EXPECT_EQ(m->pool_reserved, 1024);
  EXPECT_EQ(m->pool_used, 1024);
  EXPECT_EQ(m->pools, 1);
  EXPECT_EQ(m->allocations, 2);
  // Without a shared pool each graph has a pool of its own: the same blocks, two pools.
  s.shared_pool = false;
  EXPECT_EQ(predicted_capture_memory(s)->pools, 2);
  EXPECT_EQ(predicted_capture_memory(s)->pool_reserved, 1024);
  // Checkpointed (graph-safe): the forward keeps the pair and the graph's output; the backward's
  // recompute allocates the output again (peak 16 + 128 + 128 = 272 B) and drops it at once, and
  // the input gradient takes the block it freed: three blocks, not four.
  s.shared_pool = true;
  s.layers[0].checkpoint = CheckpointGranularity::Full;
  m = predicted_capture_memory(s);
  EXPECT_EQ(m->activations_peak, 272);
  EXPECT_EQ(m->pool_reserved, 1536);
  EXPECT_EQ(m->pool_used, 1024);  // the output and the input gradient; the pair went with its backward
  EXPECT_EQ(m->allocations, 4);
  // Full iteration, two linears: y0, y1, the loss and its gradient (four blocks, peak y0 + y1); the
  // backward's two input gradients take the blocks of y1 and y0; only the loss is left.
  CaseSpec f = stack({"linear", "linear"}, ExecutorKind::FullIteration);
  m = predicted_capture_memory(f);
  EXPECT_EQ(m->activations_peak, 256);
  EXPECT_EQ(m->pool_reserved, 2048);
  EXPECT_EQ(m->pool_used, 512);
  EXPECT_EQ(m->allocations, 6);
  // Eager, or per-layer graphs of no layer: no capture.
  EXPECT_FALSE(predicted_capture_memory(stack({"block"}, ExecutorKind::Eager)));
  CaseSpec none = stack({"linear"}, ExecutorKind::PerLayer);
  none.layers[0].graphed = false;
  EXPECT_FALSE(predicted_capture_memory(none));
}

// The runtime holds exactly what the model predicts, across kinds, checkpoint granularities,
// styles and executors (the campaigns check every generated case; these are the hand cases).
TEST(MemoryModel, TheRuntimeHoldsWhatItPredicts) {
  std::string err;
  std::vector<CaseSpec> cases;
  for (ExecutorKind ex : {ExecutorKind::PerLayer, ExecutorKind::FullIteration}) {
    CaseSpec a = stack({"block", "mlp", "attention", "swiglu", "dropout", "rmsnorm", "gelu"}, ex);
    a.layers[0].checkpoint = CheckpointGranularity::Selective;
    a.layers[0].modules = {"attn_core", "norm"};
    a.layers[1].checkpoint = CheckpointGranularity::Full;
    a.layers[2].checkpoint = CheckpointGranularity::Selective;
    a.layers[2].modules = {"attn_core"};
    a.layers[4].checkpoint = CheckpointGranularity::Full;
    a.microbatches = 2;
    a.model.dtype = models::DType::BF16;
    cases.push_back(a);
    CaseSpec w = stack({"mlp", "linear", "block", "dropout", "layernorm"}, ex);
    w.style = CheckpointStyle::WithoutOutput;
    for (size_t i : {0u, 2u, 3u}) w.layers[i].checkpoint = CheckpointGranularity::Full;
    cases.push_back(w);
  }
  for (const CaseSpec& s : cases) {
    auto dev = device::make_device(device::BackendChoice::Sim, {}, &err);
    ASSERT_TRUE(dev) << err;
    training::RunResult r = training::run_case(*dev, s);
    ASSERT_TRUE(r.ok()) << r.failure->line();
    ASSERT_TRUE(r.captured && r.held_in_graphs);
    EXPECT_EQ(*r.held_in_graphs, predicted_held_in_graphs(s)) << training::executor_name(s.executor);
    const std::optional<CaptureMemory> m = predicted_capture_memory(s);
    ASSERT_TRUE(m);
    EXPECT_EQ(r.capture_memory.activations_peak(), m->activations_peak) << training::executor_name(s.executor);
    EXPECT_EQ(r.capture_memory.allocator.pool_peak_reserved_bytes, m->pool_reserved) << training::executor_name(s.executor);
    EXPECT_EQ(r.capture_memory.allocator.pool_used_bytes, m->pool_used) << training::executor_name(s.executor);
    CaseReport c = judged(s, "memory");
    EXPECT_EQ(check(c, "memory").disposition, Disposition::Passed) << check(c, "memory").reason;
    EXPECT_NE(check(c, "memory").evidence.find("as the memory model predicts"), std::string::npos) << check(c, "memory").evidence;
    EXPECT_NE(check(c, "memory").evidence.find("B reserved"), std::string::npos) << check(c, "memory").evidence;
  }
}

// recompute-saves-nothing: graph-safe checkpoints keep everything while a stream captures. Every
// bitwise comparison agrees; the model does not.
TEST(BlindSpots, RecomputeSavingNothingIsCaughtByTheMemoryModel) {
  CaseSpec s = stack({"mlp", "linear"}, ExecutorKind::FullIteration);
  s.layers[0].checkpoint = CheckpointGranularity::Full;
  CaseReport clean = evaluate(s, {});
  EXPECT_EQ(clean.disposition, Disposition::Passed) << clean.first_failure();
  s.faults = {"recompute-saves-nothing"};
  CaseReport r = evaluate(s, {});
  EXPECT_EQ(check(r, "memory").disposition, Disposition::Incorrect);
  EXPECT_NE(check(r, "memory").reason.find("activations held by graphs differ from the memory model: mb0 keeps"),
            std::string::npos)
      << check(r, "memory").reason;
  EXPECT_EQ(check(r, "eager_vs_graphed").disposition, Disposition::Passed);
  EXPECT_EQ(check(r, "recompute_on_off").disposition, Disposition::Passed);
}

// graph-pool-leak: every replay takes a buffer from the graph pool and keeps it.
TEST(BlindSpots, AGraphPoolGrowingAcrossReplaysIsCaught) {
  for (ExecutorKind ex : {ExecutorKind::PerLayer, ExecutorKind::FullIteration}) {
    CaseSpec s = stack({"linear"}, ex);
    CaseReport clean = judged(s, "memory");
    EXPECT_EQ(check(clean, "memory").disposition, Disposition::Passed) << check(clean, "memory").reason;
    EXPECT_NE(check(clean, "memory").evidence.find("B after each of 3 replays"), std::string::npos)
        << check(clean, "memory").evidence;
    s.faults = {"graph-pool-leak"};
    CaseReport r = judged(s, "memory");
    EXPECT_EQ(check(r, "memory").disposition, Disposition::Incorrect);
    EXPECT_NE(check(r, "memory").reason.find("graph pools grew across replays of the same graphs (a leak)"),
              std::string::npos)
        << check(r, "memory").reason;
  }
}

// pool-no-reuse: a graph pool never hands a freed block to a later tensor. What the graphs hold,
// their peak and every replay agree (the pool does not grow across replays); only the exact
// prediction of the pool's bytes sees it. Non-vacuity: without the fault the same check passes.
TEST(BlindSpots, APoolThatNeverReusesABlockIsCaughtByThePoolModel) {
  for (ExecutorKind ex : {ExecutorKind::PerLayer, ExecutorKind::FullIteration}) {
    CaseSpec s = stack({"linear", "linear"}, ex);
    s.layers[0].checkpoint = CheckpointGranularity::Full;
    CaseReport clean = judged(s, "memory");
    EXPECT_EQ(check(clean, "memory").disposition, Disposition::Passed) << check(clean, "memory").reason;
    s.faults = {"pool-no-reuse"};
    CaseReport r = evaluate(s, {});
    const CheckResult& c = check(r, "memory");
    EXPECT_EQ(c.disposition, Disposition::Incorrect);
    EXPECT_NE(c.reason.find("graph-pool bytes reserved by the capture differs from the memory model"), std::string::npos)
        << c.reason;
    EXPECT_EQ(c.reason.find("grew across replays"), std::string::npos) << c.reason;
    EXPECT_EQ(c.reason.find("activations held by graphs differ"), std::string::npos) << c.reason;
    EXPECT_EQ(check(r, "eager_vs_graphed").disposition, Disposition::Passed);
  }
}

// without-output-not-rebound: the consumer keeps reading the storage discarded at the forward.
// It still holds the forward's values, so results agree; what was read does not.
TEST(BlindSpots, AConsumerLeftOnTheDiscardedStorageIsCaughtByObservation) {
  for (ExecutorKind ex : {ExecutorKind::Eager, ExecutorKind::FullIteration}) {
    CaseSpec s = stack({"mlp", "linear"}, ex);
    s.style = CheckpointStyle::WithoutOutput;
    s.layers[0].checkpoint = CheckpointGranularity::Full;
    CaseReport clean = judged(s, "recompute_on_off");
    EXPECT_EQ(check(clean, "recompute_on_off").disposition, Disposition::Passed) << check(clean, "recompute_on_off").reason;
    EXPECT_NE(check(clean, "recompute_on_off").evidence.find("without-output rebindings observed"), std::string::npos)
        << check(clean, "recompute_on_off").evidence;
    s.faults = {"without-output-not-rebound"};
    CaseReport r = evaluate(s, {});
    const CheckResult& c = check(r, "recompute_on_off");
    EXPECT_EQ(c.disposition, Disposition::Incorrect);
    EXPECT_NE(c.reason.find("without-output rebinding: step 0, microbatch 0: mlp0's consumer reads storage"), std::string::npos)
        << c.reason;
    EXPECT_FALSE(c.divergence.has_value());  // no value differs
  }
}

}  // namespace
}  // namespace recap::properties
