// The capture state machine of docs/cuda-capture-rules.md ("State machine"), rule by rule.
#include <thread>
#include <utility>

#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace k = kernels;

class SimCapture : public TwoStreams {
 protected:
  uint32_t* buf = new_buffer(*dev, 4);

  // The capture statuses of s1 and s2, so that one assertion checks both streams.
  using Pair = std::pair<CaptureStatus, CaptureStatus>;
  Pair both_statuses() { return {capture_status(*dev, s1), capture_status(*dev, s2)}; }
  static Pair both(CaptureStatus st) { return {st, st}; }

  // Records `e` in a capture of s1 and ends the capture, leaving `e` stale: the first call that did
  // not succeed, else Success.
  Status record_in_ended_capture(Event e) {
    Status st = dev->stream_begin_capture(s1, CaptureMode::Global);
    if (st == Status::Success) st = dev->event_record(e, s1);
    Graph g;
    return st == Status::Success ? dev->stream_end_capture(s1, &g) : st;
  }
};

TEST_F(SimCapture, BeginOnLegacyStreamIs900) {
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev->stream_begin_capture(Stream::legacy(), CaptureMode::Global));
  EXPECT_EQ(capture_status(*dev, Stream::legacy()), CaptureStatus::None);
}

TEST_F(SimCapture, BeginOnCapturingStreamIsIllegalStateWithoutInvalidation) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_STATUS(Status::IllegalState, dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Active);
  Graph g;
  EXPECT_STATUS(Status::Success, dev->stream_end_capture(s1, &g));
  EXPECT_NE(g.id, 0u);
}

TEST_F(SimCapture, PerThreadStreamMayCapture) {
  ASSERT_OK(dev->stream_begin_capture(Stream::per_thread(), CaptureMode::Global));
  EXPECT_EQ(capture_status(*dev, Stream::per_thread()), CaptureStatus::Active);
  Graph g;
  EXPECT_STATUS(Status::Success, dev->stream_end_capture(Stream::per_thread(), &g));
}

TEST_F(SimCapture, WorkOnMemberIsRecordedNotRun) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 7), s1));
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_EQ(read_word(*dev, buf), 0u) << "captured work must not run at capture";
  EXPECT_EQ(node_count(*dev, g), 1u);
  GraphExec e;
  ASSERT_OK(dev->graph_instantiate(&e, g));
  ASSERT_OK(dev->graph_launch(e, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_EQ(read_word(*dev, buf), 7u);
}

TEST_F(SimCapture, WorkOnNonMemberRunsEagerlyAndIsMissingFromTheGraph) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 5), s2));
  EXPECT_EQ(capture_status(*dev, s2), CaptureStatus::None);
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 0u);
  ASSERT_OK(dev->stream_synchronize(s2));
  EXPECT_EQ(read_word(*dev, buf), 5u);
}

TEST_F(SimCapture, IdsStatusesAndMembersLeaveAfterSuccess) {
  EXPECT_EQ(capture_id(*dev, s1), 0u);
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  uint64_t id = capture_id(*dev, s1);
  EXPECT_NE(id, 0u);
  ASSERT_OK(fork_stream(*dev, s1, s2));  // s2 joins the capture
  EXPECT_EQ(capture_status(*dev, s2), CaptureStatus::Active);
  EXPECT_EQ(capture_id(*dev, s2), id);
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 3), s2));
  ASSERT_OK(fork_stream(*dev, s2, s1));  // the join
  ASSERT_OK(dev->launch(k::increment_u32(buf, 4), s1));
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 2u);
  EXPECT_EQ(both_statuses(), both(CaptureStatus::None));
  // A second capture gets a fresh id.
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_NE(capture_id(*dev, s1), id);
  ASSERT_OK(dev->stream_end_capture(s1, &g));
}

TEST_F(SimCapture, UnjoinedForkIs904WithNoGraphAndMembersLeave) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(fork_stream(*dev, s1, s2));
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 3), s2));  // never joined back
  Graph g{123};
  EXPECT_STATUS(Status::StreamCaptureUnjoined, dev->stream_end_capture(s1, &g));
  EXPECT_EQ(g.id, 0u);
  EXPECT_EQ(both_statuses(), both(CaptureStatus::None));
}

TEST_F(SimCapture, ForkThatDidNoWorkNeedsNoJoin) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  Event fork = new_event(*dev);
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), s1));
  ASSERT_OK(dev->event_record(fork, s1));
  ASSERT_OK(dev->stream_wait_event(s2, fork));
  Graph g;
  EXPECT_STATUS(Status::Success, dev->stream_end_capture(s1, &g));
}

TEST_F(SimCapture, EndOnWrongStreamIs903AndOriginStaysInvalidatedUntilEndedThere) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(fork_stream(*dev, s1, s2));
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureUnmatched, dev->stream_end_capture(s2, &g));
  EXPECT_EQ(g.id, 0u);
  EXPECT_EQ(both_statuses(), both(CaptureStatus::Invalidated));
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->launch(k::fill_u32(buf, 4, 1), s1));
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
  EXPECT_EQ(g.id, 0u);
  EXPECT_EQ(both_statuses(), both(CaptureStatus::None));
}

TEST_F(SimCapture, InvalidatedCaptureRefusesEnqueuesWith901AndEndGivesNoGraph) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev->device_synchronize());  // invalidates
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Invalidated);
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->launch(k::fill_u32(buf, 4, 1), s1));
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->memset_async(buf, 0, 16, s1));
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->launch_host_func(s1, [] {}));
  Event e = new_event(*dev);
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->event_record(e, s1));
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
  EXPECT_EQ(g.id, 0u);
  // The stream is usable again, eagerly.
  EXPECT_STATUS(Status::Success, dev->launch(k::fill_u32(buf, 4, 9), s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_EQ(read_word(*dev, buf), 9u);
}

TEST_F(SimCapture, EndOnNonCapturingStreamIsIllegalState) {
  Graph g;
  EXPECT_STATUS(Status::IllegalState, dev->stream_end_capture(s1, &g));
}

TEST_F(SimCapture, MergingTwoCapturesIs902AndInvalidatesBoth) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(dev->stream_begin_capture(s2, CaptureMode::Global));
  EXPECT_NE(capture_id(*dev, s1), capture_id(*dev, s2));
  Event e = new_event(*dev);
  ASSERT_OK(dev->event_record(e, s1));
  EXPECT_STATUS(Status::StreamCaptureMerge, dev->stream_wait_event(s2, e));
  EXPECT_EQ(both_statuses(), both(CaptureStatus::Invalidated));
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s2, &g));
}

TEST_F(SimCapture, WaitOnUncapturedEventIs905UnlessExternal) {
  Event e = new_event(*dev);
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), s2));
  ASSERT_OK(dev->event_record(e, s2));
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_STATUS(Status::StreamCaptureIsolation, dev->stream_wait_event(s1, e));
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Invalidated);
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));

  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_STATUS(Status::Success, dev->stream_wait_event(s1, e, /*external=*/true));
  ASSERT_OK(dev->launch(k::increment_u32(buf, 4), s1));
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 2u) << "an event-wait node and the kernel";
}

TEST_F(SimCapture, EventLastRecordedInACaptureIsUnusableAfterItEnds) {
  Event e = new_event(*dev);
  ASSERT_OK(record_in_ended_capture(e));
  EXPECT_STATUS(Status::InvalidValue, dev->event_query(e));
  EXPECT_STATUS(Status::InvalidValue, dev->event_synchronize(e));
  EXPECT_STATUS(Status::InvalidValue, dev->stream_wait_event(s2, e));
  // Re-recorded outside capture, it works again.
  ASSERT_OK(dev->event_record(e, s2));
  EXPECT_STATUS(Status::Success, dev->event_query(e));
  EXPECT_STATUS(Status::Success, dev->stream_wait_event(s1, e));
}

TEST_F(SimCapture, WaitOnAStaleEventFromACapturingStreamInvalidatesIt) {
  Event e = new_event(*dev);
  ASSERT_OK(record_in_ended_capture(e));
  // Measured on the H200: InvalidValue, and the waiting capture is invalidated; a query from the
  // capturing (barred) thread is InvalidValue too, not 900, and invalidates nothing.
  ASSERT_OK(dev->stream_begin_capture(s2, CaptureMode::Global));
  EXPECT_STATUS(Status::InvalidValue, dev->event_query(e));
  EXPECT_EQ(capture_status(*dev, s2), CaptureStatus::Active);
  EXPECT_STATUS(Status::InvalidValue, dev->stream_wait_event(s2, e));
  EXPECT_EQ(capture_status(*dev, s2), CaptureStatus::Invalidated);
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s2, &g));
}

TEST_F(SimCapture, EventOfAnInvalidatedCaptureIsUnusable) {
  // Measured on the H200: 907 is for events of an Active capture; once it is invalidated (still in
  // progress), query and wait give InvalidValue, and a waiting stream does not join.
  Event e = new_event(*dev);
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Relaxed));
  ASSERT_OK(dev->event_record(e, s1));
  EXPECT_STATUS(Status::CapturedEvent, dev->event_query(e));
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Invalidated);
  EXPECT_STATUS(Status::InvalidValue, dev->event_query(e));
  EXPECT_STATUS(Status::InvalidValue, dev->event_synchronize(e));
  EXPECT_STATUS(Status::InvalidValue, dev->stream_wait_event(s2, e));
  EXPECT_EQ(capture_status(*dev, s2), CaptureStatus::None);
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
}

TEST_F(SimCapture, DestroyingTheOriginTerminatesTheCapture) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Relaxed));
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), s1));
  EXPECT_STATUS(Status::Success, dev->stream_destroy(s1));
  EXPECT_STATUS(Status::Success, dev->device_synchronize()) << "no capture is left in progress";
  EXPECT_EQ(read_word(*dev, buf), 0u);
}

TEST_F(SimCapture, DestroyingAJoinedMemberLeavesItsWorkUnjoined) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(fork_stream(*dev, s1, s2));
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), s2));
  EXPECT_STATUS(Status::Success, dev->stream_destroy(s2));
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Active);
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureUnjoined, dev->stream_end_capture(s1, &g));
}

TEST_F(SimCapture, WaitOnANeverRecordedEventDuringCaptureIsANoOp) {
  Event e = new_event(*dev);
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_STATUS(Status::Success, dev->stream_wait_event(s1, e));  // measured on the H200
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Active);
  Graph g;
  EXPECT_STATUS(Status::Success, dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 0u);
}

TEST_F(SimCapture, EndOnANonOriginMemberOfAnInvalidatedCaptureIs903) {
  // Measured on the H200: the wrong-stream check comes before the invalidation check.
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(fork_stream(*dev, s1, s2));
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev->device_synchronize());
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureUnmatched, dev->stream_end_capture(s2, &g));
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
  EXPECT_EQ(capture_status(*dev, s2), CaptureStatus::None);
}

TEST_F(SimCapture, ExternalWaitOnAnEventOfTheSameCaptureIsANode) {
  Event e = new_event(*dev);
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), s1));
  ASSERT_OK(dev->event_record(e, s1));
  EXPECT_STATUS(Status::Success, dev->stream_wait_event(s1, e, /*external=*/true));
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 2u);  // measured on the H200
}

TEST_F(SimCapture, EmptyCaptureGivesAGraphWithNoNodes) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Relaxed));
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 0u);
  GraphExec e;
  ASSERT_OK(dev->graph_instantiate(&e, g));
  EXPECT_STATUS(Status::Success, dev->graph_launch(e, s1));
  EXPECT_STATUS(Status::Success, dev->stream_synchronize(s1));
}

// End from another thread: 908 and termination for Global and ThreadLocal; allowed for Relaxed.
class SimCaptureEndThread : public SimCapture, public ::testing::WithParamInterface<CaptureMode> {};

TEST_P(SimCaptureEndThread, EndFromAnotherThread) {
  CaptureMode mode = GetParam();
  ASSERT_OK(dev->stream_begin_capture(s1, mode));
  ASSERT_OK(dev->launch(k::fill_u32(buf, 4, 1), s1));
  Status st = Status::Unknown;
  Graph g{77};
  std::thread([&] { st = dev->stream_end_capture(s1, &g); }).join();
  if (mode == CaptureMode::Relaxed) {
    EXPECT_STATUS(Status::Success, st);
    EXPECT_NE(g.id, 0u);
  } else {
    EXPECT_STATUS(Status::StreamCaptureWrongThread, st);
    EXPECT_EQ(g.id, 0u);
  }
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::None);
  // Terminated: ending it again on the owning thread finds no capture.
  EXPECT_STATUS(Status::IllegalState, dev->stream_end_capture(s1, &g));
}

INSTANTIATE_TEST_SUITE_P(Modes, SimCaptureEndThread,
                         ::testing::Values(CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed),
                         [](const auto& info) {
                           std::string n = capture_mode_name(info.param);
                           return n == "thread-local" ? std::string("threadlocal") : n;
                         });

TEST_F(SimCapture, LegacyStreamIsCapturingWhileBlockingStreamCapturesIs906WithoutInvalidation) {
  Stream blocking = new_stream(*dev, /*non_blocking=*/false);
  ASSERT_OK(dev->stream_begin_capture(blocking, CaptureMode::Global));
  CaptureStatus st;
  EXPECT_STATUS(Status::StreamCaptureImplicit, dev->stream_is_capturing(Stream::legacy(), &st));
  EXPECT_EQ(capture_status(*dev, blocking), CaptureStatus::Active);
  Graph g;
  EXPECT_STATUS(Status::Success, dev->stream_end_capture(blocking, &g));
}

TEST_F(SimCapture, CaptureAcrossThreeStreamsKeepsEdges) {
  // s1 forks to s2 and s3, both join back: a diamond. The replay must run the fill before both
  // branches and both branches before the final adds.
  Stream s3 = new_stream(*dev);
  uint32_t* a = new_buffer(*dev, 1);
  uint32_t* b = new_buffer(*dev, 1);
  uint32_t* c = new_buffer(*dev, 1);
  Event fork = new_event(*dev), j2 = new_event(*dev), j3 = new_event(*dev);
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::ThreadLocal));
  ASSERT_OK(dev->launch(k::fill_u32(a, 1, 10), s1));
  ASSERT_OK(dev->event_record(fork, s1));
  ASSERT_OK(dev->stream_wait_event(s2, fork));
  ASSERT_OK(dev->stream_wait_event(s3, fork));
  ASSERT_OK(dev->launch(k::copy_u32(b, a, 1), s2));  // b = 10
  ASSERT_OK(dev->launch(k::copy_u32(c, a, 1), s3));  // c = 10
  ASSERT_OK(dev->launch(k::increment_u32(c, 1), s3));  // c = 11
  ASSERT_OK(dev->event_record(j2, s2));
  ASSERT_OK(dev->event_record(j3, s3));
  ASSERT_OK(dev->stream_wait_event(s1, j2));
  ASSERT_OK(dev->stream_wait_event(s1, j3));
  ASSERT_OK(dev->launch(k::add_u32(a, b, 1), s1));  // a = 20
  ASSERT_OK(dev->launch(k::add_u32(a, c, 1), s1));  // a = 31
  Graph g;
  ASSERT_OK(dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 6u);
  GraphExec e;
  ASSERT_OK(dev->graph_instantiate(&e, g));
  ASSERT_OK(dev->graph_launch(e, s2));  // a graph may replay on any stream
  ASSERT_OK(dev->stream_synchronize(s2));
  EXPECT_EQ(read_word(*dev, a), 31u);
}

}  // namespace
}  // namespace recap::device::simtest
