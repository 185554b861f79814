// Every row of the reference's "Calls during capture" table, for each capture mode, from the
// capturing thread and from another thread, with a non-blocking or blocking capture stream; plus
// the "who may make potentially unsafe calls" rule under cudaThreadExchangeStreamCaptureMode.
// Rows marked "measured" are calls the table does not list, probed on the same H200 (driver
// 580.159.04, CUDA 13.0) with the reference's procedure for the sim engineer.
//
// The probe is the reference's: begin a capture on a fresh stream, launch one kernel, make the
// call, read the capture status, end the capture. Expected values are written out from the table,
// not computed from the rule, so that the rule's implementation is what is tested.
#include <array>
#include <thread>

#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace k = kernels;

constexpr Status kOk = Status::Success;
constexpr Status k900 = Status::StreamCaptureUnsupported;
constexpr Status k905 = Status::StreamCaptureIsolation;
constexpr Status k906 = Status::StreamCaptureImplicit;
constexpr Status k907 = Status::CapturedEvent;

// Everything a row's call may use. `captured` was recorded on the capture stream in the capture;
// `uncaptured` eagerly on `idle` before it.
struct Env {
  Device& dev;
  Stream cap;
  Stream idle;
  Event uncaptured;
  Event captured;
  uint32_t* buf;        // captured kernel's buffer
  uint32_t* eager_buf;  // eager calls write here
  void* victim_dev;     // for cudaFree
  void* victim_host;    // for cudaFreeHost
  std::vector<uint32_t>* host;  // pageable host memory, 4 words
  Graph graph;          // captured on `idle` before the capture: one kernel
  GraphExec exec;       // instantiated from it
  Event stale;          // last recorded in an earlier, ended capture
  void* victim_async;   // stream-ordered allocation for cudaFreeAsync
};

struct Row {
  std::string name;
  bool blocking_capture;  // the capture stream is blocking
  // Global own, Global other, ThreadLocal own, ThreadLocal other, Relaxed own, Relaxed other.
  std::array<Status, 6> expect;
  int nodes_added;  // nodes a successful call records (0: it ran eagerly)
  std::function<Status(Env&)> call;
  std::function<void(Env&)> verify_eager = nullptr;  // checked after the capture when the call succeeded
  bool failure_invalidates = true;  // a failing call invalidates the capture (else it stays Active)
};

std::array<Status, 6> all(Status s) { return {s, s, s, s, s, s}; }
// The cudaMalloc row: ✗900 / ✗900 | ✗900 / eager | eager.
constexpr std::array<Status, 6> kUnsafe = {k900, k900, k900, kOk, kOk, kOk};

std::vector<Row> rows() {
  std::vector<Row> r;
  // -- potentially unsafe calls: the barred-thread rule.
  r.push_back({"cudaMalloc", false, kUnsafe, 0, [](Env& e) {
                 void* p = nullptr;
                 return e.dev.malloc(&p, 1024, MemCategory::Other);
               }});
  r.push_back({"cudaFree", false, kUnsafe, 0, [](Env& e) { return e.dev.free(e.victim_dev); }});
  r.push_back({"cudaMallocHost", false, kUnsafe, 0, [](Env& e) {
                 void* p = nullptr;
                 return e.dev.malloc_host(&p, 1024);
               }});
  r.push_back({"cudaFreeHost", false, kUnsafe, 0, [](Env& e) { return e.dev.free_host(e.victim_host); }});
  r.push_back({"cudaEventQuery_uncaptured", false, kUnsafe, 0, [](Env& e) { return e.dev.event_query(e.uncaptured); }});
  r.push_back({"cudaEventSynchronize_uncaptured", false, kUnsafe, 0,
               [](Env& e) { return e.dev.event_synchronize(e.uncaptured); }});
  // The table gives one value per mode here (✗900 | ✗900 | eager); the general rule decides the
  // ThreadLocal/other cell: eager (listed as an ambiguity for the GPU to arbitrate).
  r.push_back({"cudaStreamQuery_idle", false, kUnsafe, 0, [](Env& e) { return e.dev.stream_query(e.idle); }});
  r.push_back({"cudaStreamSynchronize_idle", false, kUnsafe, 0, [](Env& e) { return e.dev.stream_synchronize(e.idle); }});
  r.push_back({"cudaStreamQuery_legacy", false, kUnsafe, 0, [](Env& e) { return e.dev.stream_query(Stream::legacy()); }});
  // -- always refused.
  r.push_back({"cudaStreamQuery_capturing", false, all(k900), 0, [](Env& e) { return e.dev.stream_query(e.cap); }});
  r.push_back({"cudaStreamSynchronize_capturing", false, all(k900), 0,
               [](Env& e) { return e.dev.stream_synchronize(e.cap); }});
  r.push_back({"cudaDeviceSynchronize", false, all(k900), 0, [](Env& e) { return e.dev.device_synchronize(); }});
  r.push_back({"cudaEventQuery_captured", false, all(k907), 0, [](Env& e) { return e.dev.event_query(e.captured); }});
  r.push_back({"cudaEventSynchronize_captured", false, all(k907), 0,
               [](Env& e) { return e.dev.event_synchronize(e.captured); }});
  r.push_back({"cudaStreamWaitEvent_uncaptured", false, all(k905), 0,
               [](Env& e) { return e.dev.stream_wait_event(e.cap, e.uncaptured); }});
  r.push_back({"cudaStreamWaitEvent_uncaptured_external", false, all(kOk), 1,
               [](Env& e) { return e.dev.stream_wait_event(e.cap, e.uncaptured, /*external=*/true); }});
  // -- legacy-stream work: eager with a non-blocking capture stream, 906 with a blocking one.
  auto legacy_rows = [&](bool blocking) {
    std::array<Status, 6> x = blocking ? all(k906) : all(kOk);
    r.push_back({"cudaMemcpy", blocking, x, 0,
                 [](Env& e) {
                   (*e.host)[0] = 41;
                   return e.dev.memcpy(e.eager_buf, e.host->data(), 4, CopyKind::HostToDevice);
                 },
                 [](Env& e) { EXPECT_EQ(read_word(e.dev, e.eager_buf), 41u); }});
    r.push_back({"cudaMemset", blocking, x, 0, [](Env& e) { return e.dev.memset(e.eager_buf, 1, 4); },
                 [](Env& e) { EXPECT_EQ(read_word(e.dev, e.eager_buf), 0x01010101u); }});
    r.push_back({"kernel_on_legacy", blocking, x, 0,
                 [](Env& e) { return e.dev.launch(k::fill_u32(e.eager_buf, 1, 42), Stream::legacy()); },
                 [](Env& e) { EXPECT_EQ(read_word(e.dev, e.eager_buf), 42u); }});
    r.push_back({"cudaMemsetAsync_on_legacy", blocking, x, 0,
                 [](Env& e) { return e.dev.memset_async(e.eager_buf, 2, 4, Stream::legacy()); },
                 [](Env& e) { EXPECT_EQ(read_word(e.dev, e.eager_buf), 0x02020202u); }});
  };
  legacy_rows(false);
  legacy_rows(true);
  r.push_back({"cudaStreamQuery_legacy", true, all(k906), 0, [](Env& e) { return e.dev.stream_query(Stream::legacy()); }});
  r.push_back({"kernel_on_per_thread", true, all(kOk), 0,
               [](Env& e) { return e.dev.launch(k::fill_u32(e.eager_buf, 1, 43), Stream::per_thread()); },
               [](Env& e) { EXPECT_EQ(read_word(e.dev, e.eager_buf), 43u); }});
  r.push_back({"kernel_on_other_blocking_stream", true, all(kOk), 0,  // measured
               [](Env& e) {
                 Stream b;
                 Status s = e.dev.stream_create(&b, /*non_blocking=*/false);
                 return ok(s) ? e.dev.launch(k::fill_u32(e.eager_buf, 1, 44), b) : s;
               },
               [](Env& e) { EXPECT_EQ(read_word(e.dev, e.eager_buf), 44u); }});
  // -- work on the capturing stream: nodes.
  for (bool blocking : {false, true}) {
    r.push_back({"kernel_on_capturing", blocking, all(kOk), 1,
                 [](Env& e) { return e.dev.launch(k::increment_u32(e.buf, 1), e.cap); }});
    r.push_back({"cudaMemcpyAsync_device", blocking, all(kOk), 1,
                 [](Env& e) { return e.dev.memcpy_async(e.eager_buf, e.buf, 4, CopyKind::DeviceToDevice, e.cap); }});
    r.push_back({"cudaMemcpyAsync_pageable", blocking, all(kOk), 1,
                 [](Env& e) { return e.dev.memcpy_async(e.buf, e.host->data(), 4, CopyKind::HostToDevice, e.cap); }});
    r.push_back({"cudaMemsetAsync_on_capturing", blocking, all(kOk), 1,
                 [](Env& e) { return e.dev.memset_async(e.buf, 0, 4, e.cap); }});
    r.push_back({"cudaMallocAsync_cudaFreeAsync", blocking, all(kOk), 2, [](Env& e) {
                   void* p = nullptr;
                   Status s = e.dev.malloc_async(&p, 1024, e.cap, MemCategory::Activations);
                   return ok(s) ? e.dev.free_async(p, e.cap) : s;
                 }});
    r.push_back({"cudaLaunchHostFunc", blocking, all(kOk), 1,
                 [](Env& e) { return e.dev.launch_host_func(e.cap, [] { ADD_FAILURE() << "host node ran at capture"; }); }});
  }
  // -- measured: more potentially unsafe calls, barred exactly as cudaMalloc.
  r.push_back({"cudaGraphInstantiate", false, kUnsafe, 0, [](Env& e) {
                 GraphExec x;
                 return e.dev.graph_instantiate(&x, e.graph);
               }});
  r.push_back({"cudaGraphExecDestroy", false, kUnsafe, 0, [](Env& e) { return e.dev.graph_exec_destroy(e.exec); }});
  r.push_back({"cudaMallocAsync_idle", false, kUnsafe, 0, [](Env& e) {
                 void* p = nullptr;
                 return e.dev.malloc_async(&p, 1024, e.idle, MemCategory::Other);
               }});
  r.push_back({"cudaMallocAsync_legacy", false, kUnsafe, 0, [](Env& e) {
                 void* p = nullptr;
                 return e.dev.malloc_async(&p, 1024, Stream::legacy(), MemCategory::Other);
               }});
  r.push_back({"cudaMallocAsync_legacy", true, all(k906), 0, [](Env& e) {
                 void* p = nullptr;
                 return e.dev.malloc_async(&p, 1024, Stream::legacy(), MemCategory::Other);
               }});
  r.push_back({"cudaFreeAsync_idle", false, kUnsafe, 0, [](Env& e) { return e.dev.free_async(e.victim_async, e.idle); }});
  r.push_back({"cudaFreeAsync_legacy", false, kUnsafe, 0,
               [](Env& e) { return e.dev.free_async(e.victim_async, Stream::legacy()); }});
  r.push_back({"cudaFree_null", false, kUnsafe, 0, [](Env& e) { return e.dev.free(nullptr); }});
  // -- measured: always eager.
  r.push_back({"cudaGraphLaunch_other_stream", false, all(kOk), 0, [](Env& e) { return e.dev.graph_launch(e.exec, e.idle); }});
  r.push_back({"cudaGraphExecUpdate", false, all(kOk), 0, [](Env& e) {
                 GraphExecUpdateResult res;
                 return e.dev.graph_exec_update(e.exec, e.graph, &res);
               }});
  r.push_back({"cudaGraphDestroy", false, all(kOk), 0, [](Env& e) { return e.dev.graph_destroy(e.graph); }});
  r.push_back({"cudaEventDestroy", false, all(kOk), 0, [](Env& e) { return e.dev.event_destroy(e.uncaptured); }});
  r.push_back({"cudaStreamDestroy_idle", false, all(kOk), 0, [](Env& e) { return e.dev.stream_destroy(e.idle); }});
  // -- measured: more legacy-stream work; with a blocking capture stream the general 906 rule.
  for (bool blocking : {false, true}) {
    std::array<Status, 6> x = blocking ? all(k906) : all(kOk);
    r.push_back({"cudaMemcpyAsync_legacy", blocking, x, 0, [](Env& e) {
                   return e.dev.memcpy_async(e.eager_buf, e.buf, 4, CopyKind::DeviceToDevice, Stream::legacy());
                 }});
    r.push_back({"cudaEventRecord_legacy", blocking, x, 0, [](Env& e) { return e.dev.event_record(e.uncaptured, Stream::legacy()); }});
    r.push_back({"cudaLaunchHostFunc_legacy", blocking, x, 0,
                 [](Env& e) { return e.dev.launch_host_func(Stream::legacy(), [] {}); }});
    r.push_back({"cudaStreamWaitEvent_legacy_uncaptured", blocking, x, 0,
                 [](Env& e) { return e.dev.stream_wait_event(Stream::legacy(), e.uncaptured); }});
  }
  // -- measured: refusals.
  r.push_back({"cudaGraphLaunch_capturing", false, all(k900), 0, [](Env& e) { return e.dev.graph_launch(e.exec, e.cap); }});
  r.push_back({"cudaStreamWaitEvent_legacy_captured", false, all(k906), 0,
               [](Env& e) { return e.dev.stream_wait_event(Stream::legacy(), e.captured); }});
  r.push_back({"cudaStreamWaitEvent_stale", false, all(Status::InvalidValue), 0,
               [](Env& e) { return e.dev.stream_wait_event(e.cap, e.stale); }});
  r.push_back({"cudaEventQuery_stale", false, all(Status::InvalidValue), 0, [](Env& e) { return e.dev.event_query(e.stale); },
               nullptr, /*failure_invalidates=*/false});
  r.push_back({"cudaEventSynchronize_stale", false, all(Status::InvalidValue), 0,
               [](Env& e) { return e.dev.event_synchronize(e.stale); }, nullptr, /*failure_invalidates=*/false});
  // -- always eager.
  r.push_back({"cudaStreamCreate", false, all(kOk), 0, [](Env& e) {
                 Stream s;
                 return e.dev.stream_create(&s, true);
               }});
  r.push_back({"cudaEventCreate", false, all(kOk), 0, [](Env& e) {
                 Event ev;
                 return e.dev.event_create(&ev);
               }});
  r.push_back({"cudaMemGetInfo", false, all(kOk), 0, [](Env& e) {
                 size_t f = 0, t = 0;
                 return e.dev.mem_get_info(&f, &t);
               }});
  return r;
}

void PrintTo(const Row& row, std::ostream* os) { *os << row.name << (row.blocking_capture ? " (blocking)" : ""); }

std::string row_name(const ::testing::TestParamInfo<Row>& info) {
  return info.param.name + (info.param.blocking_capture ? "_blocking" : "");
}

class SimCallsDuringCapture : public ::testing::TestWithParam<Row> {};

TEST_P(SimCallsDuringCapture, MatchesTheTable) {
  const Row& row = GetParam();
  const CaptureMode modes[] = {CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed};
  for (int m = 0; m < 3; ++m) {
    for (bool other_thread : {false, true}) {
      Status expected = row.expect[m * 2 + (other_thread ? 1 : 0)];
      SCOPED_TRACE(capture_mode_name(modes[m]) + (other_thread ? " / other thread" : " / own thread") +
                   ", expecting " + error_name(expected));
      auto dev = make_sim();
      std::vector<uint32_t> host(4, 0);
      Env env{*dev, new_stream(*dev, !row.blocking_capture), new_stream(*dev), new_event(*dev), new_event(*dev),
              new_buffer(*dev, 4), new_buffer(*dev, 4), nullptr, nullptr, &host, Graph{}, GraphExec{},
              new_event(*dev), nullptr};
      ASSERT_OK(dev->malloc(&env.victim_dev, 256, MemCategory::Other));
      ASSERT_OK(dev->malloc_host(&env.victim_host, 256));
      ASSERT_OK(dev->malloc_async(&env.victim_async, 256, env.idle, MemCategory::Other));
      ASSERT_OK(dev->launch(k::fill_u32(env.eager_buf, 1, 1), env.idle));
      ASSERT_OK(dev->event_record(env.uncaptured, env.idle));
      ASSERT_OK(dev->stream_begin_capture(env.idle, CaptureMode::Global));
      ASSERT_OK(dev->launch(k::increment_u32(env.eager_buf, 1), env.idle));
      ASSERT_OK(dev->event_record(env.stale, env.idle));
      ASSERT_OK(dev->stream_end_capture(env.idle, &env.graph));
      ASSERT_OK(dev->graph_instantiate(&env.exec, env.graph));
      ASSERT_OK(dev->stream_synchronize(env.idle));

      ASSERT_OK(dev->stream_begin_capture(env.cap, modes[m]));
      ASSERT_OK(dev->launch(k::fill_u32(env.buf, 4, 5), env.cap));
      ASSERT_OK(dev->event_record(env.captured, env.cap));

      Status got = Status::Unknown, last = Status::Unknown;
      auto make_call = [&] {
        got = row.call(env);
        last = dev->get_last_error();
      };
      if (other_thread)
        std::thread(make_call).join();
      else
        make_call();
      EXPECT_STATUS(expected, got);
      EXPECT_STATUS(expected, last) << "a failing call sets the calling thread's last error";

      bool invalidated = !ok(expected) && row.failure_invalidates;
      EXPECT_EQ(capture_status(*dev, env.cap), invalidated ? CaptureStatus::Invalidated : CaptureStatus::Active);
      Graph g;
      Status end = dev->stream_end_capture(env.cap, &g);
      if (!invalidated) {
        EXPECT_STATUS(Status::Success, end);
        EXPECT_EQ(node_count(*dev, g), 1u + static_cast<size_t>(ok(expected) ? row.nodes_added : 0));
        if (ok(expected) && row.verify_eager) row.verify_eager(env);
      } else {
        EXPECT_STATUS(Status::StreamCaptureInvalidated, end);
        EXPECT_EQ(g.id, 0u);
      }
      (void)dev->get_last_error();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, SimCallsDuringCapture, ::testing::ValuesIn(rows()), row_name);

// ---- the barred-thread rule under cudaThreadExchangeStreamCaptureMode -------------------------

class SimUnsafeCallRule : public ::testing::Test {
 protected:
  std::unique_ptr<Device> dev = make_sim();
  Stream s1 = new_stream(*dev);
  Stream s2 = new_stream(*dev);
  Status try_malloc() {
    void* p = nullptr;
    return dev->malloc(&p, 256, MemCategory::Other);
  }
  CaptureMode exchange(CaptureMode m) {
    EXPECT_STATUS(Status::Success, dev->thread_exchange_capture_mode(&m));
    return m;
  }
};

TEST_F(SimUnsafeCallRule, ExchangeReturnsThePreviousModeDefaultGlobalPerThread) {
  EXPECT_EQ(exchange(CaptureMode::Relaxed), CaptureMode::Global);
  EXPECT_EQ(exchange(CaptureMode::ThreadLocal), CaptureMode::Relaxed);
  CaptureMode other = CaptureMode::Relaxed;
  std::thread([&] { other = exchange(CaptureMode::Global); }).join();
  EXPECT_EQ(other, CaptureMode::Global) << "another thread starts from the default";
  EXPECT_EQ(exchange(CaptureMode::Global), CaptureMode::ThreadLocal);
  CaptureMode bad = static_cast<CaptureMode>(7);
  EXPECT_STATUS(Status::InvalidValue, dev->thread_exchange_capture_mode(&bad));
}

TEST_F(SimUnsafeCallRule, RelaxedThreadMayCallDuringItsOwnGlobalCapture) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  exchange(CaptureMode::Relaxed);
  EXPECT_STATUS(Status::Success, try_malloc());
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Active);
  exchange(CaptureMode::Global);
  EXPECT_STATUS(Status::StreamCaptureUnsupported, try_malloc());
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Invalidated);
}

TEST_F(SimUnsafeCallRule, ThreadLocalOrRelaxedOtherThreadIsNotBarredByAGlobalCapture) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  for (CaptureMode m : {CaptureMode::ThreadLocal, CaptureMode::Relaxed}) {
    Status st = Status::Unknown;
    std::thread([&] {
      exchange(m);
      st = try_malloc();
    }).join();
    EXPECT_STATUS(Status::Success, st) << capture_mode_name(m);
  }
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Active);
}

TEST_F(SimUnsafeCallRule, ThreadLocalThreadIsBarredByItsOwnThreadLocalCapture) {
  exchange(CaptureMode::ThreadLocal);
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::ThreadLocal));
  EXPECT_STATUS(Status::StreamCaptureUnsupported, try_malloc());
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Invalidated);
}

TEST_F(SimUnsafeCallRule, OnlyTheBarringCaptureIsInvalidated) {
  // This thread owns a Relaxed capture (which bars nobody); another thread owns a Global one. A
  // Global-mode call here is barred by the other thread's capture, which alone is invalidated.
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Relaxed));
  std::thread([&] { ASSERT_OK(dev->stream_begin_capture(s2, CaptureMode::Global)); }).join();
  EXPECT_STATUS(Status::StreamCaptureUnsupported, try_malloc());
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Active);
  EXPECT_EQ(capture_status(*dev, s2), CaptureStatus::Invalidated);
}

TEST_F(SimUnsafeCallRule, AnInvalidatedCaptureStillBarsUntilItEnds) {
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  EXPECT_STATUS(Status::StreamCaptureUnsupported, try_malloc());
  EXPECT_STATUS(Status::StreamCaptureUnsupported, try_malloc());
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
  EXPECT_STATUS(Status::Success, try_malloc());
}

}  // namespace
}  // namespace recap::device::simtest
