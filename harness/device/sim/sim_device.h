// The `sim` backend: a CPU model of CUDA's stream, event, capture, graph and memory rules.
// docs/cuda-capture-rules.md is its ground truth; where the GPU disagrees, the GPU
// is right and this model is fixed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/device/device.h"

namespace recap::device::sim {

// One unordered pair of accesses found by the race check: two launches on different streams (or
// different branches of one graph) touch overlapping bytes, at least one writes, and no stream
// order, implicit legacy-stream sync, event, graph edge or host synchronization orders them.
// Happens-before is derived from those dependencies as issued, never from the order work happened
// to run, so the reports do not depend on the exploration seed (except through stream/event
// queries, whose answers do: a query that finds work complete orders like a synchronize). A free (free_async, a
// graph free node) counts as a write of the whole allocation. Reports are deduplicated per pair of
// launch sites (kernel and stream): a race repeated every iteration is reported once, with the
// sequence numbers of its first occurrence.
struct RaceReport {
  std::string first;   // e.g. "kernel fill_u32 #3 on stream 2"
  std::string second;  // e.g. "kernel copy_u32 #4 on stream 3"
  const void* address = nullptr;
  size_t bytes = 0;
  bool first_writes = false;
  bool second_writes = false;
  std::string describe() const;  // one line naming both launches
};

class SimDevice;  // defined in sim_impl.h

// Makes a sim device. See DeviceOptions for exploration and the race check.
std::unique_ptr<Device> make_sim_device(const DeviceOptions& opts);

// The races found so far by a sim device made with race_check on (empty for other devices).
std::vector<RaceReport> races(Device& dev);

}  // namespace recap::device::sim
