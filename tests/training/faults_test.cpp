// Fault points (harness/runtime/faults.h): off unless a case names them, one table naming every
// fault, a case's faults travel in its JSON and are on only while its session lives.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "executor_test_util.h"
#include "harness/runtime/faults.h"
#include "harness/training/executor.h"
#include "harness/training/spec.h"

namespace recap::training {
namespace {

using runtime::Fault;
using runtime::fault_on;

TEST(Faults, OffByDefault) {
  EXPECT_EQ(runtime::g_fault_mask, 0u);
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
  EXPECT_EQ(runtime::g_fault_mask, 0u);
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
  EXPECT_EQ(runtime::g_fault_mask, 0u);
  ASSERT_TRUE(broken.ok());
  ASSERT_EQ(clean.steps.size(), broken.steps.size());
  auto loss = [](const RunResult& r, size_t step) { return r.steps[step].microbatches[0].loss; };
  const size_t last = clean.steps.size() - 1;
  EXPECT_NE(loss(clean, last), loss(broken, last));  // the stale replays saw old inputs
  EXPECT_EQ(loss(clean, s.warmup), loss(broken, s.warmup));  // the first replay refilled them
}

}  // namespace
}  // namespace recap::training
