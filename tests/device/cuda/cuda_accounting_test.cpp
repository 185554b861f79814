// Accounting on the GPU: the shared accounting script (tests/device/sim/accounting_script.h) runs on the
// cuda backend and on sim. The ledger figures (live and peak bytes, per category and in total) and
// every call's result must be the same on both and as the script expects; the CUDA allocator's own
// counters, which show its reservation granularity, must be consistent with them.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness/device/device.h"
#include "tests/device/sim/accounting_script.h"

namespace recap::device {
namespace {

namespace script = accounting_script;
constexpr int64_t M = script::kMiB;

class CudaAccountingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_usable(&why)) GTEST_SKIP() << why;
    std::string error;
    auto gpu = make_device(BackendChoice::Cuda, DeviceOptions{}, &error);
    ASSERT_NE(gpu, nullptr) << error;
    cuda_ = script::run(*gpu);
    auto sim = make_device(BackendChoice::Sim, DeviceOptions{}, &error);
    ASSERT_NE(sim, nullptr) << error;
    sim_ = script::run(*sim);
  }
  script::Run cuda_;
  script::Run sim_;
};

TEST_F(CudaAccountingTest, EveryCallReturnsTheSameAsOnSim) {
  ASSERT_EQ(cuda_.calls.size(), sim_.calls.size());
  for (size_t i = 0; i < cuda_.calls.size(); ++i) {
    const auto& c = cuda_.calls[i];
    ASSERT_EQ(c.label, sim_.calls[i].label);
    EXPECT_EQ(error_name(c.status), error_name(sim_.calls[i].status)) << c.label;
    EXPECT_EQ(error_name(c.status), error_name(script::expected_status(c.label))) << c.label;
  }
}

TEST_F(CudaAccountingTest, LedgerFiguresEqualSim) {
  const auto want = script::expected();
  ASSERT_EQ(cuda_.checkpoints.size(), want.size());
  ASSERT_EQ(sim_.checkpoints.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const MemoryStats& got = cuda_.checkpoints[i].stats;
    const MemoryStats& sim = sim_.checkpoints[i].stats;
    SCOPED_TRACE("checkpoint " + want[i].name);
    ASSERT_EQ(cuda_.checkpoints[i].name, want[i].name);
    for (int c = 0; c < kNumCategories; ++c) {
      std::string cat = category_name(static_cast<MemCategory>(c));
      EXPECT_EQ(got.by_category[c].live_bytes, sim.by_category[c].live_bytes) << cat << " live";
      EXPECT_EQ(got.by_category[c].peak_bytes, sim.by_category[c].peak_bytes) << cat << " peak";
      EXPECT_EQ(got.by_category[c].allocations, sim.by_category[c].allocations) << cat << " allocations";
      EXPECT_EQ(got.by_category[c].live_bytes, want[i].live[c] * M) << cat << " live";
      EXPECT_EQ(got.by_category[c].peak_bytes, want[i].peak[c] * M) << cat << " peak";
    }
    EXPECT_EQ(got.live_bytes, sim.live_bytes) << "total live";
    EXPECT_EQ(got.peak_bytes, sim.peak_bytes) << "total peak";
    EXPECT_EQ(got.live_bytes, want[i].total_live * M) << "total live";
    EXPECT_EQ(got.peak_bytes, want[i].total_peak * M) << "total peak";
  }
}

TEST_F(CudaAccountingTest, AllocatorCountersAreConsistent) {
  const auto want = script::expected();
  ASSERT_EQ(cuda_.checkpoints.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const MemoryStats& st = cuda_.checkpoints[i].stats;
    const auto& w = want[i];
    SCOPED_TRACE("checkpoint " + w.name);
    // Every counter was read from the allocator (none left at -1).
    ASSERT_GE(st.pool_used_bytes, 0);
    ASSERT_GE(st.pool_peak_bytes, 0);
    ASSERT_GE(st.graph_mem_used_bytes, 0);
    ASSERT_GE(st.graph_mem_peak_bytes, 0);
    // The pool holds at least the live stream-ordered bytes; graph memory at least the live graph
    // allocations (it keeps its reservation after a free, until trimmed).
    EXPECT_GE(st.pool_used_bytes, w.pool_used * M);
    EXPECT_GE(st.pool_peak_bytes, st.pool_used_bytes);
    EXPECT_GE(st.graph_mem_used_bytes, w.graph_used * M);
    EXPECT_GE(st.graph_mem_peak_bytes, st.graph_mem_used_bytes);
    if (w.graph_used > 0) {
      EXPECT_GT(st.graph_mem_used_bytes, 0);
    }
    // For the log: the allocator's figures next to the ledger's.
    std::printf("%-24s ledger live %4lld MiB | pool used %4lld peak %4lld MiB (sim %lld, %lld) | graph used %4lld peak %4lld MiB (sim %lld, %lld)\n",
                w.name.c_str(), static_cast<long long>(st.live_bytes / M),
                static_cast<long long>(st.pool_used_bytes / M), static_cast<long long>(st.pool_peak_bytes / M),
                static_cast<long long>(w.pool_used), static_cast<long long>(w.pool_peak),
                static_cast<long long>(st.graph_mem_used_bytes / M), static_cast<long long>(st.graph_mem_peak_bytes / M),
                static_cast<long long>(w.graph_used), static_cast<long long>(w.graph_peak));
  }
  EXPECT_EQ(cuda_.checkpoints.back().stats.pool_used_bytes, 0);  // teardown: nothing left in the pool
}

}  // namespace
}  // namespace recap::device
