// Several host threads: per-thread default streams, concurrent use of one device.
#include <thread>

#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace k = kernels;

TEST(SimThreads, EachThreadHasItsOwnPerThreadStream) {
  auto dev = make_sim();
  ASSERT_OK(dev->stream_begin_capture(Stream::per_thread(), CaptureMode::Relaxed));
  CaptureStatus other = CaptureStatus::Active;
  std::thread([&] { other = capture_status(*dev, Stream::per_thread()); }).join();
  EXPECT_EQ(other, CaptureStatus::None) << "another thread's per-thread stream is not capturing";
  EXPECT_EQ(capture_status(*dev, Stream::per_thread()), CaptureStatus::Active);
  Graph g;
  ASSERT_OK(dev->stream_end_capture(Stream::per_thread(), &g));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->stream_destroy(Stream::per_thread()));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->stream_destroy(Stream::legacy()));
}

TEST(SimThreads, WorkFromAnotherThreadJoinsTheCapture) {
  // Enqueueing to a capturing stream from another thread is recorded, whatever the mode.
  auto dev = make_sim();
  Stream s = new_stream(*dev);
  uint32_t* buf = new_buffer(*dev, 1);
  ASSERT_OK(dev->stream_begin_capture(s, CaptureMode::ThreadLocal));
  Status st = Status::Unknown;
  std::thread([&] { st = dev->launch(k::increment_u32(buf, 1), s); }).join();
  EXPECT_STATUS(Status::Success, st);
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s, &g));
  EXPECT_EQ(node_count(*dev, g), 1u);
  EXPECT_EQ(read_word(*dev, buf), 0u);
}

TEST(SimThreads, ConcurrentUseFromManyThreadsIsConsistent) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{17}}) {
    auto dev = make_sim(seed);
    constexpr int kThreads = 4, kRounds = 50;
    std::vector<std::thread> threads;
    std::vector<uint32_t> results(kThreads, 0);
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        Stream s;
        ASSERT_OK(dev->stream_create(&s, true));
        void* p = nullptr;
        ASSERT_OK(dev->malloc_async(&p, 64, s, MemCategory::Workspace));
        auto* buf = static_cast<uint32_t*>(p);
        void* side = nullptr;  // unrelated work on this thread's per-thread stream
        ASSERT_OK(dev->malloc_async(&side, 64, Stream::per_thread(), MemCategory::Workspace));
        ASSERT_OK(dev->memset_async(buf, 0, 64, s));
        for (int r = 0; r < kRounds; ++r) {
          ASSERT_OK(dev->launch(k::increment_u32(buf, 16), s));
          ASSERT_OK(dev->launch(k::increment_u32(static_cast<uint32_t*>(side), 16), Stream::per_thread()));
        }
        ASSERT_OK(dev->free_async(side, Stream::per_thread()));
        uint32_t v = 0;
        ASSERT_OK(dev->memcpy_async(&v, buf, 4, CopyKind::DeviceToHost, s));
        ASSERT_OK(dev->stream_synchronize(s));
        results[t] = v;
        ASSERT_OK(dev->free_async(p, s));
        ASSERT_OK(dev->stream_synchronize(s));
        ASSERT_OK(dev->stream_destroy(s));
      });
    for (auto& th : threads) th.join();
    ASSERT_OK(dev->device_synchronize());
    for (uint32_t v : results) EXPECT_EQ(v, 0u + kRounds);
    MemoryStats st = dev->memory_stats();
    EXPECT_EQ(st.live_bytes, 0);
    EXPECT_EQ(st.pool_used_bytes, 0);
    EXPECT_GE(st.pool_peak_bytes, 128) << "each thread held two allocations at once";
  }
}

}  // namespace
}  // namespace recap::device::simtest
