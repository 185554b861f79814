// Stream-order execution and the race check of the `sim` backend.
//
// Every piece of device work (a kernel, a copy, an event record, one node of a graph launch) is
// issued as a work item with its real dependencies: earlier work on the same stream, the implicit
// legacy-stream syncs, event waits, graph edges. The Scheduler runs items:
//   seed 0      at issue time, in program order (legal: every dependency was issued earlier);
//   seed != 0   later, when the host observes or must order, picking uniformly at random among the
//               ready items (a seeded topological order, the same for the same seed).
// The RaceChecker derives happens-before from the same dependencies (vector clocks, never from the
// order things actually ran) and reports overlapping accesses that nothing orders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "harness/device/device.h"
#include "harness/device/sim/sim_device.h"

namespace recap::device::sim {

using ItemId = uint64_t;  // issue sequence number of a work item; 0 means "no work"
using VectorClock = std::vector<uint32_t>;  // indexed by lane

// One issued work item as later work refers to it: its id (to order after it) and, with the race
// check on, its vector clock (to know what happened before it).
struct WorkRef {
  ItemId id = 0;
  std::shared_ptr<const VectorClock> clock;
};

class Scheduler {
 public:
  explicit Scheduler(uint64_t seed);

  bool exploring() const { return seed_ != 0; }
  ItemId next_id() { return next_id_++; }
  // Issues item `id` (from next_id()), runnable once every item in `deps` has run. In program-order
  // mode it runs now.
  void issue(ItemId id, const std::vector<ItemId>& deps, std::function<void()> body);

  bool done(ItemId id) const { return id == 0 || pending_.count(id) == 0; }
  bool all_done(const std::vector<ItemId>& ids) const;
  size_t pending() const { return pending_.size(); }

  // Runs ready items, chosen at random, until every target has run.
  void run_until(const std::vector<ItemId>& targets);
  // Runs everything pending.
  void run_all();
  // A query observes partial progress: runs a random number (at least one) of ready items.
  void run_some();
  // Forgets pending work without running it (device teardown).
  void discard();

 private:
  struct Pending {
    std::function<void()> body;
    size_t unmet = 0;                // dependencies not yet run
    std::vector<ItemId> dependents;  // items waiting on this one
  };
  void run_one();

  uint64_t seed_;
  std::mt19937_64 rng_;
  ItemId next_id_ = 1;
  std::unordered_map<ItemId, Pending> pending_;
  std::vector<ItemId> ready_;  // pending items whose dependencies have all run
};

// Who made an access, for race reports.
struct AccessSite {
  std::string what;   // "kernel fill_u32", "memcpy", "memset"
  std::string where;  // "stream 2", "stream 2 (graph exec 1)"
  ItemId seq = 0;
  std::string label() const;  // "kernel fill_u32 #3 on stream 2"
};

class RaceChecker {
 public:
  uint32_t new_lane();
  // The clock of a new item on `lane` that happens after every clock in `deps`. Items of one lane
  // must be totally ordered by their dependencies (a stream; one capture stream of one executable).
  std::shared_ptr<const VectorClock> stamp(const std::vector<const VectorClock*>& deps, uint32_t lane);
  // Checks the accesses of an item against every earlier unordered access, then records them.
  void on_access(const VectorClock& clock, uint32_t lane, const AccessSite& site,
                 const std::vector<Access>& reads, const std::vector<Access>& writes);
  // The bytes were freed: earlier accesses to them no longer conflict with later ones.
  void forget(const void* p, size_t bytes);
  const std::vector<RaceReport>& reports() const { return reports_; }

 private:
  struct Record {
    uintptr_t lo, hi;  // [lo, hi)
    bool write;
    uint32_t lane, tick;  // the accessing item's epoch
    std::shared_ptr<const AccessSite> site;
  };
  static bool happens_before(const Record& r, const VectorClock& later);

  std::vector<uint32_t> lane_ticks_;
  std::vector<Record> records_;
  std::vector<RaceReport> reports_;
  std::set<std::string> reported_;  // dedup keys: the two sites without sequence numbers
};

// Device memory is host memory. Blocks are 256-byte aligned, zeroed when first handed out, and kept
// for reuse after a free instead of going back to the OS while the device lives, so that a stray
// access (a racing kernel, a graph replaying freed buffers) hits mapped memory, as on a GPU.
class HostArena {
 public:
  HostArena() = default;
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  ~HostArena();
  static constexpr size_t kAlignment = 256;
  void* allocate(size_t bytes);  // nullptr when the host is out of memory
  void release(void* p);

 private:
  struct Block {
    void* base;
    size_t size;
  };
  std::unordered_map<void*, Block> blocks_;              // every block, by aligned address
  std::unordered_map<size_t, std::vector<void*>> free_;  // released blocks by size
};

}  // namespace recap::device::sim
