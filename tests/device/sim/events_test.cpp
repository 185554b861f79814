// Events and implicit stream synchronization, eagerly and under exploration.
#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace k = kernels;

TEST(SimEvents, NeverRecordedEventIsComplete) {
  auto dev = make_sim();
  Event e = new_event(*dev);
  EXPECT_STATUS(Status::Success, dev->event_query(e));
  EXPECT_STATUS(Status::Success, dev->event_synchronize(e));
}

TEST(SimEvents, DestroyedEventIsAnInvalidHandle) {
  auto dev = make_sim();
  Event e = new_event(*dev);
  ASSERT_OK(dev->event_destroy(e));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->event_query(e));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->event_record(e, Stream::legacy()));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->event_destroy(e));
}

TEST(SimEvents, EventSynchronizeWaitsForTheRecordedWorkOnly) {
  // Exploration defers work until the host observes it, so what a sync runs is visible: syncing
  // the event runs the work before the record, not necessarily what follows.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto dev = make_sim(seed);
    Stream s = new_stream(*dev);
    uint32_t* buf = new_buffer(*dev, 1);
    Event e = new_event(*dev);
    ASSERT_OK(dev->launch(k::fill_u32(buf, 1, 1), s));
    ASSERT_OK(dev->event_record(e, s));
    ASSERT_OK(dev->launch(k::fill_u32(buf, 1, 2), s));
    EXPECT_EQ(*buf, 0u) << "nothing ran before the host observed";  // sim memory is host memory
    ASSERT_OK(dev->event_synchronize(e));
    EXPECT_EQ(*buf, 1u) << "seed " << seed;
    ASSERT_OK(dev->stream_synchronize(s));
    EXPECT_EQ(*buf, 2u);
  }
}

// Runs a writer on one stream then a reader on another (no event between them) under many seeds;
// says whether the reader ever ran first.
using StreamMaker = Stream (*)(Device&);
Stream legacy(Device&) { return Stream::legacy(); }
Stream per_thread(Device&) { return Stream::per_thread(); }
Stream blocking(Device& d) { return new_stream(d, /*non_blocking=*/false); }
Stream non_blocking(Device& d) { return new_stream(d, /*non_blocking=*/true); }

bool reader_ever_ran_first(StreamMaker writer_stream, StreamMaker reader_stream) {
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    auto dev = make_sim(seed);
    Stream w = writer_stream(*dev);
    Stream r = reader_stream(*dev);
    uint32_t* src = new_buffer(*dev, 1);
    uint32_t* dst = new_buffer(*dev, 1);
    EXPECT_STATUS(Status::Success, dev->launch(k::fill_u32(src, 1, 7), w));
    EXPECT_STATUS(Status::Success, dev->launch(k::copy_u32(dst, src, 1), r));
    EXPECT_STATUS(Status::Success, dev->device_synchronize());
    if (read_word(*dev, dst) != 7u) return true;
  }
  return false;
}

TEST(SimEvents, BlockingStreamsAndTheLegacyStreamAreImplicitlyOrdered) {
  EXPECT_FALSE(reader_ever_ran_first(blocking, legacy));
  EXPECT_FALSE(reader_ever_ran_first(legacy, blocking));
  EXPECT_FALSE(reader_ever_ran_first(per_thread, legacy)) << "the per-thread stream syncs with legacy";
  EXPECT_FALSE(reader_ever_ran_first(legacy, per_thread));
}

TEST(SimEvents, OtherPairsOfStreamsAreNotOrdered) {
  EXPECT_TRUE(reader_ever_ran_first(non_blocking, legacy));
  EXPECT_TRUE(reader_ever_ran_first(legacy, non_blocking));
  EXPECT_TRUE(reader_ever_ran_first(blocking, blocking)) << "blocking streams sync with legacy, not each other";
  EXPECT_TRUE(reader_ever_ran_first(blocking, per_thread));
}

TEST(SimEvents, EventWaitOrdersAcrossNonBlockingStreams) {
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    auto dev = make_sim(seed);
    Stream a = new_stream(*dev), b = new_stream(*dev);
    uint32_t* src = new_buffer(*dev, 1);
    uint32_t* dst = new_buffer(*dev, 1);
    Event e = new_event(*dev);
    ASSERT_OK(dev->launch(k::fill_u32(src, 1, 7), a));
    ASSERT_OK(dev->event_record(e, a));
    ASSERT_OK(dev->stream_wait_event(b, e));
    ASSERT_OK(dev->launch(k::copy_u32(dst, src, 1), b));
    ASSERT_OK(dev->stream_synchronize(b));
    EXPECT_EQ(read_word(*dev, dst), 7u) << "seed " << seed;
  }
}

}  // namespace
}  // namespace recap::device::simtest
