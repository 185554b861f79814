// A scripted sequence of allocations, frees, captures with graph memory nodes, instantiations and
// replays (with and without AutoFreeOnLaunch), with the memory statistics expected at each
// checkpoint. Portable: it uses only the Device interface and the portable kernels and never
// dereferences a device pointer, so the same script runs on `sim` (tests/device/sim/accounting_test.cpp)
// and on the GPU, whose figures must agree.
//
// The accounting rule both backends apply: ordinary allocations are live from malloc to free under
// their category; stream-ordered ones (malloc_async outside capture) from the call to the free's
// execution, also feeding pool_used/pool_peak; a graph memory node's bytes count as GraphPool
// (whatever category was passed) from the execution of its alloc node to the execution of a free
// (a free node, free_async or free), also feeding graph_mem_used/graph_mem_peak.
//
// On the GPU, pool_* and graph_mem_* come from the CUDA allocator's own counters and may show its
// reservation granularity; every size here is a multiple of 2 MiB to keep them comparable.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/device/device.h"
#include "harness/device/kernels.h"

namespace recap::device::accounting_script {

constexpr int64_t kMiB = int64_t{1} << 20;

struct Checkpoint {
  std::string name;
  MemoryStats stats;
};

struct Call {
  std::string label;
  Status status;
};

struct Run {
  std::vector<Checkpoint> checkpoints;
  std::vector<Call> calls;  // every call the script made, in order, with its result
};

// Runs the script on a fresh device (nothing allocated, peaks zero).
inline Run run(Device& dev) {
  Run out;
  auto call = [&](const std::string& label, Status s) { out.calls.push_back({label, s}); };
  auto checkpoint = [&](const std::string& name) { out.checkpoints.push_back({name, dev.memory_stats()}); };
  auto words = [](int64_t bytes) { return static_cast<size_t>(bytes) / sizeof(uint32_t); };
  auto u32 = [](void* p) { return static_cast<uint32_t*>(p); };
  Stream s;
  auto sync_then_checkpoint = [&](const std::string& name) {
    call("stream synchronize", dev.stream_synchronize(s));
    checkpoint(name);
  };

  checkpoint("fresh");
  void *params = nullptr, *grads = nullptr, *work = nullptr;
  call("malloc parameters 8 MiB", dev.malloc(&params, 8 * kMiB, MemCategory::Parameters));
  call("malloc gradients 8 MiB", dev.malloc(&grads, 8 * kMiB, MemCategory::Gradients));
  call("malloc workspace 4 MiB", dev.malloc(&work, 4 * kMiB, MemCategory::Workspace));
  checkpoint("static");

  call("stream create", dev.stream_create(&s, /*non_blocking=*/true));
  void* x = nullptr;
  call("malloc_async activations 6 MiB", dev.malloc_async(&x, 6 * kMiB, s, MemCategory::Activations));
  checkpoint("stream_ordered_alloc");
  call("free_async activations", dev.free_async(x, s));
  sync_then_checkpoint("stream_ordered_free");

  // Graph 1: A (8 MiB) stays allocated after the graph; T (4 MiB) is freed inside it.
  void *a = nullptr, *t = nullptr;
  Graph g1;
  call("begin capture g1", dev.stream_begin_capture(s, CaptureMode::Global));
  call("captured malloc_async A 8 MiB", dev.malloc_async(&a, 8 * kMiB, s, MemCategory::Activations));
  call("captured fill A", dev.launch(kernels::fill_u32(u32(a), words(8 * kMiB), 1), s));
  call("captured malloc_async T 4 MiB", dev.malloc_async(&t, 4 * kMiB, s, MemCategory::Workspace));
  call("captured copy A -> T", dev.launch(kernels::copy_u32(u32(t), u32(a), words(4 * kMiB)), s));
  call("captured free_async T", dev.free_async(t, s));
  call("end capture g1", dev.stream_end_capture(s, &g1));
  checkpoint("captured");
  GraphExec e1;
  call("instantiate g1", dev.graph_instantiate(&e1, g1, 0));
  checkpoint("instantiated");
  call("launch e1", dev.graph_launch(e1, s));
  sync_then_checkpoint("replay1");
  call("relaunch e1 while A is live", dev.graph_launch(e1, s));
  GraphExec e1_again;
  call("instantiate g1 a second time", dev.graph_instantiate(&e1_again, g1, 0));
  checkpoint("refused");
  call("free_async A", dev.free_async(a, s));
  sync_then_checkpoint("graph_alloc_freed_async");
  call("launch e1 again", dev.graph_launch(e1, s));
  sync_then_checkpoint("replay2");
  call("free A", dev.free(a));
  checkpoint("graph_alloc_freed_sync");
  dev.reset_peak_memory();
  checkpoint("peaks_reset");

  // Graph 2: B (6 MiB) stays allocated; AutoFreeOnLaunch frees it before each relaunch.
  void* b = nullptr;
  Graph g2;
  call("begin capture g2", dev.stream_begin_capture(s, CaptureMode::Global));
  call("captured malloc_async B 6 MiB", dev.malloc_async(&b, 6 * kMiB, s, MemCategory::Activations));
  // a fill, not an increment: B is fresh from malloc_async, and reading it is reading uninitialized
  // memory (compute-sanitizer initcheck reported it on the H200, results/h200/2026-12-05-issue21-s15)
  call("captured fill B", dev.launch(kernels::fill_u32(u32(b), words(6 * kMiB), 2), s));
  call("end capture g2", dev.stream_end_capture(s, &g2));
  GraphExec e2;
  call("instantiate g2 auto-free", dev.graph_instantiate(&e2, g2, kGraphInstantiateAutoFreeOnLaunch));
  call("launch e2", dev.graph_launch(e2, s));
  call("launch e2 again", dev.graph_launch(e2, s));
  sync_then_checkpoint("autofree_replays");
  call("free_async B", dev.free_async(b, s));
  sync_then_checkpoint("autofree_freed");

  call("destroy e1", dev.graph_exec_destroy(e1));
  call("destroy e2", dev.graph_exec_destroy(e2));
  call("destroy g1", dev.graph_destroy(g1));
  call("destroy g2", dev.graph_destroy(g2));
  call("free parameters", dev.free(params));
  call("free gradients", dev.free(grads));
  call("free workspace", dev.free(work));
  call("stream destroy", dev.stream_destroy(s));
  checkpoint("teardown");
  call("get_last_error", dev.get_last_error());
  return out;
}

// The result every call must have: Success, except these.
inline Status expected_status(const std::string& label) {
  if (label == "relaunch e1 while A is live") return Status::InvalidValue;
  if (label == "instantiate g1 a second time") return Status::NotSupported;
  if (label == "get_last_error") return Status::NotSupported;  // the last failure, unread until then
  return Status::Success;
}

// Expected figures at one checkpoint, in MiB.
struct Expected {
  std::string name;
  // By MemCategory: parameters, gradients, activations, workspace, graph_pool, other.
  std::array<int64_t, kNumCategories> live, peak;
  int64_t total_live, total_peak;
  int64_t pool_used, pool_peak;    // stream-ordered allocations
  int64_t graph_used, graph_peak;  // graph memory nodes
};

inline std::vector<Expected> expected() {
  //          name                        live P  G  A  W  GP O     peak P  G  A  W  GP  O   total   pool   graph
  return {
      {"fresh",                   {0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0},   0,  0,  0, 0,  0,  0},
      {"static",                  {8, 8, 0, 4, 0, 0}, {8, 8, 0, 4, 0, 0},   20, 20, 0, 0,  0,  0},
      {"stream_ordered_alloc",    {8, 8, 6, 4, 0, 0}, {8, 8, 6, 4, 0, 0},   26, 26, 6, 6,  0,  0},
      {"stream_ordered_free",     {8, 8, 0, 4, 0, 0}, {8, 8, 6, 4, 0, 0},   20, 26, 0, 6,  0,  0},
      // Capture and instantiation make nothing live.
      {"captured",                {8, 8, 0, 4, 0, 0}, {8, 8, 6, 4, 0, 0},   20, 26, 0, 6,  0,  0},
      {"instantiated",            {8, 8, 0, 4, 0, 0}, {8, 8, 6, 4, 0, 0},   20, 26, 0, 6,  0,  0},
      // The launch ran alloc A, alloc T, free T: A stays live, A + T was the peak.
      {"replay1",                 {8, 8, 0, 4, 8, 0}, {8, 8, 6, 4, 12, 0},  28, 32, 0, 6,  8, 12},
      {"refused",                 {8, 8, 0, 4, 8, 0}, {8, 8, 6, 4, 12, 0},  28, 32, 0, 6,  8, 12},
      {"graph_alloc_freed_async", {8, 8, 0, 4, 0, 0}, {8, 8, 6, 4, 12, 0},  20, 32, 0, 6,  0, 12},
      {"replay2",                 {8, 8, 0, 4, 8, 0}, {8, 8, 6, 4, 12, 0},  28, 32, 0, 6,  8, 12},
      {"graph_alloc_freed_sync",  {8, 8, 0, 4, 0, 0}, {8, 8, 6, 4, 12, 0},  20, 32, 0, 6,  0, 12},
      {"peaks_reset",             {8, 8, 0, 4, 0, 0}, {8, 8, 0, 4, 0, 0},   20, 20, 0, 0,  0,  0},
      // Two launches, but the second freed B before re-allocating it: 6 MiB, never 12.
      {"autofree_replays",        {8, 8, 0, 4, 6, 0}, {8, 8, 0, 4, 6, 0},   26, 26, 0, 0,  6,  6},
      {"autofree_freed",          {8, 8, 0, 4, 0, 0}, {8, 8, 0, 4, 6, 0},   20, 26, 0, 0,  0,  6},
      {"teardown",                {0, 0, 0, 0, 0, 0}, {8, 8, 0, 4, 6, 0},   0,  26, 0, 0,  0,  6},
  };
}

}  // namespace recap::device::accounting_script
