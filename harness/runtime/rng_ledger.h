// The RNG ledger: every draw is logged with its site and the (seed, offset) the kernel REALLY used.
//
// Realized values are only known where the kernel runs (inside a graph replay they come from
// device memory), so each draw site owns a slot in a device buffer and the drawing kernel writes
// its unpacked (seed, offset) there. The executor clears the slots before a step (begin_step) and
// reads them back after it (collect), on both backends and inside graphs alike. The oracles then
// ask: does every recomputed draw equal its forward draw? does any site reuse a (seed, offset)
// across steps?
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "harness/base/names.h"
#include "harness/device/device.h"

namespace recap::runtime {

enum class Phase { Forward, Recompute, Backward };
inline constexpr EnumName<Phase> kPhaseNames[] = {
    {Phase::Forward, "forward"}, {Phase::Recompute, "recompute"}, {Phase::Backward, "backward"}};
inline std::string phase_name(Phase p) { return name_of(kPhaseNames, p); }

struct DrawSite {
  std::string layer;  // "block1.attn"
  std::string op;     // "attn_dropout"
  Phase phase = Phase::Forward;
  int microbatch = 0;
  auto key() const { return std::tie(layer, op, phase, microbatch); }
  bool operator<(const DrawSite& o) const { return key() < o.key(); }
};

struct LedgerEntry {
  DrawSite site;
  int step = 0;
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
  std::string generator;  // tracker name the draw came from
  // Another system's mask (its observation's mask frame: 1 kept, 0 dropped), when it sent one;
  // recap's own draws leave it empty (their mask follows from seed and offset).
  std::vector<uint8_t> mask;
};

class RngLedger {
 public:
  explicit RngLedger(device::Device& dev, int max_slots = 4096);
  ~RngLedger();

  // The device address (two uint64: seed, offset) where the kernel drawing for `site` writes the
  // values it used. Stable per site, so a graph captured once keeps writing the same slot.
  uint64_t* slot(const DrawSite& site, uint64_t count, const std::string& generator);
  // Marks every slot empty (a memset on `stream`; never call during capture).
  device::Status begin_step(int step, device::Stream stream);
  // After the step's work is complete (synchronize first): reads the slots and appends an entry per
  // slot written during the step.
  device::Status collect(int step);

  const std::vector<LedgerEntry>& entries() const { return entries_; }
  void clear() { entries_.clear(); }

  // Oracle helpers.
  // Pairs (forward, recompute) of the same layer/op/microbatch/step whose (seed, offset) differ.
  std::vector<std::pair<LedgerEntry, LedgerEntry>> recompute_mismatches() const;
  // Forward draws of the same layer/op/microbatch in different steps with equal (seed, offset).
  std::vector<std::pair<LedgerEntry, LedgerEntry>> reused_across_steps() const;
  // Distinct draws (forward or backward, over all steps) of one Philox stream (seed) whose value
  // ranges [offset, offset + count) intersect: their masks are correlated. Pairs that
  // reused_across_steps reports (a site's same range in another step) are left to it. One pair
  // per draw that starts inside an earlier draw's range.
  std::vector<std::pair<LedgerEntry, LedgerEntry>> overlapping_draws() const;
  // Philox streams (distinct seeds) of the draws overlapping_draws compares.
  size_t streams() const;
  std::string summary() const;  // "12 draws (8 forward, 4 recompute), 0 recompute mismatches, 0 reused, 0 overlapping"

 private:
  struct Slot {
    DrawSite site;
    uint64_t count;
    std::string generator;
  };
  device::Device& dev_;
  int max_slots_;
  uint64_t* records_ = nullptr;  // device: 2 * max_slots uint64
  std::vector<Slot> slots_;
  std::map<DrawSite, int> index_;
  std::vector<LedgerEntry> entries_;
};

}  // namespace recap::runtime
