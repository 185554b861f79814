// Fault points (harness/runtime/faults.h): off unless a case names them, one table naming every
// fault, a case's faults travel in its JSON and are on only while its session lives.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "executor_test_util.h"
#include "harness/runtime/faults.h"
#include "harness/training/executor.h"
#include "harness/training/spec.h"

namespace recap::training {
namespace {

using runtime::Fault;
using runtime::fault_on;

TEST(Faults, OffByDefault) {
  EXPECT_EQ(runtime::g_fault_mask.load(), 0u);
  for (const auto& e : runtime::kFaultNames) EXPECT_FALSE(fault_on(e.value)) << e.name;
}

TEST(Faults, OneTableNamesEveryFaultOnce) {
  std::set<std::string> names;
  for (const auto& e : runtime::kFaultNames) names.insert(e.name);
  const size_t count = static_cast<size_t>(runtime::kLastFault) + 1;
  EXPECT_EQ(std::size(runtime::kFaultNames), count);
  EXPECT_EQ(names.size(), count);
  for (const auto& e : runtime::kFaultNames) EXPECT_EQ(runtime::fault_name(e.value), e.name);
}

// layer-segfault kills the process: only a worker (which allows it) turns it on.
TEST(Faults, ProcessKillingFaultOnlyInAWorker) {
  {
    runtime::FaultScope on({"layer-segfault", "pool-order"});
    EXPECT_FALSE(fault_on(Fault::LayerSegfault));
    EXPECT_TRUE(fault_on(Fault::PoolOrder));
  }
  runtime::g_process_killing_faults_allowed = true;
  {
    runtime::FaultScope on({"layer-segfault"});
    EXPECT_TRUE(fault_on(Fault::LayerSegfault));
  }
  runtime::g_process_killing_faults_allowed = false;
  EXPECT_EQ(runtime::process_killing_fault({"pool-order", "layer-segfault"}), "layer-segfault");
  EXPECT_EQ(runtime::process_killing_fault({"pool-order"}), "");
}

TEST(Faults, ScopeTurnsOnItsFaultsAndRestores) {
  {
    runtime::FaultScope on({"rng-offset-baked", "alloc-in-capture"});
    EXPECT_TRUE(fault_on(Fault::RngOffsetBaked));
    EXPECT_TRUE(fault_on(Fault::AllocInCapture));
    EXPECT_FALSE(fault_on(Fault::PhaseFlagLeak));
  }
  EXPECT_EQ(runtime::g_fault_mask.load(), 0u);
  uint64_t mask = 0;
  EXPECT_EQ(runtime::fault_mask_of({"nope"}, &mask).rfind("unknown fault 'nope' (known: rng-snapshot-is-handle", 0), 0u);
}

TEST(Faults, ACaseCarriesItsFaultsInItsJson) {
  CaseSpec s = testing::acceptance_spec(ExecutorKind::Eager);
  EXPECT_FALSE(case_to_json(s).contains("faults"));  // files without faults are unchanged
  s.faults = {"static-input-stale"};
  CaseSpec back;
  ASSERT_EQ(case_from_json(case_to_json(s), &back), "");
  EXPECT_EQ(back.faults, s.faults);
  Json j = case_to_json(s);
  j["faults"] = {"static-input-stale", "bogus"};
  EXPECT_EQ(case_from_json(j, &back).rfind("faults[1]: unknown fault 'bogus'", 0), 0u);
  j["faults"] = "static-input-stale";
  EXPECT_EQ(case_from_json(j, &back).rfind("faults: expected an array", 0), 0u);
}

// The mask is the process's (recap tradeoff --judge-jobs makes Sessions on several threads): a
// scope nested on one thread puts the outer one's faults back, and another thread's scope waits
// until this thread's has ended, so neither sees the other's faults.
TEST(Faults, ScopesNestOnOneThreadAndWaitAcrossThreads) {
  {
    runtime::FaultScope outer({"rng-offset-baked"});
    {
      runtime::FaultScope inner({"pool-order"});
      EXPECT_TRUE(fault_on(Fault::PoolOrder));
      EXPECT_FALSE(fault_on(Fault::RngOffsetBaked));
    }
    EXPECT_TRUE(fault_on(Fault::RngOffsetBaked));
    EXPECT_FALSE(fault_on(Fault::PoolOrder));
  }
  std::atomic<bool> started{false}, entered{false}, theirs_seen{false}, mine_seen{true};
  std::thread other;
  {
    runtime::FaultScope mine({"rng-offset-baked"});
    other = std::thread([&] {
      started = true;
      runtime::FaultScope theirs({"pool-order"});
      entered = true;
      theirs_seen = fault_on(Fault::PoolOrder);
      mine_seen = fault_on(Fault::RngOffsetBaked);
    });
    while (!started) std::this_thread::yield();
    // room for the other thread's scope to start: without the lock it would, and set its mask
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(entered);
    EXPECT_TRUE(fault_on(Fault::RngOffsetBaked));
    EXPECT_FALSE(fault_on(Fault::PoolOrder));
  }
  other.join();
  EXPECT_TRUE(entered);
  EXPECT_TRUE(theirs_seen);
  EXPECT_FALSE(mine_seen);
  EXPECT_EQ(runtime::g_fault_mask.load(), 0u);
}

// Non-vacuity: the fault point is reached and changes the run, and only while its session lives.
TEST(Faults, OnOnlyWhileItsSessionRuns) {
  std::string err;
  auto dev = device::make_device(device::BackendChoice::Sim, {}, &err);
  ASSERT_TRUE(dev) << err;
  CaseSpec s = testing::acceptance_spec(ExecutorKind::PerLayer);
  const RunResult clean = run_case(*dev, s);
  ASSERT_TRUE(clean.ok());
  s.faults = {"static-input-stale"};
  const RunResult broken = run_case(*dev, s);
  EXPECT_EQ(runtime::g_fault_mask.load(), 0u);
  ASSERT_TRUE(broken.ok());
  ASSERT_EQ(clean.steps.size(), broken.steps.size());
  auto loss = [](const RunResult& r, size_t step) { return r.steps[step].microbatches[0].loss; };
  const size_t last = clean.steps.size() - 1;
  EXPECT_NE(loss(clean, last), loss(broken, last));  // the stale replays saw old inputs
  EXPECT_EQ(loss(clean, s.warmup), loss(broken, s.warmup));  // the first replay refilled them
}

// Issue 23's faults change only what the run observed, never a result: the observations
// (RunResult::held_in_graphs, StepRecord::graph_pool_bytes and ::rebindings) are what the oracles
// judge, so each must move with its fault and stay put without it.
TEST(Faults, Issue23FaultsMoveOnlyTheirObservations) {
  std::string err;
  auto dev = device::make_device(device::BackendChoice::Sim, {}, &err);
  ASSERT_TRUE(dev) << err;
  auto run = [&](CaseSpec s, const char* fault) {
    if (fault != nullptr) s.faults = {fault};
    RunResult r = run_case(*dev, s);
    EXPECT_TRUE(r.ok()) << (r.failure ? r.failure->line() : "");
    return r;
  };
  // graph-pool-leak: what tensors hold in the pool grows by one taken buffer (8 x 16 fp32, one
  // 512-byte block) every replay step; the pool itself only once its free blocks are used up.
  CaseSpec full = testing::acceptance_spec(ExecutorKind::FullIteration);
  const RunResult clean = run(full, nullptr), leak = run(full, "graph-pool-leak");
  for (size_t k = full.warmup; k < clean.steps.size(); ++k) {
    EXPECT_EQ(*clean.steps[k].graph_pool_bytes, *clean.steps[full.warmup].graph_pool_bytes);
    EXPECT_EQ(*clean.steps[k].graph_pool_used_bytes, *clean.steps[full.warmup].graph_pool_used_bytes);
    EXPECT_EQ(*leak.steps[k].graph_pool_used_bytes - *clean.steps[k].graph_pool_used_bytes,
              static_cast<int64_t>(k - full.warmup + 1) * 512);
    EXPECT_GE(*leak.steps[k].graph_pool_bytes, *clean.steps[k].graph_pool_bytes);
  }
  EXPECT_EQ(testing::first_difference(clean, leak), "");
  // recompute-saves-nothing: each captured forward keeps more (a block's activations, not its
  // input and RNG pair); results are the same.
  const RunResult plain = run(full, "recompute-saves-nothing");
  for (const auto& [unit, bytes] : *clean.held_in_graphs) EXPECT_GT(plain.held_in_graphs->at(unit), bytes) << unit;
  EXPECT_EQ(testing::first_difference(clean, plain), "");
  // pool-no-reuse: the capture's pools reserve more (no freed block is handed out again), while
  // what each forward keeps, the activations peak and the pools across replays stay put.
  const RunResult grown = run(full, "pool-no-reuse");
  EXPECT_GT(grown.capture_memory.allocator.pool_peak_reserved_bytes, clean.capture_memory.allocator.pool_peak_reserved_bytes);
  EXPECT_EQ(grown.capture_memory.activations_peak(), clean.capture_memory.activations_peak());
  EXPECT_EQ(*grown.held_in_graphs, *clean.held_in_graphs);
  for (size_t k = full.warmup; k < grown.steps.size(); ++k)
    EXPECT_EQ(*grown.steps[k].graph_pool_bytes, *grown.steps[full.warmup].graph_pool_bytes);
  EXPECT_EQ(testing::first_difference(clean, grown), "");
  // without-output-not-rebound: the consumer reads the storage discarded at the forward.
  CaseSpec wo = testing::acceptance_spec(ExecutorKind::Eager);
  wo.style = CheckpointStyle::WithoutOutput;
  wo.layers[1].checkpoint = CheckpointGranularity::None;  // block0's output is discarded, block1 consumes it
  const RunResult rebound = run(wo, nullptr), stale = run(wo, "without-output-not-rebound");
  for (const RunResult* r : {&rebound, &stale})
    for (const StepRecord& st : r->steps) ASSERT_EQ(st.rebindings.size(), 2u);  // one per microbatch
  for (const Rebinding& b : rebound.steps[0].rebindings) {
    EXPECT_EQ(b.layer, "block0");
    EXPECT_TRUE(b.rebound);
    EXPECT_EQ(b.read, std::vector<uint64_t>(static_cast<size_t>(b.holes), b.recomputed));
    EXPECT_EQ(b.misplaced, 0);
  }
  for (const Rebinding& b : stale.steps[0].rebindings)
    for (uint64_t id : b.read) EXPECT_NE(id, b.recomputed);
  EXPECT_EQ(testing::first_difference(rebound, stale), "");
}

// grad-buffer-empty: the gradient buffers are never zeroed before step 0. sim hands out zeroed
// memory, so the run is bit for bit the clean one; only the device's init check (the memory
// oracle's "initialized" demand) sees the first accumulation read memory nothing wrote.
TEST(Faults, GradBufferEmptyIsSeenOnlyByTheInitCheck) {
  CaseSpec s = testing::acceptance_spec(ExecutorKind::PerLayer);
  auto run = [&](const char* fault) {
    device::DeviceOptions o;
    o.init_check = true;
    std::string err;
    auto dev = device::make_device(device::BackendChoice::Sim, o, &err);
    EXPECT_TRUE(dev) << err;
    CaseSpec c = s;
    if (fault != nullptr) c.faults = {fault};
    return run_case_checked(*dev, c);
  };
  const CheckedRun clean = run(nullptr), empty = run("grad-buffer-empty");
  ASSERT_TRUE(clean.result.ok());
  ASSERT_TRUE(empty.result.ok());
  EXPECT_EQ(testing::first_difference(clean.result, empty.result), "");
  ASSERT_TRUE(clean.init && empty.init);
  EXPECT_GT(clean.init->launches, 0u);
  EXPECT_TRUE(clean.init->uninitialized.empty()) << clean.init->uninitialized.front();
  ASSERT_FALSE(empty.init->uninitialized.empty());
  EXPECT_NE(empty.init->uninitialized[0].find("(gradients)"), std::string::npos) << empty.init->uninitialized[0];
}

}  // namespace
}  // namespace recap::training
