// The sim's init check (harness/device/sim/initcheck.h): reads of device memory that no kernel, copy
// or memset wrote since it was allocated, eagerly and in graph replays; and the byte-range set it
// keeps.
#include <gtest/gtest.h>

#include <vector>

#include "harness/device/kernels.h"
#include "harness/device/sim/initcheck.h"
#include "tests/device/sim/sim_test_util.h"

namespace recap::device {
namespace {
using namespace simtest;
namespace k = kernels;

std::unique_ptr<Device> make_checked(uint64_t explore_seed = 0) {
  DeviceOptions o;
  o.explore_seed = explore_seed;
  o.init_check = true;
  return sim::make_sim_device(o);
}

std::vector<sim::UninitReport> uninit(Device& dev) {
  std::optional<sim::InitCheckSummary> s = sim::init_check_summary(dev);
  return s ? s->uninitialized : std::vector<sim::UninitReport>{};
}

uint32_t* raw_buffer(Device& dev, size_t n) {  // allocated, never written
  void* p = nullptr;
  EXPECT_STATUS(Status::Success, dev.malloc(&p, n * sizeof(uint32_t), MemCategory::Activations));
  return static_cast<uint32_t*>(p);
}

TEST(SimByteRanges, AddMergesAndRemoveSplits) {
  sim::ByteRanges r;
  r.add(10, 20);
  r.add(30, 40);
  EXPECT_EQ(r.covered(0, 100), 20u);
  r.add(20, 30);  // touching ranges merge
  EXPECT_EQ(r.covered(0, 100), 30u);
  EXPECT_EQ(r.first_not_in(10, 100), 40u);
  r.remove(15, 35);
  EXPECT_EQ(r.covered(0, 100), 10u);
  EXPECT_EQ(r.covered(10, 15), 5u);
  EXPECT_EQ(r.covered(35, 40), 5u);
  EXPECT_EQ(r.first_not_in(10, 100), 15u);
  EXPECT_EQ(r.first_not_in(0, 100), 0u);
  r.add(0, 100);
  EXPECT_EQ(r.covered(0, 100), 100u);
  r.remove(0, 100);
  EXPECT_EQ(r.covered(0, 100), 0u);
}

TEST(SimInitCheck, ReadOfMemoryNothingWroteIsReported) {
  auto dev = make_checked();
  Stream s = new_stream(*dev);
  uint32_t* src = raw_buffer(*dev, 8);
  uint32_t* dst = new_buffer(*dev, 8);
  ASSERT_OK(dev->launch(k::copy_u32(dst, src, 8), s));
  ASSERT_OK(dev->launch(k::copy_u32(dst, src, 8), s));
  ASSERT_OK(dev->stream_synchronize(s));
  std::vector<sim::UninitReport> r = uninit(*dev);
  ASSERT_EQ(r.size(), 1u);  // one reader and allocation, two launches
  EXPECT_EQ(r[0].reader.substr(0, 15), "kernel copy_u32");
  EXPECT_EQ(r[0].allocation, "a 32-byte cudaMalloc block (activations)");
  EXPECT_EQ(r[0].bytes, 64u);
  EXPECT_EQ(r[0].reads, 2u);
  EXPECT_EQ(r[0].offset, 0u);
}

TEST(SimInitCheck, WrittenMemoryIsNotReported) {
  auto dev = make_checked();
  Stream s = new_stream(*dev);
  uint32_t* a = raw_buffer(*dev, 8);
  uint32_t* b = raw_buffer(*dev, 8);
  uint32_t* c = raw_buffer(*dev, 8);
  std::vector<uint32_t> host(8, 7);
  ASSERT_OK(dev->launch(k::fill_u32(a, 8, 1), s));      // a kernel
  ASSERT_OK(dev->memset_async(b, 0, 32, s));            // a memset
  ASSERT_OK(dev->memcpy_async(c, host.data(), 32, CopyKind::HostToDevice, s));  // a copy
  ASSERT_OK(dev->launch(k::add_u32(a, b, 8), s));
  ASSERT_OK(dev->launch(k::add_u32(a, c, 8), s));
  ASSERT_OK(dev->stream_synchronize(s));
  EXPECT_EQ(read_word(*dev, a), 8u);  // a copy back reads written memory; host memory is not checked
  std::optional<sim::InitCheckSummary> seen = sim::init_check_summary(*dev);
  ASSERT_TRUE(seen.has_value());
  EXPECT_TRUE(seen->uninitialized.empty()) << seen->uninitialized.front().describe();
  EXPECT_EQ(seen->launches, 3u);  // two adds read a, b and c; the copy back reads a word of a (fill: nothing)
  EXPECT_EQ(seen->bytes, 2u * 64 + 4);
}

TEST(SimInitCheck, OnlyTheUnwrittenPartIsCounted) {
  auto dev = make_checked();
  Stream s = new_stream(*dev);
  uint32_t* src = raw_buffer(*dev, 8);
  uint32_t* dst = new_buffer(*dev, 8);
  ASSERT_OK(dev->launch(k::fill_u32(src, 5, 1), s));  // words 0..4
  ASSERT_OK(dev->launch(k::copy_u32(dst, src, 8), s));
  ASSERT_OK(dev->stream_synchronize(s));
  std::vector<sim::UninitReport> r = uninit(*dev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].bytes, 12u);
  EXPECT_EQ(r[0].offset, 20u);
}

TEST(SimInitCheck, ALaunchCountsOnceForAnAllocation) {
  auto dev = make_checked();
  Stream s = new_stream(*dev);
  uint32_t* buf = raw_buffer(*dev, 8);
  ASSERT_OK(dev->launch(k::add_u32(buf + 4, buf, 4), s));  // reads both halves of one allocation
  ASSERT_OK(dev->stream_synchronize(s));
  std::vector<sim::UninitReport> r = uninit(*dev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].reads, 1u);
  EXPECT_EQ(r[0].bytes, 32u);
}

TEST(SimInitCheck, AFreedAndReallocatedBlockIsUninitializedAgain) {
  auto dev = make_checked();
  Stream s = new_stream(*dev);
  uint32_t* a = new_buffer(*dev, 8);  // written by a memset
  ASSERT_OK(dev->free(a));
  uint32_t* b = raw_buffer(*dev, 8);  // the arena hands the same block out again
  ASSERT_EQ(static_cast<void*>(a), static_cast<void*>(b));
  uint32_t* dst = new_buffer(*dev, 8);
  ASSERT_OK(dev->launch(k::copy_u32(dst, b, 8), s));
  ASSERT_OK(dev->stream_synchronize(s));
  EXPECT_EQ(uninit(*dev).size(), 1u);
}

// A graph's alloc node leaves its bytes undefined at every launch: a replay that reads before it
// writes is reported even though an earlier replay wrote the same address.
TEST(SimInitCheck, GraphAllocationIsUndefinedAtEveryLaunch) {
  for (bool write_first : {false, true}) {
    auto dev = make_checked();
    Stream s = new_stream(*dev);
    uint32_t* dst = new_buffer(*dev, 8);
    Graph g;
    ASSERT_OK(dev->stream_begin_capture(s, CaptureMode::Global));
    void* p = nullptr;
    ASSERT_OK(dev->malloc_async(&p, 32, s, MemCategory::Activations));
    auto* buf = static_cast<uint32_t*>(p);
    if (write_first) {
      ASSERT_OK(dev->launch(k::fill_u32(buf, 8, 3), s));
    }
    ASSERT_OK(dev->launch(k::copy_u32(dst, buf, 8), s));
    ASSERT_OK(dev->launch(k::fill_u32(buf, 8, 4), s));  // written after the read: the next replay reads it
    ASSERT_OK(dev->free_async(p, s));
    ASSERT_OK(dev->stream_end_capture(s, &g));
    GraphExec e;
    ASSERT_OK(dev->graph_instantiate(&e, g, 0));
    for (int i = 0; i < 2; ++i) {
      ASSERT_OK(dev->graph_launch(e, s));
    }
    ASSERT_OK(dev->stream_synchronize(s));
    std::vector<sim::UninitReport> r = uninit(*dev);
    if (write_first) {
      EXPECT_TRUE(r.empty()) << r.front().describe();
    } else {
      ASSERT_EQ(r.size(), 1u);
      EXPECT_EQ(r[0].reads, 2u);  // both replays
      EXPECT_NE(r[0].allocation.find("graph allocation"), std::string::npos) << r[0].allocation;
    }
  }
}

// With an exploration seed work runs later, in a seeded order: the check follows the order it runs
// in (a read after the write that runs first is clean; one ordered before it is reported).
TEST(SimInitCheck, FollowsTheExploredOrder) {
  for (uint64_t seed : {3, 9}) {
    auto dev = make_checked(seed);
    Stream s = new_stream(*dev);
    uint32_t* a = raw_buffer(*dev, 8);
    uint32_t* b = raw_buffer(*dev, 8);
    uint32_t* dst = new_buffer(*dev, 8);
    ASSERT_OK(dev->launch(k::fill_u32(a, 8, 1), s));
    ASSERT_OK(dev->launch(k::copy_u32(dst, a, 8), s));  // after the fill: clean
    ASSERT_OK(dev->launch(k::copy_u32(dst, b, 8), s));  // b: nothing wrote it
    ASSERT_OK(dev->stream_synchronize(s));
    std::vector<sim::UninitReport> r = uninit(*dev);
    ASSERT_EQ(r.size(), 1u) << "seed " << seed;
    EXPECT_EQ(r[0].bytes, 32u);
  }
}

TEST(SimInitCheck, OffByDefault) {
  auto dev = make_sim();
  Stream s = new_stream(*dev);
  uint32_t* src = raw_buffer(*dev, 8);
  uint32_t* dst = new_buffer(*dev, 8);
  ASSERT_OK(dev->launch(k::copy_u32(dst, src, 8), s));
  ASSERT_OK(dev->stream_synchronize(s));
  EXPECT_FALSE(sim::init_check_summary(*dev).has_value());  // not observed, never "none found"
}

}  // namespace
}  // namespace recap::device
