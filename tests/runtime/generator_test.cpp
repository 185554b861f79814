// The Philox generator (generator.h): eager offsets, graph-safe capture and replay, host mode's
// baked offsets (the bug), state access during capture, shared vs per-capture device pairs,
// snapshot vs handle. Values drawn inside graphs are read back through philox_draw_kernel
// captured in the graph, and compared with the host's Philox at the offset each replay should use.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "harness/runtime/generator.h"
#include "harness/runtime/philox.h"
#include "harness/runtime/rng_kernels.h"
#include "tests/runtime/core_test_util.h"

namespace recap::runtime {
namespace {

using coretest::CoreTest;
using coretest::philox_values;
using GeneratorTest = CoreTest;

constexpr uint64_t kSeed = 42;

// The offset (multiple of 4, below 256) whose first values are `v`, or -1.
int64_t offset_of(const std::vector<uint32_t>& v, uint64_t seed) {
  for (uint64_t off = 0; off < 256; off += 4)
    if (philox_values(seed, off, v.size()) == v) return static_cast<int64_t>(off);
  return -1;
}

void expect_rng_error(const std::function<void()>& f, const std::string& prefix) {
  try {
    f();
    ADD_FAILURE() << "expected RngError starting with: " << prefix;
  } catch (const RngError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
  }
}

TEST(GeneratorNames, RoundTrip) {
  EXPECT_EQ(generator_mode_name(GeneratorMode::Host), "host");
  EXPECT_EQ(generator_mode_name(GeneratorMode::GraphSafe), "graph-safe");
  EXPECT_EQ(device_state_model_name(DeviceStateModel::Shared), "shared");
  EXPECT_EQ(device_state_model_name(DeviceStateModel::PerCapture), "per-capture");
  GeneratorMode m = GeneratorMode::Host;
  ASSERT_TRUE(generator_mode_from_name("graph-safe", &m));
  EXPECT_EQ(m, GeneratorMode::GraphSafe);
  EXPECT_FALSE(generator_mode_from_name("graphsafe", &m));
  DeviceStateModel d = DeviceStateModel::Shared;
  ASSERT_TRUE(device_state_model_from_name("per-capture", &d));
  EXPECT_EQ(d, DeviceStateModel::PerCapture);
  EXPECT_FALSE(device_state_model_from_name("percapture", &d));
}

// Eager draws get (seed, offset) by value; the offset advances by the count rounded up to 4.
TEST_P(GeneratorTest, EagerOffsetsAdvanceByRoundUp4) {
  Generator g(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  const uint64_t counts[] = {5, 4, 1, 0, 9};
  const uint64_t want_offsets[] = {0, 8, 12, 16, 16};  // 5->8, 4->4, 1->4, 0->0, 9->12
  for (size_t i = 0; i < 5; ++i) {
    PhiloxArgs a = g.draw(counts[i]);
    EXPECT_FALSE(a.graph_safe) << "draw " << i;  // not capturing: by value
    EXPECT_EQ(a.seed, kSeed);
    EXPECT_EQ(a.offset, want_offsets[i]) << "draw " << i;
  }
  EXPECT_EQ(g.host_offset(), 28u);  // 16 + 12
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{kSeed, 28}));
  g.manual_seed(7);
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{7, 0}));
}

// Graph-safe: the graph reads the device pair, which each replay's prologue refreshes from the
// host state; the host offset advances by the whole-graph increment at every replay.
TEST_P(GeneratorTest, GraphSafeReplaysDrawFreshOffsets) {
  Generator g(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  g.draw(8);  // eager: host offset 8, so a replay that wrongly used offset 0 would show
  uint32_t* out1 = buffer<uint32_t>(6);
  uint32_t* out2 = buffer<uint32_t>(4);
  PhiloxArgs a1, a2;
  g.capture_begin();  // as PyTorch: registration before cudaStreamBeginCapture
  device::GraphExec exec = capture([&] {
    a1 = g.draw(6);
    CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out1, a1, 6), stream()));
    a2 = g.draw(4);
    CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out2, a2, 4), stream()));
  });
  GraphRngState st = g.capture_end();
  EXPECT_TRUE(a1.graph_safe);
  EXPECT_EQ(a1.offset, 0u);  // intragraph offsets: 0, then 6 rounded up to 8
  EXPECT_EQ(a2.offset, 8u);
  EXPECT_TRUE(st.valid);
  EXPECT_EQ(st.increment, 12u);   // 8 + 4
  EXPECT_EQ(g.host_offset(), 8u);  // capture does not move the host offset
  EXPECT_EQ(a1.seed_ptr, st.seed_dev);
  EXPECT_EQ(a1.offset_ptr, st.offset_dev);

  std::set<std::vector<uint32_t>> distinct;
  for (uint64_t r = 0; r < 3; ++r) {
    uint64_t base = 8 + 12 * r;  // the host offset before replay r
    CORE_ASSERT_OK(g.replay_prologue(st, stream()));
    EXPECT_EQ(g.host_offset(), base + 12) << "replay " << r;
    CORE_ASSERT_OK(dev().graph_launch(exec, stream()));
    CORE_ASSERT_OK(dev().stream_synchronize(stream()));
    std::vector<uint32_t> v1 = read(out1, 6), v2 = read(out2, 4);
    EXPECT_EQ(v1, philox_values(kSeed, base, 6)) << "replay " << r;
    EXPECT_EQ(v2, philox_values(kSeed, base + 8, 4)) << "replay " << r;
    distinct.insert(v1);
  }
  EXPECT_EQ(distinct.size(), 3u);  // three replays, three different masks
  // The device pair holds what the last prologue wrote: (seed, host offset before replay 2).
  EXPECT_EQ(read(st.seed_dev, 1)[0], kSeed);
  EXPECT_EQ(read(st.offset_dev, 1)[0], 8u + 24u);
}

// Host mode under capture: the draw's (seed, offset) is baked into the kernel's arguments, so
// every replay draws the same numbers and the host offset moves only once (bug classes 4 and 5).
TEST_P(GeneratorTest, HostModeBakesOffsetIntoGraph) {
  Generator g(dev(), kSeed, GeneratorMode::Host, DeviceStateModel::Shared);
  g.draw(8);
  uint32_t* out = buffer<uint32_t>(6);
  PhiloxArgs a;
  g.capture_begin();
  device::GraphExec exec = capture([&] {
    a = g.draw(6);
    CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out, a, 6), stream()));
  });
  GraphRngState st = g.capture_end();
  EXPECT_FALSE(a.graph_safe);
  EXPECT_EQ(a.offset, 8u);
  EXPECT_FALSE(st.valid);           // nothing to refresh at replay
  EXPECT_EQ(g.host_offset(), 16u);  // advanced once, at capture
  for (int r = 0; r < 3; ++r) {
    CORE_ASSERT_OK(g.replay_prologue(st, stream()));  // a no-op
    EXPECT_EQ(g.host_offset(), 16u) << "replay " << r;
    CORE_ASSERT_OK(dev().graph_launch(exec, stream()));
    CORE_ASSERT_OK(dev().stream_synchronize(stream()));
    EXPECT_EQ(read(out, 6), philox_values(kSeed, 8, 6)) << "replay " << r;  // the same every time
  }
}

// A graph-safe generator that was never registered (capture_begin) also bakes (bug class 5).
TEST_P(GeneratorTest, UnregisteredGraphSafeGeneratorBakesToo) {
  Generator g(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::PerCapture);
  uint32_t* out = buffer<uint32_t>(4);
  PhiloxArgs a;
  device::GraphExec exec = capture([&] {
    a = g.draw(4);
    CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out, a, 4), stream()));
  });
  EXPECT_FALSE(a.graph_safe);
  for (int r = 0; r < 2; ++r) {
    CORE_ASSERT_OK(dev().graph_launch(exec, stream()));
    CORE_ASSERT_OK(dev().stream_synchronize(stream()));
    EXPECT_EQ(read(out, 4), philox_values(kSeed, 0, 4)) << "replay " << r;
  }
}

// Host mode: reading or setting the state during capture raises PyTorch's error.
TEST_P(GeneratorTest, HostModeStateAccessDuringCaptureThrows) {
  Generator g(dev(), kSeed, GeneratorMode::Host, DeviceStateModel::Shared);
  g.capture_begin();
  const std::string tail = " during CUDA graph capture.";
  expect_rng_error([&] { g.get_state(); }, "Cannot call CUDAGeneratorImpl::current_seed" + tail);
  expect_rng_error([&] { g.set_state(kSeed, 0); }, "Cannot call CUDAGeneratorImpl::set_current_seed" + tail);
  expect_rng_error([&] { g.restore(RngState{RngState::Kind::Snapshot, kSeed, 0, nullptr}); },
                   "Cannot call CUDAGeneratorImpl::set_current_seed" + tail);
  expect_rng_error([&] { g.snapshot(); }, "Cannot call CUDAGeneratorImpl::clone_state" + tail);
  EXPECT_NO_THROW(g.handle());  // graphsafe_get_state: an alias, allowed
  g.capture_end();
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{kSeed, 0}));  // allowed again
}

// Graph-safe (PyTorch 2.10+): get_state during capture is (seed, intragraph offset); set_state
// with the same seed moves the intragraph offset; a different seed is refused.
TEST_P(GeneratorTest, GraphSafeGetSetDuringCapture) {
  Generator g(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  g.draw(4);  // host offset 4
  g.capture_begin();
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{kSeed, 0}));
  PhiloxArgs first = g.draw(4);
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{kSeed, 4}));
  g.set_state(kSeed, 0);  // rewind within the graph: the next draw repeats `first`
  PhiloxArgs again = g.draw(4);
  EXPECT_EQ(again.offset, first.offset);
  expect_rng_error([&] { g.set_state(kSeed + 1, 0); }, "CUDAGeneratorImpl::set_current_seed can be called");
  expect_rng_error([&] { g.set_state(kSeed, 2); }, "offset must be a multiple of 4");
  expect_rng_error([&] { g.snapshot(); }, "Cannot call CUDAGeneratorImpl::clone_state");  // even graph-safe
  expect_rng_error([&] { g.capture_begin(); }, "Generator::capture_begin");  // no nesting
  EXPECT_EQ(g.host_offset(), 4u);  // untouched during capture
  GraphRngState st = g.capture_end();
  EXPECT_EQ(st.increment, 4u);  // the final intragraph offset
  expect_rng_error([&] { g.capture_end(); }, "Generator::capture_end");
}

struct Observed {
  std::vector<int64_t> offsets;  // the offset each replay's values came from, in replay order
  uint64_t host_offset = 0;
  bool same_pair = false;
};

// Graph A draws 4 values (increment 4). Graph B draws 4 values and then rewinds the
// intragraph offset with set_state (what a recompute that restores its state does), so its
// whole-graph increment is 0 although it reads the device pair. Replays: A, B, A, B.
Observed run_zero_increment_scenario(CoreTest& t, DeviceStateModel model, device::Stream s) {
  Observed o;
  device::Device& dev = t.dev();
  Generator g(dev, kSeed, GeneratorMode::GraphSafe, model);
  uint32_t* out_a = t.buffer<uint32_t>(4);
  uint32_t* out_b = t.buffer<uint32_t>(4);
  g.capture_begin();
  device::GraphExec exec_a = t.capture([&] {
    CORE_EXPECT_OK(dev.launch(philox_draw_kernel(out_a, g.draw(4), 4), s));
  });
  GraphRngState st_a = g.capture_end();
  g.capture_begin();
  device::GraphExec exec_b = t.capture([&] {
    auto saved = g.get_state();
    CORE_EXPECT_OK(dev.launch(philox_draw_kernel(out_b, g.draw(4), 4), s));
    g.set_state(saved.first, saved.second);
  });
  GraphRngState st_b = g.capture_end();
  EXPECT_EQ(st_a.increment, 4u);
  EXPECT_EQ(st_b.increment, 0u);
  o.same_pair = st_a.offset_dev == st_b.offset_dev;
  for (int r = 0; r < 4; ++r) {
    bool is_a = r % 2 == 0;
    EXPECT_TRUE(device::ok(g.replay_prologue(is_a ? st_a : st_b, s)));
    EXPECT_TRUE(device::ok(dev.graph_launch(is_a ? exec_a : exec_b, s)));
    EXPECT_TRUE(device::ok(dev.stream_synchronize(s)));
    o.offsets.push_back(offset_of(t.read(is_a ? out_a : out_b, 4), kSeed));
  }
  o.host_offset = g.host_offset();
  return o;
}

// Shared pair + skip-when-zero (PyTorch <= 2.11): B's prologue is skipped, so B reads the pair
// as A's last prologue left it and repeats A's draw: offsets A 0, B 0, A 4, B 4.
// Per-capture pairs (no skip): B's own pair gets the current host offset, which B's zero
// increment does not reserve, so the next A draws it again: A 0, B 4, A 4, B 8.
// Either way a zero-increment graph that draws reuses numbers; the models differ in which.
TEST_P(GeneratorTest, SharedVsPerCaptureWithZeroIncrementGraph) {
  Observed shared = run_zero_increment_scenario(*this, DeviceStateModel::Shared, stream());
  EXPECT_TRUE(shared.same_pair);
  EXPECT_EQ(shared.offsets, (std::vector<int64_t>{0, 0, 4, 4}));
  EXPECT_EQ(shared.host_offset, 8u);  // only A's two replays advanced it

  Observed per = run_zero_increment_scenario(*this, DeviceStateModel::PerCapture, stream());
  EXPECT_FALSE(per.same_pair);
  EXPECT_EQ(per.offsets, (std::vector<int64_t>{0, 4, 4, 8}));
  EXPECT_EQ(per.host_offset, 8u);
}

// Two graphs that both draw (non-zero increments), replayed alternately: both models give every
// replay its own offsets (A 0, C 4, A 12, C 16 with increments 4 and 8), and the per-capture
// model registers after cudaStreamBeginCapture (its pair is allocated under the Relaxed guard).
TEST_P(GeneratorTest, AlternatingGraphsWithIncrementsAreFreshInBothModels) {
  for (DeviceStateModel model : {DeviceStateModel::Shared, DeviceStateModel::PerCapture}) {
    SCOPED_TRACE(device_state_model_name(model));
    Generator g(dev(), kSeed, GeneratorMode::GraphSafe, model);
    uint32_t* out_a = buffer<uint32_t>(4);
    uint32_t* out_c = buffer<uint32_t>(4);
    GraphRngState st_a, st_c;
    device::GraphExec exec_a = capture([&] {
      g.capture_begin();  // during the capture: no device call may break it
      EXPECT_EQ(capture_status(), device::CaptureStatus::Active);
      CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out_a, g.draw(4), 4), stream()));
      st_a = g.capture_end();
    });
    device::GraphExec exec_c = capture([&] {
      g.capture_begin();
      CORE_EXPECT_OK(dev().launch(philox_draw_kernel(out_c, g.draw(8), 4), stream()));  // reserves 8
      st_c = g.capture_end();
    });
    std::vector<int64_t> got;
    for (int r = 0; r < 4; ++r) {
      bool is_a = r % 2 == 0;
      CORE_ASSERT_OK(g.replay_prologue(is_a ? st_a : st_c, stream()));
      CORE_ASSERT_OK(dev().graph_launch(is_a ? exec_a : exec_c, stream()));
      CORE_ASSERT_OK(dev().stream_synchronize(stream()));
      got.push_back(offset_of(read(is_a ? out_a : out_c, 4), kSeed));
    }
    EXPECT_EQ(got, (std::vector<int64_t>{0, 4, 12, 16}));
    EXPECT_EQ(g.host_offset(), 24u);
  }
}

// snapshot() is a copy: restoring it rewinds. handle() aliases the live state: restoring it after
// draws changes nothing, so a "recompute" would not repeat the forward's numbers (bug class 3).
TEST_P(GeneratorTest, SnapshotRestoresHandleDoesNotRewind) {
  Generator g(dev(), kSeed, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  g.draw(4);  // offset 4
  RngState snap = g.snapshot();
  RngState h = g.handle();
  EXPECT_EQ(snap.kind, RngState::Kind::Snapshot);
  EXPECT_EQ(snap.offset, 4u);
  EXPECT_EQ(h.kind, RngState::Kind::Handle);
  EXPECT_EQ(h.live, &g);
  PhiloxArgs forward = g.draw(8);  // offset 4 -> 12
  g.draw(4);                       // -> 16
  g.restore(snap);
  EXPECT_EQ(g.host_offset(), 4u);
  EXPECT_EQ(g.draw(8).offset, forward.offset);  // the recompute repeats the forward's draw

  g.restore(h);  // no rewind: still 12 after the draw above
  EXPECT_EQ(g.host_offset(), 12u);
  EXPECT_NE(g.draw(8).offset, forward.offset);

  // A handle of another generator: take its live state at restore time.
  Generator other(dev(), 99, GeneratorMode::GraphSafe, DeviceStateModel::Shared);
  other.draw(40);
  g.restore(other.handle());
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{99, 40}));
}

}  // namespace
}  // namespace recap::runtime
