// The RNG states tracker (rng_tracker.h): named states, fork, save/restore, capture registration.
#include <gtest/gtest.h>

#include "harness/runtime/rng_kernels.h"
#include "harness/runtime/rng_tracker.h"
#include "tests/runtime/core_test_util.h"

namespace recap::runtime {
namespace {

using coretest::CoreTest;
using TrackerTest = CoreTest;

constexpr uint64_t kSeed = 1234;

TEST_P(TrackerTest, NamedStatesWithMegatronSeeds) {
  RngTracker t(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  EXPECT_EQ(t.names(), (std::vector<std::string>{"default", "model-parallel-rng"}));
  EXPECT_EQ(t.get(kDefaultRngName).seed(), kSeed);
  EXPECT_EQ(t.get(kModelParallelRngName).seed(), kSeed + 2718);  // Megatron's tensor-parallel offset
  EXPECT_EQ(&t.current(), &t.get("default"));
  EXPECT_EQ(t.get("default").mode(), GeneratorMode::GraphSafe);
  EXPECT_EQ(t.get("default").device_state_model(), DeviceStateModel::Shared);
  EXPECT_THROW(t.get("expert-parallel-rng"), RngError);
  t.add("expert-parallel-rng", 5);
  EXPECT_EQ(t.get("expert-parallel-rng").seed(), 5u);
  EXPECT_THROW(t.add("default", 9), RngError);
  EXPECT_EQ(t.get("default").seed(), kSeed);  // the refused add changed nothing
}

TEST_P(TrackerTest, ForkSwitchesAndRestores) {
  RngTracker t(dev(), kSeed, GeneratorMode::Host, DeviceStateModel::Shared);
  Generator& def = t.get(kDefaultRngName);
  Generator& mp = t.get(kModelParallelRngName);
  {
    RngTracker::Fork f(t, kModelParallelRngName);
    EXPECT_EQ(&t.current(), &mp);
    EXPECT_EQ(t.current_name(), "model-parallel-rng");
    PhiloxArgs a = t.current().draw(10);
    EXPECT_EQ(a.seed, kSeed + 2718);  // the draw came from the forked state
    {
      RngTracker::Fork inner(t, kDefaultRngName);  // nested forks restore in order
      EXPECT_EQ(&t.current(), &def);
    }
    EXPECT_EQ(&t.current(), &mp);
  }
  EXPECT_EQ(&t.current(), &def);
  EXPECT_EQ(mp.host_offset(), 12u);  // 10 -> 12
  EXPECT_EQ(def.host_offset(), 0u);  // untouched by the fork's draw
  EXPECT_THROW(RngTracker::Fork(t, "nope"), RngError);
  EXPECT_EQ(&t.current(), &def);  // a refused fork changes nothing
}

// save(snapshots) then restore rewinds every generator; save(handles) rewinds none.
TEST_P(TrackerTest, SaveRestoreSnapshotsRewindsAllHandlesNone) {
  RngTracker t(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  t.get("default").draw(4);
  auto snaps = t.save(/*as_handles=*/false);
  auto handles = t.save(/*as_handles=*/true);
  ASSERT_EQ(snaps.size(), 2u);
  EXPECT_EQ(snaps.at("default").kind, RngState::Kind::Snapshot);
  EXPECT_EQ(handles.at("default").kind, RngState::Kind::Handle);
  t.get("default").draw(8);             // 4 -> 12
  t.get("model-parallel-rng").draw(16);  // 0 -> 16
  t.restore(handles);
  EXPECT_EQ(t.get("default").host_offset(), 12u);
  EXPECT_EQ(t.get("model-parallel-rng").host_offset(), 16u);
  t.restore(snaps);
  EXPECT_EQ(t.get("default").host_offset(), 4u);
  EXPECT_EQ(t.get("model-parallel-rng").host_offset(), 0u);
  EXPECT_THROW(t.restore({{"nope", snaps.at("default")}}), RngError);
}

// Capture registration covers every state; snapshots cannot be saved during capture.
TEST_P(TrackerTest, CaptureRegistersAllGenerators) {
  RngTracker t(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::PerCapture);
  uint32_t* out = buffer<uint32_t>(8);
  std::map<std::string, GraphRngState> st;
  t.capture_begin();
  EXPECT_TRUE(t.get("default").capturing());
  EXPECT_TRUE(t.get("model-parallel-rng").capturing());
  EXPECT_THROW(t.save(false), RngError);    // clone_state during capture
  EXPECT_NO_THROW(t.save(true));            // handles are allowed
  device::GraphExec exec = capture([&] {
    CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out, t.current().draw(4), 4), stream()));
    RngTracker::Fork f(t, kModelParallelRngName);
    CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out + 4, t.current().draw(4), 4), stream()));
    t.current().draw(4);  // another 4 reserved, so the increments differ: 4 and 8
  });
  st = t.capture_end();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st.at("default").increment, 4u);
  EXPECT_EQ(st.at("model-parallel-rng").increment, 8u);
  EXPECT_FALSE(t.get("default").capturing());
  for (int r = 0; r < 2; ++r) {
    CORE_ASSERT_OK(t.replay_prologue(st, stream()));
    CORE_ASSERT_OK(dev().graph_launch(exec, stream()));
    CORE_ASSERT_OK(dev().stream_synchronize(stream()));
    std::vector<uint32_t> v = read(out, 8);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(v[i], philox_value(kSeed, 4 * r, i)) << "replay " << r;
      EXPECT_EQ(v[4 + i], philox_value(kSeed + 2718, 8 * r, i)) << "replay " << r;
    }
  }
  EXPECT_EQ(t.get("default").host_offset(), 8u);              // 2 replays x 4
  EXPECT_EQ(t.get("model-parallel-rng").host_offset(), 16u);  // 2 replays x 8
}

}  // namespace
}  // namespace recap::runtime
