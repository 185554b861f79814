// The capture protocol, written once; every capture path (per-layer graphs, the full-iteration
// graph, the models' graph checks) goes through capture_graph:
//   1. register the generators with the capture (the tracker's capture_begin: graph-safe kernels
//      read their seed/offset from device memory that every replay's prologue refreshes),
//   2. begin a Global-mode capture on `stream`,
//   3. run `body` with every allocation in graph pool `pool`,
//   4. end the capture, take the generators' whole-graph increments, instantiate.
// When `body` throws or a call fails, the capture is abandoned so that no stream stays capturing:
// ended on its origin stream, whatever graph came back destroyed, the device's last error read
// and the generators unregistered; then the error propagates (a failed call as DeviceError, with
// `what` naming the graph).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "harness/runtime/context.h"
#include "harness/runtime/rng_tracker.h"
#include "harness/runtime/tensor.h"

namespace recap::runtime {

struct CapturedGraph {
  device::Graph graph{};
  device::GraphExec exec{};
  std::map<std::string, GraphRngState> rng;  // what replay_prologue needs before each launch
};

CapturedGraph capture_graph(device::Device& dev, Allocator& alloc, RngTracker& rng, device::Stream stream, PoolId pool,
                            const std::string& what, const std::function<void()>& body);

// Ends a capture left open on `origin` (after a failure) and clears what it left behind: the graph,
// if one came back, and the device's last error. Nothing when `origin` is not capturing.
void abandon_capture(device::Device& dev, device::Stream origin);

}  // namespace recap::runtime
