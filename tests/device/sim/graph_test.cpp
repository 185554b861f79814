// Graphs: replay with pointers baked in at capture, host nodes, node counts, exec update, graph
// memory nodes (instantiate once, relaunch, AutoFreeOnLaunch), handles.
#include <atomic>

#include "tests/device/sim/sim_test_util.h"

namespace recap::device::simtest {
namespace {

namespace k = kernels;

class SimGraph : public TwoStreams {
 protected:

  // Captures `body` on s1 into a graph.
  Graph capture(const std::function<void()>& body, CaptureMode mode = CaptureMode::Global) {
    Graph g;
    EXPECT_STATUS(Status::Success, dev->stream_begin_capture(s1, mode));
    body();
    EXPECT_STATUS(Status::Success, dev->stream_end_capture(s1, &g));
    return g;
  }
  GraphExec instantiate(Graph g, unsigned flags = 0) {
    GraphExec e;
    EXPECT_STATUS(Status::Success, dev->graph_instantiate(&e, g, flags));
    return e;
  }
  // Launches `e` on s1 and waits for it: the first call that did not succeed, else Success.
  Status replay(GraphExec e) {
    Status st = dev->graph_launch(e, s1);
    return st == Status::Success ? dev->stream_synchronize(s1) : st;
  }
};

TEST_F(SimGraph, ReplayUsesThePointersBakedInAtCapture) {
  uint32_t* x = new_buffer(*dev, 2);
  uint32_t* y = new_buffer(*dev, 2);
  uint32_t* bound = x;  // the "tensor" the program uses; rebinding it later must not affect the graph
  Graph g = capture([&] { ASSERT_OK(dev->launch(k::increment_u32(bound, 2), s1)); });
  GraphExec e = instantiate(g);
  bound = y;
  for (int i = 0; i < 3; ++i) ASSERT_OK(dev->graph_launch(e, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_EQ(read_back(*dev, x, 2), (std::vector<uint32_t>{3, 3}));
  EXPECT_EQ(read_back(*dev, y, 2), (std::vector<uint32_t>{0, 0}));
}

TEST_F(SimGraph, ReplaysOnAnyStreamInLaunchOrder) {
  uint32_t* x = new_buffer(*dev, 1);
  Graph g = capture([&] {
    ASSERT_OK(dev->launch(k::scale_u32(x, 1, 2), s1));
    ASSERT_OK(dev->launch(k::increment_u32(x, 1), s1));
  });
  GraphExec e = instantiate(g);
  ASSERT_OK(dev->graph_launch(e, s1));
  ASSERT_OK(dev->graph_launch(e, s2));
  ASSERT_OK(dev->device_synchronize());
  EXPECT_EQ(read_word(*dev, x), 3u);  // (0*2+1)*2+1
}

TEST_F(SimGraph, NodeCountCoversEveryNodeKind) {
  uint32_t* x = new_buffer(*dev, 4);
  uint32_t* y = new_buffer(*dev, 4);
  Event uncaptured = new_event(*dev), inside = new_event(*dev);
  ASSERT_OK(dev->event_record(uncaptured, s2));
  Graph g = capture([&] {
    ASSERT_OK(dev->launch(k::fill_u32(x, 4, 1), s1));                          // kernel
    ASSERT_OK(dev->memcpy_async(y, x, 16, CopyKind::DeviceToDevice, s1));     // memcpy
    ASSERT_OK(dev->memset_async(x, 0, 16, s1));                               // memset
    ASSERT_OK(dev->launch_host_func(s1, [] {}));                              // host
    ASSERT_OK(dev->stream_wait_event(s1, uncaptured, /*external=*/true));     // event wait
    void* p = nullptr;
    ASSERT_OK(dev->malloc_async(&p, 512, s1, MemCategory::Workspace));        // mem alloc
    ASSERT_OK(dev->free_async(p, s1));                                        // mem free
    ASSERT_OK(dev->event_record(inside, s1));                                 // no node
  });
  EXPECT_EQ(node_count(*dev, g), 7u);
}

TEST_F(SimGraph, HostNodeRunsOncePerReplayNotAtCapture) {
  std::atomic<int> runs{0};
  Graph g = capture([&] { ASSERT_OK(dev->launch_host_func(s1, [&] { runs += 1; })); });
  EXPECT_EQ(runs, 0);
  GraphExec e = instantiate(g);
  EXPECT_EQ(runs, 0);
  for (int i = 1; i <= 3; ++i) {
    ASSERT_OK(replay(e));
    EXPECT_EQ(runs, i);
  }
}

TEST_F(SimGraph, EagerHostFuncRunsInStreamOrder) {
  uint32_t* x = new_buffer(*dev, 1);
  uint32_t seen = 0;
  ASSERT_OK(dev->launch(k::fill_u32(x, 1, 8), s1));
  ASSERT_OK(dev->launch_host_func(s1, [&] { seen = *x; }));  // sim memory is host memory
  ASSERT_OK(dev->launch(k::fill_u32(x, 1, 9), s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_EQ(seen, 8u);
}

TEST_F(SimGraph, HostFunctionMayNotCallTheDevice) {
  // CUDA forbids CUDA calls from host functions (cudaErrorNotPermitted); sim refuses them rather
  // than deadlocking.
  Status inner = Status::Unknown;
  ASSERT_OK(dev->launch_host_func(s1, [&] { inner = dev->stream_query(s2); }));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_STATUS(Status::NotSupported, inner);
  EXPECT_STATUS(Status::Success, dev->stream_query(s2));
}

TEST_F(SimGraph, ExecUpdateWithSameTopologyRetargetsKernels) {
  uint32_t* a = new_buffer(*dev, 2);
  uint32_t* b = new_buffer(*dev, 2);
  Graph ga = capture([&] { ASSERT_OK(dev->launch(k::fill_u32(a, 2, 1), s1)); });
  Graph gb = capture([&] { ASSERT_OK(dev->launch(k::fill_u32(b, 2, 2), s1)); });
  GraphExec e = instantiate(ga);
  GraphExecUpdateResult result = GraphExecUpdateResult::Error;
  EXPECT_STATUS(Status::Success, dev->graph_exec_update(e, gb, &result));
  EXPECT_EQ(result, GraphExecUpdateResult::Success);
  ASSERT_OK(replay(e));
  EXPECT_EQ(read_word(*dev, a), 0u);
  EXPECT_EQ(read_word(*dev, b), 2u);
}

TEST_F(SimGraph, ExecUpdateWithChangedTopologyFailsAndKeepsTheExecutable) {
  uint32_t* a = new_buffer(*dev, 1);
  Graph one = capture([&] { ASSERT_OK(dev->launch(k::increment_u32(a, 1), s1)); });
  Graph two = capture([&] {
    ASSERT_OK(dev->launch(k::increment_u32(a, 1), s1));
    ASSERT_OK(dev->launch(k::increment_u32(a, 1), s1));
  });
  GraphExec e = instantiate(one);
  GraphExecUpdateResult result = GraphExecUpdateResult::Success;
  EXPECT_STATUS(Status::GraphExecUpdateFailure, dev->graph_exec_update(e, two, &result));
  EXPECT_EQ(result, GraphExecUpdateResult::ErrorTopologyChanged);
  ASSERT_OK(replay(e));
  EXPECT_EQ(read_word(*dev, a), 1u) << "the executable still runs its original single node";
}

TEST_F(SimGraph, ExecUpdateWithAChangedNodeTypeFails) {
  uint32_t* a = new_buffer(*dev, 1);
  Graph kern = capture([&] { ASSERT_OK(dev->launch(k::increment_u32(a, 1), s1)); });
  Graph set = capture([&] { ASSERT_OK(dev->memset_async(a, 0, 4, s1)); });
  GraphExec e = instantiate(kern);
  GraphExecUpdateResult result = GraphExecUpdateResult::Success;
  EXPECT_STATUS(Status::GraphExecUpdateFailure, dev->graph_exec_update(e, set, &result));
  EXPECT_EQ(result, GraphExecUpdateResult::ErrorNodeTypeChanged);
}

TEST_F(SimGraph, DestroyedAndUnknownHandlesAreInvalidResourceHandle) {
  Graph g = capture([] {});
  GraphExec e = instantiate(g);
  ASSERT_OK(dev->graph_exec_destroy(e));
  ASSERT_OK(dev->graph_destroy(g));
  size_t n = 0;
  GraphExec e2;
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->graph_launch(e, s1));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->graph_exec_destroy(e));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->graph_destroy(g));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->graph_node_count(g, &n));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->graph_instantiate(&e2, g));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->stream_synchronize(Stream{999}));
  EXPECT_STATUS(Status::InvalidResourceHandle, dev->event_query(Event{999}));
  EXPECT_STATUS(Status::InvalidValue, dev->graph_node_count(Graph{}, nullptr));
  EXPECT_STATUS(Status::InvalidValue, dev->graph_instantiate(&e2, capture([] {}), 0x80));
}

TEST_F(SimGraph, ExecutableOutlivesItsGraph) {
  uint32_t* a = new_buffer(*dev, 1);
  Graph g = capture([&] { ASSERT_OK(dev->launch(k::increment_u32(a, 1), s1)); });
  GraphExec e = instantiate(g);
  ASSERT_OK(dev->graph_destroy(g));
  ASSERT_OK(replay(e));
  EXPECT_EQ(read_word(*dev, a), 1u);
}

TEST_F(SimGraph, LaunchIntoACapturingStreamIs900InEveryMode) {
  // Measured on the H200: no child-graph node; the launch is refused and the capture invalidated.
  Graph inner = capture([] {});
  GraphExec ie = instantiate(inner);
  for (CaptureMode mode : {CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed}) {
    ASSERT_OK(dev->stream_begin_capture(s1, mode));
    EXPECT_STATUS(Status::StreamCaptureUnsupported, dev->graph_launch(ie, s1)) << capture_mode_name(mode);
    EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Invalidated);
    Graph g;
    EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
  }
}

// ---- graph memory nodes ------------------------------------------------------------------

TEST_F(SimGraph, GraphAllocationAddressIsFixedAndHandedOutAtCapture) {
  void* p = nullptr;
  Graph g = capture([&] {
    ASSERT_OK(dev->malloc_async(&p, 4096, s1, MemCategory::Activations));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
    ASSERT_OK(dev->launch(k::fill_u32(static_cast<uint32_t*>(p), 1024, 6), s1));
  });
  EXPECT_EQ(dev->memory_stats()[MemCategory::GraphPool].live_bytes, 0) << "not live before a launch";
  GraphExec e = instantiate(g);
  ASSERT_OK(replay(e));
  EXPECT_EQ(read_word(*dev, static_cast<uint32_t*>(p)), 6u) << "stream work after the launch may use it";
  EXPECT_EQ(dev->memory_stats()[MemCategory::GraphPool].live_bytes, 4096);
  EXPECT_EQ(dev->memory_stats()[MemCategory::Activations].live_bytes, 0) << "accounted as GraphPool";
}

TEST_F(SimGraph, UnfreedAllocationGraphInstantiatesOnceAndRelaunchNeedsAFree) {
  void* p = nullptr;
  Graph g = capture([&] { ASSERT_OK(dev->malloc_async(&p, 1024, s1, MemCategory::Activations)); });
  GraphExec e = instantiate(g);
  GraphExec e2;
  EXPECT_STATUS(Status::NotSupported, dev->graph_instantiate(&e2, g));
  ASSERT_OK(dev->graph_launch(e, s1));
  EXPECT_STATUS(Status::InvalidValue, dev->graph_launch(e, s1));
  ASSERT_OK(dev->free_async(p, s1));  // ends the allocation
  EXPECT_STATUS(Status::Success, dev->graph_launch(e, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  EXPECT_EQ(dev->memory_stats()[MemCategory::GraphPool].live_bytes, 1024);
  ASSERT_OK(dev->free(p));  // so does a synchronous free
  EXPECT_EQ(dev->memory_stats()[MemCategory::GraphPool].live_bytes, 0);
  EXPECT_STATUS(Status::InvalidValue, dev->free(p)) << "already freed";
  // Once the executable is gone, the graph can be instantiated again.
  ASSERT_OK(dev->graph_exec_destroy(e));
  EXPECT_STATUS(Status::Success, dev->graph_instantiate(&e2, g));
}

TEST_F(SimGraph, AutoFreeOnLaunchReallocatesAtTheSameAddress) {
  void* p = nullptr;
  Graph g = capture([&] {
    ASSERT_OK(dev->malloc_async(&p, 2048, s1, MemCategory::Workspace));
    ASSERT_OK(dev->launch(k::increment_u32(static_cast<uint32_t*>(p), 1), s1));
  });
  GraphExec e = instantiate(g, kGraphInstantiateAutoFreeOnLaunch);
  for (int i = 0; i < 3; ++i) ASSERT_OK(dev->graph_launch(e, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  MemoryStats st = dev->memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, 2048);
  EXPECT_EQ(st[MemCategory::GraphPool].peak_bytes, 2048) << "freed before re-allocation, never twice live";
  EXPECT_EQ(st.graph_mem_used_bytes, 2048);
  EXPECT_EQ(read_word(*dev, static_cast<uint32_t*>(p)), 3u) << "same address every launch";
}

TEST_F(SimGraph, AllocationFreedInItsOwnGraphRelaunchesFreely) {
  Graph g = capture([&] {
    void* p = nullptr;
    ASSERT_OK(dev->malloc_async(&p, 1024, s1, MemCategory::Activations));
    ASSERT_OK(dev->launch(k::fill_u32(static_cast<uint32_t*>(p), 256, 1), s1));
    ASSERT_OK(dev->free_async(p, s1));
  });
  GraphExec e = instantiate(g);
  for (int i = 0; i < 2; ++i) EXPECT_STATUS(Status::Success, dev->graph_launch(e, s1));
  ASSERT_OK(dev->stream_synchronize(s1));
  MemoryStats st = dev->memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].live_bytes, 0);
  EXPECT_EQ(st[MemCategory::GraphPool].peak_bytes, 1024);
}

TEST_F(SimGraph, FreeNodeMustFreeAGraphAllocation) {
  void* plain = nullptr;
  ASSERT_OK(dev->malloc_async(&plain, 256, s2, MemCategory::Other));
  void* device = nullptr;
  ASSERT_OK(dev->malloc(&device, 256, MemCategory::Other));
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  // cudaGraphAddMemFreeNode's rule; measured on the H200: InvalidValue, the capture stays Active.
  EXPECT_STATUS(Status::InvalidValue, dev->free_async(plain, s1));
  EXPECT_STATUS(Status::InvalidValue, dev->free_async(device, s1));
  EXPECT_EQ(capture_status(*dev, s1), CaptureStatus::Active);
  Graph g;
  EXPECT_STATUS(Status::Success, dev->stream_end_capture(s1, &g));
  EXPECT_EQ(node_count(*dev, g), 0u);
}

TEST_F(SimGraph, ExecUpdateTakesTheNewGraphsAllocationAddresses) {
  // Measured on the H200: updating with a re-capture whose alloc node has another address
  // succeeds, and the executable then allocates at the new address.
  void *p1 = nullptr, *p2 = nullptr;
  Graph g1 = capture([&] {
    ASSERT_OK(dev->malloc_async(&p1, 1024, s1, MemCategory::Activations));
    ASSERT_OK(dev->launch(k::fill_u32(static_cast<uint32_t*>(p1), 256, 1), s1));
  });
  Graph g2 = capture([&] {
    ASSERT_OK(dev->malloc_async(&p2, 1024, s1, MemCategory::Activations));
    ASSERT_OK(dev->launch(k::fill_u32(static_cast<uint32_t*>(p2), 256, 2), s1));
  });
  ASSERT_NE(p1, p2);
  GraphExec e = instantiate(g1);
  GraphExecUpdateResult result = GraphExecUpdateResult::Error;
  EXPECT_STATUS(Status::Success, dev->graph_exec_update(e, g2, &result));
  EXPECT_EQ(result, GraphExecUpdateResult::Success);
  ASSERT_OK(replay(e));
  EXPECT_EQ(read_word(*dev, static_cast<uint32_t*>(p2)), 2u);
  EXPECT_STATUS(Status::InvalidValue, dev->free(p1)) << "never allocated";
  EXPECT_STATUS(Status::Success, dev->free(p2));
  EXPECT_EQ(dev->memory_stats()[MemCategory::GraphPool].live_bytes, 0);
}

TEST_F(SimGraph, ExecUpdateWithAnotherAllocationSizeFails) {
  Graph g1 = capture([&] {
    void* p = nullptr;
    ASSERT_OK(dev->malloc_async(&p, 1024, s1, MemCategory::Activations));
  });
  Graph g2 = capture([&] {
    void* p = nullptr;
    ASSERT_OK(dev->malloc_async(&p, 2048, s1, MemCategory::Activations));
  });
  GraphExec e = instantiate(g1);
  GraphExecUpdateResult result = GraphExecUpdateResult::Success;
  EXPECT_STATUS(Status::GraphExecUpdateFailure, dev->graph_exec_update(e, g2, &result));
  EXPECT_EQ(result, GraphExecUpdateResult::ErrorParametersChanged);
}

TEST_F(SimGraph, AnotherGraphMayFreeAnUnfreedGraphAllocation) {
  void* p = nullptr;
  Graph ga = capture([&] { ASSERT_OK(dev->malloc_async(&p, 1024, s1, MemCategory::Activations)); });
  Graph gf = capture([&] { ASSERT_OK(dev->free_async(p, s1)); });
  GraphExec ea = instantiate(ga), ef = instantiate(gf);
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(replay(ea));
    EXPECT_EQ(dev->memory_stats()[MemCategory::GraphPool].live_bytes, 1024);
    ASSERT_OK(replay(ef));
    EXPECT_EQ(dev->memory_stats()[MemCategory::GraphPool].live_bytes, 0);
  }
}

TEST_F(SimGraph, FailedCaptureKeepsNoGraphMemory) {
  void* p = nullptr;
  ASSERT_OK(dev->stream_begin_capture(s1, CaptureMode::Global));
  ASSERT_OK(dev->malloc_async(&p, 1024, s1, MemCategory::Activations));
  EXPECT_STATUS(Status::StreamCaptureUnsupported, dev->device_synchronize());
  Graph g;
  EXPECT_STATUS(Status::StreamCaptureInvalidated, dev->stream_end_capture(s1, &g));
  EXPECT_STATUS(Status::InvalidValue, dev->free(p)) << "no graph owns it; it never became live";
  MemoryStats st = dev->memory_stats();
  EXPECT_EQ(st[MemCategory::GraphPool].peak_bytes, 0);
}

}  // namespace
}  // namespace recap::device::simtest
