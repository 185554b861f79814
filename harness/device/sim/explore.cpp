#include "harness/device/sim/explore.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace recap::device::sim {

// ---- Scheduler ------------------------------------------------------------------------------

Scheduler::Scheduler(uint64_t seed) : seed_(seed), rng_(seed) {}

void Scheduler::issue(ItemId id, const std::vector<ItemId>& deps, std::function<void()> body) {
  Pending item;
  item.body = std::move(body);
  for (ItemId d : deps) {
    auto it = pending_.find(d);
    if (it == pending_.end()) continue;  // already ran
    it->second.dependents.push_back(id);
    item.unmet += 1;
  }
  bool ready = item.unmet == 0;
  pending_.emplace(id, std::move(item));
  if (ready) ready_.push_back(id);
  // Program order: everything issued earlier has run, so this item is ready and runs now.
  if (!exploring()) run_all();
}

bool Scheduler::all_done(const std::vector<ItemId>& ids) const {
  return std::all_of(ids.begin(), ids.end(), [&](ItemId id) { return done(id); });
}

void Scheduler::run_one() {
  // Uniform among ready items, whatever stream they belong to. In program-order mode there is only
  // ever one ready item.
  size_t pick = exploring() ? static_cast<size_t>(rng_() % ready_.size()) : 0;
  ItemId id = ready_[pick];
  ready_[pick] = ready_.back();
  ready_.pop_back();
  auto node = pending_.extract(id);
  Pending& item = node.mapped();
  if (item.body) item.body();
  for (ItemId dep : item.dependents) {
    Pending& d = pending_.at(dep);
    if (--d.unmet == 0) ready_.push_back(dep);
  }
}

void Scheduler::run_until(const std::vector<ItemId>& targets) {
  // Dependencies always point to earlier-issued work, so while a target is pending some item is
  // ready.
  while (!all_done(targets)) run_one();
}

void Scheduler::run_all() {
  while (!ready_.empty()) run_one();
}

void Scheduler::run_some() {
  if (pending_.empty()) return;
  size_t steps = 1 + static_cast<size_t>(rng_() % pending_.size());
  for (size_t i = 0; i < steps && !ready_.empty(); ++i) run_one();
}

void Scheduler::discard() {
  pending_.clear();
  ready_.clear();
}

// ---- RaceChecker ----------------------------------------------------------------------------

std::string AccessSite::label() const { return what + " #" + std::to_string(seq) + " on " + where; }

uint32_t RaceChecker::new_lane() {
  lane_ticks_.push_back(0);
  return static_cast<uint32_t>(lane_ticks_.size() - 1);
}

std::shared_ptr<const VectorClock> RaceChecker::stamp(const std::vector<const VectorClock*>& deps, uint32_t lane) {
  auto clock = std::make_shared<VectorClock>(lane_ticks_.size(), 0);
  for (const VectorClock* d : deps)
    for (size_t i = 0; i < d->size(); ++i) (*clock)[i] = std::max((*clock)[i], (*d)[i]);
  (*clock)[lane] = ++lane_ticks_[lane];
  return clock;
}

bool RaceChecker::happens_before(const Record& r, const VectorClock& later) {
  return r.lane < later.size() && later[r.lane] >= r.tick;
}

void RaceChecker::on_access(const VectorClock& clock, uint32_t lane, const AccessSite& site,
                            const std::vector<Access>& reads, const std::vector<Access>& writes) {
  auto shared_site = std::make_shared<const AccessSite>(site);
  auto check_and_record = [&](const Access& a, bool write) {
    if (a.bytes == 0 || a.ptr == nullptr) return;
    uintptr_t lo = reinterpret_cast<uintptr_t>(a.ptr), hi = lo + a.bytes;
    for (const Record& r : records_) {
      if (r.hi <= lo || hi <= r.lo) continue;         // no overlap
      if (!r.write && !write) continue;               // two reads never race
      if (happens_before(r, clock)) continue;         // ordered by a real dependency
      // One report per unordered pair of launch sites (kernel and stream), however often it repeats.
      std::string x = r.site->what + " on " + r.site->where, y = site.what + " on " + site.where;
      if (!reported_.insert(x < y ? x + "|" + y : y + "|" + x).second) continue;
      RaceReport rep;
      rep.first = r.site->label();
      rep.second = site.label();
      uintptr_t olo = std::max(lo, r.lo), ohi = std::min(hi, r.hi);
      rep.address = reinterpret_cast<const void*>(olo);
      rep.bytes = static_cast<size_t>(ohi - olo);
      rep.first_writes = r.write;
      rep.second_writes = write;
      reports_.push_back(rep);
    }
    // An earlier access covered by this one and ordered before it can go: any later access that
    // races with it races with this one too (a covered write only when this one also writes, or a
    // later read would lose its conflict).
    std::erase_if(records_, [&](const Record& r) {
      return r.lo >= lo && r.hi <= hi && (write || !r.write) && happens_before(r, clock);
    });
    records_.push_back(Record{lo, hi, write, lane, clock[lane], shared_site});
  };
  for (const Access& a : reads) check_and_record(a, false);
  for (const Access& a : writes) check_and_record(a, true);
}

void RaceChecker::forget(const void* p, size_t bytes) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  std::erase_if(records_, [&](const Record& r) { return r.lo < hi && lo < r.hi; });
}

// ---- HostArena ------------------------------------------------------------------------------

HostArena::~HostArena() {
  for (auto& [p, b] : blocks_) std::free(b.base);
}

void* HostArena::allocate(size_t bytes) {
  size_t size = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  auto fit = free_.find(size);
  if (fit != free_.end() && !fit->second.empty()) {
    void* p = fit->second.back();
    fit->second.pop_back();
    return p;
  }
  // calloc: fresh device memory reads as zeros, deterministically, and large blocks stay lazy.
  void* base = std::calloc(size + kAlignment, 1);
  if (base == nullptr) return nullptr;
  uintptr_t aligned = (reinterpret_cast<uintptr_t>(base) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = reinterpret_cast<void*>(aligned);
  blocks_[p] = Block{base, size};
  return p;
}

void HostArena::release(void* p) {
  auto it = blocks_.find(p);
  if (it == blocks_.end()) return;
  free_[it->second.size].push_back(p);
}

// ---- RaceReport -----------------------------------------------------------------------------

std::string RaceReport::describe() const {
  std::ostringstream os;
  os << "race on " << bytes << " bytes at " << address << ": " << first << " (" << (first_writes ? "writes" : "reads")
     << ") and " << second << " (" << (second_writes ? "writes" : "reads")
     << ") are not ordered by stream order, an event, a graph edge or a host synchronization";
  return os.str();
}

}  // namespace recap::device::sim
