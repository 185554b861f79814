// The cuda backend on a real GPU: kernels, streams and events, capture and replay, host nodes,
// executable update, graph memory nodes and teardown. Every case that needs a GPU skips, with the
// reason, where none is usable.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "harness/device/cuda/cuda_device.h"
#include "harness/device/device.h"
#include "harness/device/kernels.h"
#include "harness/device/status.h"

namespace recap::device {
namespace {

namespace k = kernels;

#define EXPECT_STATUS(expected, expr) EXPECT_EQ(error_name(expected), error_name(expr))
#define ASSERT_STATUS(expected, expr) ASSERT_EQ(error_name(expected), error_name(expr))
#define ASSERT_OK(expr) ASSERT_STATUS(Status::Success, expr)

// About 0.1 s of spinning at H200 clocks: long enough that work queued behind it is still pending
// when the host looks.
constexpr uint64_t kSpinCycles = 200'000'000;

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_usable(&why)) GTEST_SKIP() << why;
    std::string error;
    dev_ = cuda::make_cuda_device({}, &error);
    ASSERT_NE(dev_, nullptr) << error;
  }

  Device& dev() { return *dev_; }

  uint32_t* alloc_words(size_t n, MemCategory cat = MemCategory::Other) {
    void* p = nullptr;
    EXPECT_STATUS(Status::Success, dev().malloc(&p, n * sizeof(uint32_t), cat));
    EXPECT_STATUS(Status::Success, dev().memset(p, 0, n * sizeof(uint32_t)));
    return static_cast<uint32_t*>(p);
  }

  std::vector<uint32_t> read(const uint32_t* p, size_t n) {
    std::vector<uint32_t> out(n, 0xdeadbeef);
    EXPECT_STATUS(Status::Success, dev().memcpy(out.data(), p, n * sizeof(uint32_t), CopyKind::DeviceToHost));
    return out;
  }

  Stream make_stream(bool non_blocking = true) {
    Stream s;
    EXPECT_STATUS(Status::Success, dev().stream_create(&s, non_blocking));
    return s;
  }

  std::unique_ptr<Device> dev_;
};

// Runs everywhere: without a GPU, usable() must say why in one line, naming the CUDA error.
TEST(CudaAvailability, ReportsWhyWhenNotUsable) {
  std::string why;
  bool usable = cuda::usable(&why);
  std::string error;
  auto dev = cuda::make_cuda_device({}, &error);
  if (usable) {
    ASSERT_NE(dev, nullptr) << error;
    EXPECT_EQ(dev->backend(), Backend::Cuda);
    EXPECT_FALSE(dev->name().empty());
    return;
  }
  EXPECT_EQ(dev, nullptr);
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(why.find('\n'), std::string::npos);
  EXPECT_NE(why.find("cuda"), std::string::npos) << why;
  EXPECT_EQ(error, why);
  // The factory refuses cuda with the same reason, and auto falls back to sim.
  std::string factory_error;
  EXPECT_EQ(make_device(BackendChoice::Cuda, DeviceOptions{}, &factory_error), nullptr);
  EXPECT_NE(factory_error.find(why), std::string::npos) << factory_error;
  auto fallback = make_device(BackendChoice::Auto, DeviceOptions{}, &factory_error);
  ASSERT_NE(fallback, nullptr);
  EXPECT_EQ(fallback->backend(), Backend::Sim);
  // Asking again gives the same answer (no state left behind by the first failure).
  std::string again;
  EXPECT_FALSE(cuda::usable(&again));
  EXPECT_EQ(again, why);
}

// Runs everywhere: recap's names for the codes it knows are the CUDA runtime's.
TEST(CudaStatusNames, MatchTheRuntime) {
  for (int code : {0, 1, 2, 35, 100, 400, 401, 600, 801, 900, 901, 902, 903, 904, 905, 906, 907, 908, 910, 999}) {
    auto e = static_cast<cudaError_t>(code);
    EXPECT_EQ(error_name(static_cast<Status>(code)), cudaGetErrorName(e)) << code;
    EXPECT_EQ(error_string(static_cast<Status>(code)), cudaGetErrorString(e)) << code;
  }
}

TEST_F(CudaDeviceTest, NameAndBackend) {
  EXPECT_EQ(dev().backend(), Backend::Cuda);
  EXPECT_FALSE(dev().name().empty());
  EXPECT_NE(dev().name(), "sim");
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_OK(dev().mem_get_info(&free_bytes, &total_bytes));
  EXPECT_GT(total_bytes, 0u);
  EXPECT_LE(free_bytes, total_bytes);
}

TEST_F(CudaDeviceTest, KernelsRunAndResultsReadBack) {
  constexpr size_t n = 1000;
  uint32_t* a = alloc_words(n);
  uint32_t* b = alloc_words(n);
  Stream s = make_stream();
  ASSERT_OK(dev().launch(k::iota_u32(a, n, 10), s));
  ASSERT_OK(dev().launch(k::fill_u32(b, n, 5), s));
  ASSERT_OK(dev().launch(k::add_u32(b, a, n), s));     // b = 15 + i
  ASSERT_OK(dev().launch(k::scale_u32(b, n, 2), s));   // b = 30 + 2i
  ASSERT_OK(dev().launch(k::increment_u32(b, n), s));  // b = 31 + 2i
  ASSERT_OK(dev().launch(k::copy_u32(a, b, n), s));
  ASSERT_OK(dev().stream_synchronize(s));
  auto got = read(a, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 31u + 2u * i) << i;
  // The legacy and per-thread streams are usable handles too.
  ASSERT_OK(dev().launch(k::fill_u32(a, n, 1), Stream::legacy()));
  ASSERT_OK(dev().launch(k::increment_u32(a, n), Stream::per_thread()));
  ASSERT_OK(dev().device_synchronize());
  EXPECT_EQ(read(a, n), std::vector<uint32_t>(n, 2));
  ASSERT_OK(dev().free(a));
  ASSERT_OK(dev().free(b));
  ASSERT_OK(dev().stream_destroy(s));
}

TEST_F(CudaDeviceTest, UnknownHandlesAreInvalidResourceHandle) {
  Stream bogus{12345};
  Event bogus_event{777};
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().stream_synchronize(bogus));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().stream_query(bogus));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().stream_destroy(bogus));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().event_query(bogus_event));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().event_record(bogus_event, Stream::legacy()));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().graph_destroy(Graph{9}));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().graph_launch(GraphExec{9}, Stream::legacy()));
  // A destroyed handle is unknown from then on.
  Stream s = make_stream();
  ASSERT_OK(dev().stream_destroy(s));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().stream_query(s));
  Event e;
  ASSERT_OK(dev().event_create(&e));
  ASSERT_OK(dev().event_destroy(e));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().event_synchronize(e));
  // Like any CUDA error, a refused handle is the thread's last error; a null out-pointer is
  // InvalidValue. Neither disturbs a capture in progress.
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().get_last_error());
  EXPECT_STATUS(Status::Success, dev().get_last_error());
  Stream capturing = make_stream();
  ASSERT_OK(dev().stream_begin_capture(capturing, CaptureMode::Global));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().stream_query(bogus));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev().peek_at_last_error());
  EXPECT_STATUS(Status::InvalidValue, dev().stream_create(nullptr, true));
  EXPECT_STATUS(Status::InvalidValue, dev().get_last_error());
  CaptureStatus status;
  ASSERT_OK(dev().stream_is_capturing(capturing, &status));
  EXPECT_EQ(status, CaptureStatus::Active);
  Graph g;
  ASSERT_OK(dev().stream_end_capture(capturing, &g));
  ASSERT_OK(dev().graph_destroy(g));
}

TEST_F(CudaDeviceTest, StreamQueryReportsBusyStream) {
  uint32_t* a = alloc_words(1);
  Stream s = make_stream();
  ASSERT_OK(dev().launch(k::spin_u32(a, kSpinCycles), s));
  EXPECT_STATUS(Status::NotReady, dev().stream_query(s));
  ASSERT_OK(dev().stream_synchronize(s));
  EXPECT_STATUS(Status::Success, dev().stream_query(s));
  EXPECT_EQ(read(a, 1)[0], 1u);
}

TEST_F(CudaDeviceTest, EventOrdersTwoStreams) {
  constexpr size_t n = 4096;
  uint32_t* data = alloc_words(n);
  uint32_t* out = alloc_words(n);
  uint32_t* spin = alloc_words(1);
  Stream producer = make_stream();
  Stream consumer = make_stream();
  Event ready;
  ASSERT_OK(dev().event_create(&ready));
  // The producer is slow; without the wait the consumer would copy zeros.
  ASSERT_OK(dev().launch(k::spin_u32(spin, kSpinCycles), producer));
  ASSERT_OK(dev().launch(k::fill_u32(data, n, 7), producer));
  ASSERT_OK(dev().event_record(ready, producer));
  ASSERT_OK(dev().stream_wait_event(consumer, ready));
  ASSERT_OK(dev().launch(k::copy_u32(out, data, n), consumer));
  ASSERT_OK(dev().stream_synchronize(consumer));
  EXPECT_STATUS(Status::Success, dev().event_query(ready));
  EXPECT_EQ(read(out, n), std::vector<uint32_t>(n, 7));
  ASSERT_OK(dev().event_destroy(ready));
}

TEST_F(CudaDeviceTest, CaptureStatusAndId) {
  Stream s = make_stream();
  CaptureStatus status = CaptureStatus::Invalidated;
  uint64_t id = 99;
  ASSERT_OK(dev().stream_get_capture_info(s, &status, &id));
  EXPECT_EQ(status, CaptureStatus::None);
  EXPECT_EQ(id, 0u);
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().stream_get_capture_info(s, &status, &id));
  EXPECT_EQ(status, CaptureStatus::Active);
  EXPECT_NE(id, 0u);
  // Begin on a stream already capturing: IllegalState, capture still active.
  EXPECT_STATUS(Status::IllegalState, dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().stream_is_capturing(s, &status));
  EXPECT_EQ(status, CaptureStatus::Active);
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  size_t nodes = 99;
  ASSERT_OK(dev().graph_node_count(g, &nodes));
  EXPECT_EQ(nodes, 0u);
  ASSERT_OK(dev().stream_get_capture_info(s, &status, &id));
  EXPECT_EQ(status, CaptureStatus::None);
  EXPECT_EQ(id, 0u);
  // Capture on the legacy stream is refused.
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev().stream_begin_capture(Stream::legacy(), CaptureMode::Global));
  (void)dev().get_last_error();
  ASSERT_OK(dev().graph_destroy(g));
}

TEST_F(CudaDeviceTest, CaptureDefersWorkAndReplaysBakedPointers) {
  constexpr size_t n = 256;
  uint32_t* a = alloc_words(n);
  uint32_t* b = alloc_words(n);
  Stream s = make_stream();
  uint32_t* target = a;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().launch(k::increment_u32(target, n), s));
  ASSERT_OK(dev().launch(k::scale_u32(target, n, 3), s));
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  size_t nodes = 0;
  ASSERT_OK(dev().graph_node_count(g, &nodes));
  EXPECT_EQ(nodes, 2u);
  // Captured work did not run.
  EXPECT_EQ(read(a, n), std::vector<uint32_t>(n, 0));
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g));
  // Rebinding on the host does not reach the graph: it replays on `a`.
  target = b;
  ASSERT_OK(dev().graph_launch(x, s));  // a = (0+1)*3 = 3
  ASSERT_OK(dev().graph_launch(x, s));  // a = (3+1)*3 = 12
  Stream other = make_stream();         // a graph may replay on any stream
  ASSERT_OK(dev().stream_synchronize(s));
  ASSERT_OK(dev().graph_launch(x, other));  // a = 39
  ASSERT_OK(dev().stream_synchronize(other));
  EXPECT_EQ(read(a, n), std::vector<uint32_t>(n, 39));
  EXPECT_EQ(read(b, n), std::vector<uint32_t>(n, 0));
  ASSERT_OK(dev().graph_exec_destroy(x));
  ASSERT_OK(dev().graph_destroy(g));
}

TEST_F(CudaDeviceTest, ProhibitedCallInvalidatesCapture) {
  Stream s = make_stream();
  MemoryStats before = dev().memory_stats();
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  void* p = nullptr;
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev().malloc(&p, 1024, MemCategory::Workspace));
  CaptureStatus status;
  ASSERT_OK(dev().stream_is_capturing(s, &status));
  EXPECT_EQ(status, CaptureStatus::Invalidated);
  uint32_t* a = nullptr;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev().launch(k::fill_u32(a, 1, 1), s));
  Graph g{42};
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev().stream_end_capture(s, &g));
  EXPECT_EQ(g, Graph{});
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev().get_last_error());
  EXPECT_STATUS(Status::Success, dev().get_last_error());
  // The refused allocation left the ledger alone.
  MemoryStats after = dev().memory_stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after[MemCategory::Workspace].allocations, before[MemCategory::Workspace].allocations);
  // The stream captures again normally.
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().stream_end_capture(s, &g));
  ASSERT_OK(dev().graph_destroy(g));
}

// The runtime reads memory_stats() at any time, captures included: the allocator queries behind it
// must not be calls that invalidate a capture.
TEST_F(CudaDeviceTest, MemoryStatsDuringCaptureKeepsItActive) {
  Stream s = make_stream();
  for (CaptureMode mode : {CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed}) {
    ASSERT_OK(dev().stream_begin_capture(s, mode));
    void* p = nullptr;
    ASSERT_OK(dev().malloc_async(&p, 4096, s, MemCategory::Activations));
    MemoryStats st = dev().memory_stats();
    EXPECT_GE(st.pool_used_bytes, 0);
    EXPECT_GE(st.graph_mem_used_bytes, 0);
    dev().reset_peak_memory();
    ASSERT_OK(dev().free_async(p, s));
    CaptureStatus status;
    ASSERT_OK(dev().stream_is_capturing(s, &status));
    EXPECT_EQ(status, CaptureStatus::Active) << capture_mode_name(mode);
    Graph g;
    ASSERT_OK(dev().stream_end_capture(s, &g));
    ASSERT_OK(dev().graph_destroy(g));
  }
  EXPECT_STATUS(Status::Success, dev().get_last_error());
}

TEST_F(CudaDeviceTest, CrossStreamCaptureWithEvents) {
  constexpr size_t n = 128;
  uint32_t* a = alloc_words(n);
  uint32_t* b = alloc_words(n);
  Stream origin = make_stream();
  Stream side = make_stream();
  Event fork, join, outside;
  ASSERT_OK(dev().event_create(&fork));
  ASSERT_OK(dev().event_create(&join));
  ASSERT_OK(dev().event_create(&outside));
  ASSERT_OK(dev().event_record(outside, side));  // recorded before the capture: uncaptured
  ASSERT_OK(dev().stream_begin_capture(origin, CaptureMode::Global));
  ASSERT_OK(dev().event_record(fork, origin));
  ASSERT_OK(dev().stream_wait_event(side, fork));  // side joins the capture
  uint64_t origin_id = 0, side_id = 0;
  CaptureStatus status;
  ASSERT_OK(dev().stream_get_capture_info(origin, &status, &origin_id));
  ASSERT_OK(dev().stream_get_capture_info(side, &status, &side_id));
  EXPECT_EQ(status, CaptureStatus::Active);
  EXPECT_EQ(origin_id, side_id);
  ASSERT_OK(dev().launch(k::fill_u32(a, n, 4), origin));
  ASSERT_OK(dev().launch(k::fill_u32(b, n, 6), side));
  // Waiting on an uncaptured event with cudaEventWaitExternal is a node, not an error.
  ASSERT_OK(dev().stream_wait_event(side, outside, /*external=*/true));
  ASSERT_OK(dev().event_record(join, side));
  ASSERT_OK(dev().stream_wait_event(origin, join));
  ASSERT_OK(dev().launch(k::add_u32(a, b, n), origin));
  Graph g;
  ASSERT_OK(dev().stream_end_capture(origin, &g));
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g));
  ASSERT_OK(dev().graph_launch(x, origin));
  ASSERT_OK(dev().stream_synchronize(origin));
  EXPECT_EQ(read(a, n), std::vector<uint32_t>(n, 10));
  // Without the external flag, waiting on uncaptured work is an isolation error.
  ASSERT_OK(dev().stream_begin_capture(origin, CaptureMode::Global));
  EXPECT_STATUS(Status::StreamCaptureIsolation, dev().stream_wait_event(origin, outside));
  ASSERT_OK(dev().stream_is_capturing(origin, &status));
  EXPECT_EQ(status, CaptureStatus::Invalidated);
  Graph none;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev().stream_end_capture(origin, &none));
  (void)dev().get_last_error();
  ASSERT_OK(dev().graph_exec_destroy(x));
  ASSERT_OK(dev().graph_destroy(g));
}

TEST_F(CudaDeviceTest, HostNodeRunsOncePerReplay) {
  Stream s = make_stream();
  std::atomic<int> captured_runs{0};
  std::atomic<int> eager_runs{0};
  ASSERT_OK(dev().launch_host_func(s, [&eager_runs] { eager_runs++; }));
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().launch_host_func(s, [&captured_runs] { captured_runs++; }));
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  ASSERT_OK(dev().stream_synchronize(s));
  EXPECT_EQ(eager_runs.load(), 1);
  EXPECT_EQ(captured_runs.load(), 0);  // not run at capture
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g));
  // The closure must outlive the graph it was captured into: destroy the graph, keep replaying.
  ASSERT_OK(dev().graph_destroy(g));
  for (int i = 0; i < 3; ++i) ASSERT_OK(dev().graph_launch(x, s));
  ASSERT_OK(dev().stream_synchronize(s));
  EXPECT_EQ(captured_runs.load(), 3);
  EXPECT_EQ(eager_runs.load(), 1);
  ASSERT_OK(dev().graph_exec_destroy(x));
}

TEST_F(CudaDeviceTest, ExecUpdateSameTopologyRetargets) {
  constexpr size_t n = 64;
  uint32_t* a = alloc_words(n);
  uint32_t* b = alloc_words(n);
  Stream s = make_stream();
  Graph g1, g2;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().launch(k::fill_u32(a, n, 1), s));
  ASSERT_OK(dev().stream_end_capture(s, &g1));
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().launch(k::fill_u32(b, n, 2), s));
  ASSERT_OK(dev().stream_end_capture(s, &g2));
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g1));
  GraphExecUpdateResult result = GraphExecUpdateResult::Error;
  ASSERT_OK(dev().graph_exec_update(x, g2, &result));
  EXPECT_EQ(result, GraphExecUpdateResult::Success);
  ASSERT_OK(dev().graph_launch(x, s));
  ASSERT_OK(dev().stream_synchronize(s));
  EXPECT_EQ(read(a, n), std::vector<uint32_t>(n, 0));
  EXPECT_EQ(read(b, n), std::vector<uint32_t>(n, 2));
  ASSERT_OK(dev().graph_exec_destroy(x));
  ASSERT_OK(dev().graph_destroy(g1));
  ASSERT_OK(dev().graph_destroy(g2));
}

TEST_F(CudaDeviceTest, ExecUpdateChangedTopologyFails) {
  constexpr size_t n = 64;
  uint32_t* a = alloc_words(n);
  Stream s = make_stream();
  Graph g1, g2;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().launch(k::fill_u32(a, n, 1), s));
  ASSERT_OK(dev().stream_end_capture(s, &g1));
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().launch(k::fill_u32(a, n, 2), s));
  ASSERT_OK(dev().launch(k::increment_u32(a, n), s));
  ASSERT_OK(dev().stream_end_capture(s, &g2));
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g1));
  GraphExecUpdateResult result = GraphExecUpdateResult::Success;
  EXPECT_STATUS(Status::GraphExecUpdateFailure, dev().graph_exec_update(x, g2, &result));
  EXPECT_EQ(result, GraphExecUpdateResult::ErrorTopologyChanged);
  (void)dev().get_last_error();
  // The executable still runs its old graph.
  ASSERT_OK(dev().graph_launch(x, s));
  ASSERT_OK(dev().stream_synchronize(s));
  EXPECT_EQ(read(a, n), std::vector<uint32_t>(n, 1));
  ASSERT_OK(dev().graph_exec_destroy(x));
  ASSERT_OK(dev().graph_destroy(g1));
  ASSERT_OK(dev().graph_destroy(g2));
}

TEST_F(CudaDeviceTest, GraphMemoryNodeWithoutAutoFree) {
  constexpr size_t n = 2048;
  constexpr int64_t bytes = n * sizeof(uint32_t);
  uint32_t* out = alloc_words(n, MemCategory::Activations);
  Stream s = make_stream();
  void* p = nullptr;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().malloc_async(&p, bytes, s, MemCategory::Activations));
  ASSERT_NE(p, nullptr);
  auto* words = static_cast<uint32_t*>(p);
  ASSERT_OK(dev().launch(k::fill_u32(words, n, 5), s));
  ASSERT_OK(dev().launch(k::add_u32(out, words, n), s));
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  // Captured: nothing is live yet, and nothing went to the category that was asked for.
  MemoryStats st = dev().memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, 0);
  EXPECT_EQ(st[MemCategory::Activations].live_bytes, bytes);  // `out` only
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g));
  GraphExec second;
  EXPECT_STATUS(Status::NotSupported, dev().graph_instantiate(&second, g));  // unfreed allocation
  (void)dev().get_last_error();
  ASSERT_OK(dev().graph_launch(x, s));
  ASSERT_OK(dev().stream_synchronize(s));
  st = dev().memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, bytes);
  EXPECT_EQ(st[MemCategory::Activations].live_bytes, bytes);
  EXPECT_GT(st.graph_mem_used_bytes, 0);
  EXPECT_EQ(read(out, n), std::vector<uint32_t>(n, 5));
  // Relaunch while the allocation is live: refused, and not counted twice.
  EXPECT_STATUS(Status::InvalidValue, dev().graph_launch(x, s));
  (void)dev().get_last_error();
  EXPECT_EQ(dev().memory_stats()[MemCategory::GraphPool].live_bytes, bytes);
  // Freed outside the graph: the next launch allocates it again, at the same address.
  ASSERT_OK(dev().free_async(p, s));
  EXPECT_EQ(dev().memory_stats()[MemCategory::GraphPool].live_bytes, 0);
  ASSERT_OK(dev().graph_launch(x, s));
  ASSERT_OK(dev().stream_synchronize(s));
  st = dev().memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, bytes);
  EXPECT_EQ(st[MemCategory::GraphPool].allocations, 2);
  EXPECT_EQ(read(out, n), std::vector<uint32_t>(n, 10));
  ASSERT_OK(dev().free(p));  // cudaFree ends a graph allocation too
  EXPECT_EQ(dev().memory_stats()[MemCategory::GraphPool].live_bytes, 0);
  ASSERT_OK(dev().graph_launch(x, s));  // so CUDA lets the graph allocate it again
  EXPECT_EQ(dev().memory_stats()[MemCategory::GraphPool].live_bytes, bytes);
  ASSERT_OK(dev().free_async(p, s));
  ASSERT_OK(dev().stream_synchronize(s));
  EXPECT_EQ(dev().memory_stats()[MemCategory::GraphPool].live_bytes, 0);
  ASSERT_OK(dev().graph_exec_destroy(x));
  ASSERT_OK(dev().graph_destroy(g));
}

TEST_F(CudaDeviceTest, GraphMemoryNodeWithAutoFreeOnLaunch) {
  constexpr size_t n = 4096;
  constexpr int64_t bytes = n * sizeof(uint32_t);
  uint32_t* out = alloc_words(n);
  Stream s = make_stream();
  void* p = nullptr;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::ThreadLocal));
  ASSERT_OK(dev().malloc_async(&p, bytes, s, MemCategory::Workspace));
  ASSERT_OK(dev().launch(k::fill_u32(static_cast<uint32_t*>(p), n, 2), s));
  ASSERT_OK(dev().launch(k::add_u32(out, static_cast<uint32_t*>(p), n), s));
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g, kGraphInstantiateAutoFreeOnLaunch));
  for (int i = 0; i < 3; ++i) ASSERT_OK(dev().graph_launch(x, s));
  ASSERT_OK(dev().stream_synchronize(s));
  MemoryStats st = dev().memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, bytes);  // one live allocation, not three
  EXPECT_EQ(st[MemCategory::GraphPool].peak_bytes, bytes);
  EXPECT_EQ(st[MemCategory::GraphPool].allocations, 3);
  EXPECT_EQ(st[MemCategory::Workspace].live_bytes, 0);
  EXPECT_GT(st.graph_mem_used_bytes, 0);
  EXPECT_EQ(read(out, n), std::vector<uint32_t>(n, 6));
  ASSERT_OK(dev().free_async(p, s));
  ASSERT_OK(dev().stream_synchronize(s));
  EXPECT_EQ(dev().memory_stats()[MemCategory::GraphPool].live_bytes, 0);
  ASSERT_OK(dev().graph_exec_destroy(x));
  ASSERT_OK(dev().graph_destroy(g));
}

TEST_F(CudaDeviceTest, GraphMemoryFreedInsideTheGraph) {
  constexpr size_t n = 1024;
  constexpr int64_t bytes = n * sizeof(uint32_t);
  uint32_t* out = alloc_words(n);
  Stream s = make_stream();
  void* p = nullptr;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Relaxed));
  ASSERT_OK(dev().malloc_async(&p, bytes, s, MemCategory::Activations));
  ASSERT_OK(dev().launch(k::iota_u32(static_cast<uint32_t*>(p), n, 0), s));
  ASSERT_OK(dev().launch(k::add_u32(out, static_cast<uint32_t*>(p), n), s));
  ASSERT_OK(dev().free_async(p, s));
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  size_t nodes = 0;
  ASSERT_OK(dev().graph_node_count(g, &nodes));
  EXPECT_EQ(nodes, 4u);  // alloc, two kernels, free
  GraphExec x1, x2;
  ASSERT_OK(dev().graph_instantiate(&x1, g));
  // A graph with memory nodes has one executable at a time, even when it frees all it allocates.
  EXPECT_STATUS(Status::NotSupported, dev().graph_instantiate(&x2, g));
  (void)dev().get_last_error();
  ASSERT_OK(dev().graph_launch(x1, s));
  ASSERT_OK(dev().graph_launch(x1, s));
  ASSERT_OK(dev().graph_exec_destroy(x1));
  ASSERT_OK(dev().graph_instantiate(&x2, g));  // the first is gone: instantiable again
  ASSERT_OK(dev().graph_launch(x2, s));
  ASSERT_OK(dev().stream_synchronize(s));
  MemoryStats st = dev().memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, 0);
  EXPECT_EQ(st[MemCategory::GraphPool].peak_bytes, bytes);
  EXPECT_EQ(st[MemCategory::GraphPool].allocations, 3);
  EXPECT_GT(st.graph_mem_peak_bytes, 0);
  auto got = read(out, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 3u * i) << i;
  ASSERT_OK(dev().graph_exec_destroy(x2));
  ASSERT_OK(dev().graph_destroy(g));
}

// Measured on an H200: a free node can free only a graph allocation; the capture stays active.
TEST_F(CudaDeviceTest, CapturedFreeOfAnEagerAllocationIsRefused) {
  Stream s = make_stream();
  void* p = nullptr;
  ASSERT_OK(dev().malloc_async(&p, 4096, s, MemCategory::Activations));
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  EXPECT_STATUS(Status::InvalidValue, dev().free_async(p, s));
  CaptureStatus status;
  ASSERT_OK(dev().stream_is_capturing(s, &status));
  EXPECT_EQ(status, CaptureStatus::Active);
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  (void)dev().get_last_error();
  EXPECT_EQ(dev().memory_stats()[MemCategory::Activations].live_bytes, 4096);
  ASSERT_OK(dev().free_async(p, s));
  EXPECT_EQ(dev().memory_stats().live_bytes, 0);
  ASSERT_OK(dev().graph_destroy(g));
}

// The memory nodes of a capture that was invalidated are dropped with it; the next capture on the
// same stream starts from nothing.
TEST_F(CudaDeviceTest, InvalidatedCaptureDropsItsMemoryNodes) {
  Stream s = make_stream();
  void* lost = nullptr;
  void* refused = nullptr;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().malloc_async(&lost, 8192, s, MemCategory::Activations));
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev().malloc(&refused, 16, MemCategory::Other));
  Graph none;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev().stream_end_capture(s, &none));
  (void)dev().get_last_error();
  void* kept = nullptr;
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  ASSERT_OK(dev().malloc_async(&kept, 2048, s, MemCategory::Activations));
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  GraphExec x;
  ASSERT_OK(dev().graph_instantiate(&x, g));
  ASSERT_OK(dev().graph_launch(x, s));
  MemoryStats st = dev().memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, 2048);
  EXPECT_EQ(st[MemCategory::GraphPool].allocations, 1);
  EXPECT_EQ(st.live_bytes, 2048);
  ASSERT_OK(dev().free_async(kept, s));
  ASSERT_OK(dev().stream_synchronize(s));
  ASSERT_OK(dev().graph_exec_destroy(x));
  ASSERT_OK(dev().graph_destroy(g));
}

// Measured on an H200: zero-byte allocations succeed with a null pointer and no graph node.
TEST_F(CudaDeviceTest, ZeroByteAllocationsAreNullAndUnaccounted) {
  Stream s = make_stream();
  void* p = reinterpret_cast<void*>(1);
  ASSERT_OK(dev().malloc(&p, 0, MemCategory::Other));
  EXPECT_EQ(p, nullptr);
  p = reinterpret_cast<void*>(1);
  ASSERT_OK(dev().malloc_async(&p, 0, s, MemCategory::Other));
  EXPECT_EQ(p, nullptr);
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  p = reinterpret_cast<void*>(1);
  ASSERT_OK(dev().malloc_async(&p, 0, s, MemCategory::Other));
  EXPECT_EQ(p, nullptr);
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  size_t nodes = 99;
  ASSERT_OK(dev().graph_node_count(g, &nodes));
  EXPECT_EQ(nodes, 0u);
  MemoryStats st = dev().memory_stats();
  EXPECT_EQ(st.live_bytes, 0);
  EXPECT_EQ(st[MemCategory::Other].allocations, 0);
  ASSERT_OK(dev().graph_destroy(g));
}

TEST_F(CudaDeviceTest, EagerStreamOrderedAllocationsUseThePool) {
  Stream s = make_stream();
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_OK(dev().malloc_async(&a, 1 << 20, s, MemCategory::Activations));
  ASSERT_OK(dev().malloc_async(&b, 1 << 16, s, MemCategory::Workspace));
  ASSERT_OK(dev().stream_synchronize(s));
  MemoryStats st = dev().memory_stats();
  EXPECT_EQ(st[MemCategory::Activations].live_bytes, 1 << 20);
  EXPECT_EQ(st[MemCategory::Workspace].live_bytes, 1 << 16);
  EXPECT_GE(st.pool_used_bytes, (1 << 20) + (1 << 16));
  EXPECT_GE(st.pool_peak_bytes, st.pool_used_bytes);
  ASSERT_OK(dev().free_async(a, s));
  ASSERT_OK(dev().free_async(b, s));
  ASSERT_OK(dev().stream_synchronize(s));
  st = dev().memory_stats();
  EXPECT_EQ(st.live_bytes, 0);
  EXPECT_EQ(st.peak_bytes, (1 << 20) + (1 << 16));
  EXPECT_EQ(st.pool_used_bytes, 0);
  // A free of something that is not an allocation is refused and changes nothing.
  int on_host = 0;
  EXPECT_NE(Status::Success, dev().free(&on_host));
  (void)dev().get_last_error();
  EXPECT_EQ(dev().memory_stats().live_bytes, 0);
  // reset_peak_memory brings every peak down to what is live.
  dev().reset_peak_memory();
  st = dev().memory_stats();
  EXPECT_EQ(st.peak_bytes, 0);
  EXPECT_EQ(st[MemCategory::Activations].peak_bytes, 0);
  EXPECT_EQ(st.pool_peak_bytes, 0);
}

TEST_F(CudaDeviceTest, PinnedHostMemoryRoundTrip) {
  constexpr size_t n = 512;
  void* host = nullptr;
  ASSERT_OK(dev().malloc_host(&host, n * sizeof(uint32_t)));
  auto* h = static_cast<uint32_t*>(host);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint32_t>(i * 7);
  uint32_t* d = alloc_words(n);
  Stream s = make_stream();
  ASSERT_OK(dev().memcpy_async(d, h, n * sizeof(uint32_t), CopyKind::HostToDevice, s));
  ASSERT_OK(dev().launch(k::increment_u32(d, n), s));
  ASSERT_OK(dev().memcpy_async(h, d, n * sizeof(uint32_t), CopyKind::DeviceToHost, s));
  ASSERT_OK(dev().stream_synchronize(s));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], i * 7 + 1) << i;
  EXPECT_EQ(dev().memory_stats().live_bytes, static_cast<int64_t>(n * sizeof(uint32_t)));  // pinned host is not device memory
  ASSERT_OK(dev().free_host(host));
}

TEST_F(CudaDeviceTest, ThreadCaptureModeExchange) {
  CaptureMode mode = CaptureMode::Relaxed;
  ASSERT_OK(dev().thread_exchange_capture_mode(&mode));
  EXPECT_EQ(mode, CaptureMode::Global);
  // Relaxed: cudaMalloc during this thread's own global capture is allowed (eager).
  Stream s = make_stream();
  ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
  void* p = nullptr;
  EXPECT_STATUS(Status::Success, dev().malloc(&p, 256, MemCategory::Other));
  EXPECT_EQ(dev().memory_stats()[MemCategory::Other].live_bytes, 256);
  Graph g;
  ASSERT_OK(dev().stream_end_capture(s, &g));
  ASSERT_OK(dev().graph_destroy(g));
  ASSERT_OK(dev().thread_exchange_capture_mode(&mode));
  EXPECT_EQ(mode, CaptureMode::Relaxed);
  // Another thread's mode is its own.
  CaptureMode seen = CaptureMode::Relaxed;
  std::thread t([&] {
    CaptureMode m = CaptureMode::Global;
    if (dev().thread_exchange_capture_mode(&m) == Status::Success) seen = m;
  });
  t.join();
  EXPECT_EQ(seen, CaptureMode::Global);
  ASSERT_OK(dev().free(p));
}

// Several devices in turn: one left with live memory, a live graph allocation, a kept host
// closure and an open capture must leave the context clean for the next.
TEST_F(CudaDeviceTest, TeardownLeavesTheContextUsable) {
  {
    Stream s = make_stream();
    void* a = nullptr;
    void* b = nullptr;
    ASSERT_OK(dev().malloc(&a, 1 << 20, MemCategory::Parameters));
    ASSERT_OK(dev().malloc_async(&b, 1 << 20, s, MemCategory::Activations));
    void* g = nullptr;
    ASSERT_OK(dev().stream_begin_capture(s, CaptureMode::Global));
    ASSERT_OK(dev().malloc_async(&g, 1 << 20, s, MemCategory::Activations));
    ASSERT_OK(dev().launch_host_func(s, [] {}));
    Graph graph;
    ASSERT_OK(dev().stream_end_capture(s, &graph));
    GraphExec x;
    ASSERT_OK(dev().graph_instantiate(&x, graph));
    ASSERT_OK(dev().graph_launch(x, s));
    ASSERT_OK(dev().stream_synchronize(s));
    Stream open = make_stream();
    ASSERT_OK(dev().stream_begin_capture(open, CaptureMode::ThreadLocal));
    EXPECT_GT(dev().memory_stats().graph_mem_used_bytes, 0);
    dev_.reset();  // teardown with all of that outstanding
  }
  std::string error;
  auto next = cuda::make_cuda_device({}, &error);
  ASSERT_NE(next, nullptr) << error;
  EXPECT_STATUS(Status::Success, next->get_last_error());
  MemoryStats st = next->memory_stats();
  EXPECT_EQ(st.live_bytes, 0);
  EXPECT_EQ(st.pool_used_bytes, 0);
  EXPECT_EQ(st.graph_mem_used_bytes, 0);
  constexpr size_t n = 32;
  void* p = nullptr;
  ASSERT_OK(next->malloc(&p, n * sizeof(uint32_t), MemCategory::Other));
  ASSERT_OK(next->launch(k::fill_u32(static_cast<uint32_t*>(p), n, 8), Stream::legacy()));
  std::vector<uint32_t> got(n);
  ASSERT_OK(next->memcpy(got.data(), p, n * sizeof(uint32_t), CopyKind::DeviceToHost));
  EXPECT_EQ(got, std::vector<uint32_t>(n, 8));
}

}  // namespace
}  // namespace recap::device
