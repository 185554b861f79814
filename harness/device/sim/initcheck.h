// The `sim` backend's init check: compute-sanitizer initcheck's rule on the CPU. Device memory is
// uninitialized when it is allocated (cudaMalloc, cudaMallocAsync, and a graph's alloc node at every
// launch, whose bytes CUDA leaves undefined); a kernel, copy or memset that runs initializes what it
// writes; a kernel or copy that reads bytes no work has written since is reported. The sim hands out
// zeroed memory, so such a read gives the same bits on every sim run while a GPU reads whatever the
// block held before: the check names it in CI, without a GPU.
//
// It works on what ops declare (Kernel::reads and ::writes), at execution time, in the order the
// scheduler runs work. A kernel that declares more than it reads (a masked load) can be reported
// where initcheck would not; each report names the kernel so that the declaration can be read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/device/device.h"
#include "harness/device/sim/sim_device.h"

namespace recap::device::sim {

// A set of byte ranges [lo, hi), kept disjoint and merged.
class ByteRanges {
 public:
  void add(uintptr_t lo, uintptr_t hi);
  void remove(uintptr_t lo, uintptr_t hi);
  // The bytes of [lo, hi) in the set.
  size_t covered(uintptr_t lo, uintptr_t hi) const;
  // The first byte of [lo, hi) not in the set, or hi.
  uintptr_t first_not_in(uintptr_t lo, uintptr_t hi) const;

 private:
  std::map<uintptr_t, uintptr_t> r_;  // lo -> hi
};

class InitChecker {
 public:
  // Fresh device memory: checked, and uninitialized. `what` names the allocation in reports.
  void allocated(const void* p, size_t bytes, const std::string& what);
  // The bytes are undefined again (a graph alloc node runs).
  void undefined(const void* p, size_t bytes);
  // The memory is no longer device memory this process owns (freed): no longer checked.
  void released(const void* p, size_t bytes);
  // Work runs: its reads are checked, then its writes initialize. The reader is named `kind` +
  // `name` ("kernel " + "gemm", "memcpy" + "") on `where`, built only for a report.
  void on_run(const char* kind, const std::string& name, const std::string& where, const std::vector<Access>& reads,
              const std::vector<Access>& writes);
  const InitCheckSummary& summary() const { return summary_; }

 private:
  struct Allocation {
    uintptr_t hi;
    std::string what;
  };
  std::map<uintptr_t, Allocation> allocs_;  // device memory allocated and not freed, by its lo
  ByteRanges init_;                         // the part of it written since allocated
  std::map<std::string, size_t> index_;  // dedup key (reader, allocation) -> uninitialized index
  InitCheckSummary summary_;
};

}  // namespace recap::device::sim
