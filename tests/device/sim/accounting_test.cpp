// Pins live and peak bytes per category, in total, and the pool/graph-memory counters at every
// checkpoint of the shared accounting script, exactly; with and without stream-order exploration.
#include "tests/device/sim/accounting_script.h"
#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace script = accounting_script;

void expect_matches(const script::Run& run) {
  for (const script::Call& c : run.calls)
    EXPECT_EQ(error_name(c.status), error_name(script::expected_status(c.label))) << c.label;

  std::vector<script::Expected> want = script::expected();
  ASSERT_EQ(run.checkpoints.size(), want.size());
  constexpr int64_t M = script::kMiB;
  for (size_t i = 0; i < want.size(); ++i) {
    const script::Expected& w = want[i];
    const MemoryStats& got = run.checkpoints[i].stats;
    SCOPED_TRACE("checkpoint " + w.name);
    ASSERT_EQ(run.checkpoints[i].name, w.name);
    for (int c = 0; c < kNumCategories; ++c) {
      std::string cat = category_name(static_cast<MemCategory>(c));
      EXPECT_EQ(got.by_category[c].live_bytes, w.live[c] * M) << cat << " live";
      EXPECT_EQ(got.by_category[c].peak_bytes, w.peak[c] * M) << cat << " peak";
    }
    EXPECT_EQ(got.live_bytes, w.total_live * M) << "total live";
    EXPECT_EQ(got.peak_bytes, w.total_peak * M) << "total peak";
    EXPECT_EQ(got.pool_used_bytes, w.pool_used * M) << "pool used";
    EXPECT_EQ(got.pool_peak_bytes, w.pool_peak * M) << "pool peak";
    EXPECT_EQ(got.graph_mem_used_bytes, w.graph_used * M) << "graph memory used";
    EXPECT_EQ(got.graph_mem_peak_bytes, w.graph_peak * M) << "graph memory peak";
  }
}

TEST(SimAccounting, ScriptInProgramOrder) {
  auto dev = make_sim();
  expect_matches(script::run(*dev));
}

TEST(SimAccounting, ScriptUnderExploration) {
  // Every checkpoint follows a synchronization, so the figures do not depend on the order.
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto dev = make_sim(seed, /*race_check=*/true);
    expect_matches(script::run(*dev));
    EXPECT_TRUE(sim::races(*dev).empty());
  }
}

TEST(SimAccounting, MemGetInfoFollowsLiveBytes) {
  auto dev = make_sim();
  Stream s = new_stream(*dev);
  void* a = nullptr;
  ASSERT_OK(dev->stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev->malloc_async(&a, 4 * script::kMiB, s, MemCategory::Activations));
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s, &g));
  GraphExec e;
  ASSERT_OK(dev->graph_instantiate(&e, g));
  size_t free_bytes = 0, total = 0;
  ASSERT_OK(dev->mem_get_info(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total);
  ASSERT_OK(dev->graph_launch(e, s));
  ASSERT_OK(dev->stream_synchronize(s));
  ASSERT_OK(dev->mem_get_info(&free_bytes, &total));
  EXPECT_EQ(total - free_bytes, static_cast<size_t>(4 * script::kMiB));
}

}  // namespace
}  // namespace recap::device::simtest
