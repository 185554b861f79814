// The `sim` backend: a CPU model of CUDA's stream, event, capture, graph and memory rules.
// docs/cuda-capture-rules.md is its ground truth; where the GPU disagrees, the GPU
// is right and this model is fixed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

// Reads of uninitialized device memory found by the init check (initcheck.h), one per reader (a
// kernel or copy on one stream or graph) and allocation, with the bytes and launches it covers.
struct UninitReport {
  std::string reader;      // e.g. "kernel add_into on stream 2"
  std::string allocation;  // e.g. "a 800-byte cudaMalloc block (gradients)"
  size_t offset = 0;       // of the first uninitialized byte read, in the allocation
  size_t bytes = 0;        // uninitialized bytes read, over every launch
  uint64_t reads = 0;      // launches that read some
  std::string describe() const;
};

class SimDevice;  // defined in sim_impl.h

// Makes a sim device. See DeviceOptions for exploration and the race check.
std::unique_ptr<Device> make_sim_device(const DeviceOptions& opts);

// The races found so far by a sim device made with race_check on (empty for other devices).
std::vector<RaceReport> races(Device& dev);

// What the init check of a sim device made with init_check on has seen so far; nullopt for any other
// device (nothing observed).
struct InitCheckSummary {
  uint64_t launches = 0;  // kernels and copies that ran and read device memory the device owns
  uint64_t bytes = 0;     // the bytes of it they read, over every launch
  std::vector<UninitReport> uninitialized;
};
std::optional<InitCheckSummary> init_check_summary(Device& dev);

}  // namespace recap::device::sim
