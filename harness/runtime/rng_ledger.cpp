// The RNG ledger (rng_ledger.h).
//
// Slots: records_ holds 2 uint64 per slot (seed, offset), all max_slots of them allocated at
// construction (dev.malloc, category Other) so that a site first seen during a capture gets its
// slot with no device call. The empty mark (sentinel) is all bits set in both words: begin_step
// writes it with one memset_async(0xFF) over the whole buffer on the step's stream (the
// constructor does the same synchronously). No real draw can carry it: the offset of a draw is
// a multiple of 4 (an override's too) and ~0 is odd; the seed alone could be ~0, so a slot counts
// as written when either word differs from ~0.
//
// One slot per site: a site that draws twice in one step (the same layer/op/phase/microbatch)
// keeps only the last draw, and the slot's count/generator are those of its latest slot() call.
#include "harness/runtime/rng_ledger.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "harness/runtime/capture_mode_guard.h"
#include "harness/runtime/context.h"

namespace recap::runtime {

namespace {
constexpr uint64_t kEmpty = ~uint64_t{0};
constexpr int kSentinelByte = 0xFF;
}  // namespace

RngLedger::RngLedger(device::Device& dev, int max_slots) : dev_(dev), max_slots_(max_slots) {
  if (max_slots_ <= 0) throw std::invalid_argument("RngLedger: max_slots must be positive");
  size_t bytes = 2 * sizeof(uint64_t) * static_cast<size_t>(max_slots_);
  void* p = nullptr;
  device::Status s;
  {
    CaptureModeGuard guard(dev_, device::CaptureMode::Relaxed);
    s = dev_.malloc(&p, bytes, device::MemCategory::Other);
  }
  if (!device::ok(s)) throw DeviceError("cudaMalloc", s, "RNG ledger records");
  records_ = static_cast<uint64_t*>(p);
  s = dev_.memset(records_, kSentinelByte, bytes);
  if (!device::ok(s)) {
    CaptureModeGuard guard(dev_, device::CaptureMode::Relaxed);
    dev_.free(records_);
    throw DeviceError("cudaMemset", s, "RNG ledger records");
  }
}

RngLedger::~RngLedger() {
  CaptureModeGuard guard(dev_, device::CaptureMode::Relaxed);
  dev_.free(records_);
}

uint64_t* RngLedger::slot(const DrawSite& site, uint64_t count, const std::string& generator) {
  auto it = index_.find(site);
  int i = 0;
  if (it != index_.end()) {
    i = it->second;
    slots_[i].count = count;
    slots_[i].generator = generator;
  } else {
    if (static_cast<int>(slots_.size()) >= max_slots_)
      throw std::runtime_error("RngLedger: more than " + std::to_string(max_slots_) + " draw sites");
    i = static_cast<int>(slots_.size());
    slots_.push_back(Slot{site, count, generator});
    index_[site] = i;
  }
  return records_ + 2 * static_cast<size_t>(i);
}

device::Status RngLedger::begin_step(int step, device::Stream stream) {
  (void)step;
  return dev_.memset_async(records_, kSentinelByte, 2 * sizeof(uint64_t) * static_cast<size_t>(max_slots_), stream);
}

device::Status RngLedger::collect(int step) {
  size_t n = slots_.size();
  if (n == 0) return device::Status::Success;
  std::vector<uint64_t> host(2 * n);
  device::Status s = dev_.memcpy(host.data(), records_, host.size() * sizeof(uint64_t), device::CopyKind::DeviceToHost);
  if (!device::ok(s)) return s;
  for (size_t i = 0; i < n; ++i) {
    uint64_t seed = host[2 * i], offset = host[2 * i + 1];
    if (seed == kEmpty && offset == kEmpty) continue;  // not written this step
    LedgerEntry e;
    e.site = slots_[i].site;
    e.step = step;
    e.seed = seed;
    e.offset = offset;
    e.count = slots_[i].count;
    e.generator = slots_[i].generator;
    entries_.push_back(std::move(e));
  }
  return device::Status::Success;
}

std::vector<std::pair<LedgerEntry, LedgerEntry>> RngLedger::recompute_mismatches() const {
  using Key = std::tuple<std::string, std::string, int, int>;  // layer, op, microbatch, step
  std::map<Key, const LedgerEntry*> forward;
  for (const LedgerEntry& e : entries_)
    if (e.site.phase == Phase::Forward) forward.emplace(Key{e.site.layer, e.site.op, e.site.microbatch, e.step}, &e);
  std::vector<std::pair<LedgerEntry, LedgerEntry>> out;
  for (const LedgerEntry& e : entries_) {
    if (e.site.phase != Phase::Recompute) continue;
    auto it = forward.find(Key{e.site.layer, e.site.op, e.site.microbatch, e.step});
    if (it == forward.end()) continue;  // no forward draw to compare with
    if (it->second->seed != e.seed || it->second->offset != e.offset || it->second->count != e.count)
      out.emplace_back(*it->second, e);  // the recompute must cover exactly its forward draw's range
  }
  return out;
}

std::vector<std::pair<LedgerEntry, LedgerEntry>> RngLedger::reused_across_steps() const {
  // layer, op, microbatch, seed, offset -> the first forward entry that drew it
  using Key = std::tuple<std::string, std::string, int, uint64_t, uint64_t>;
  std::map<Key, const LedgerEntry*> first;
  std::vector<std::pair<LedgerEntry, LedgerEntry>> out;
  for (const LedgerEntry& e : entries_) {
    if (e.site.phase != Phase::Forward) continue;
    Key k{e.site.layer, e.site.op, e.site.microbatch, e.seed, e.offset};
    auto [it, inserted] = first.emplace(k, &e);
    if (!inserted && it->second->step != e.step) out.emplace_back(*it->second, e);
  }
  return out;
}

std::vector<std::pair<LedgerEntry, LedgerEntry>> RngLedger::overlapping_draws() const {
  std::vector<const LedgerEntry*> draws;
  for (const LedgerEntry& e : entries_)
    if (e.site.phase != Phase::Recompute && e.count > 0) draws.push_back(&e);
  std::sort(draws.begin(), draws.end(), [](const LedgerEntry* a, const LedgerEntry* b) {
    return std::tie(a->seed, a->offset, a->step) < std::tie(b->seed, b->offset, b->step);
  });
  std::vector<std::pair<LedgerEntry, LedgerEntry>> out;
  const LedgerEntry* reach = nullptr;  // the draw of this seed whose range ends last so far
  for (const LedgerEntry* e : draws) {
    if (reach != nullptr && reach->seed == e->seed && e->offset < reach->offset + reach->count) {
      bool reuse = reach->offset == e->offset && reach->site.layer == e->site.layer && reach->site.op == e->site.op &&
                   reach->site.microbatch == e->site.microbatch && reach->step != e->step;
      if (!reuse) out.emplace_back(*reach, *e);
    }
    if (reach == nullptr || reach->seed != e->seed || e->offset + e->count > reach->offset + reach->count) reach = e;
  }
  return out;
}

size_t RngLedger::streams() const {
  std::set<uint64_t> seeds;
  for (const LedgerEntry& e : entries_)
    if (e.site.phase != Phase::Recompute) seeds.insert(e.seed);
  return seeds.size();
}

std::string RngLedger::summary() const {
  int fwd = 0, rec = 0, bwd = 0;
  for (const LedgerEntry& e : entries_) {
    if (e.site.phase == Phase::Forward) ++fwd;
    else if (e.site.phase == Phase::Recompute) ++rec;
    else ++bwd;
  }
  std::ostringstream os;
  os << entries_.size() << " draws (" << fwd << " forward, " << rec << " recompute";
  if (bwd > 0) os << ", " << bwd << " backward";
  os << "), " << recompute_mismatches().size() << " recompute mismatches, " << reused_across_steps().size()
     << " reused, " << overlapping_draws().size() << " overlapping";
  return os.str();
}

}  // namespace recap::runtime
