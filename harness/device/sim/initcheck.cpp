#include "harness/device/sim/initcheck.h"

#include <algorithm>
#include <sstream>

namespace recap::device::sim {

// ---- ByteRanges -----------------------------------------------------------------------------

void ByteRanges::add(uintptr_t lo, uintptr_t hi) {
  if (lo >= hi) return;
  auto it = r_.upper_bound(lo);
  if (it != r_.begin() && std::prev(it)->second >= hi) return;  // already inside one range (the common rewrite)
  if (it != r_.begin() && std::prev(it)->second >= lo) --it;  // a range ending at or after lo
  while (it != r_.end() && it->first <= hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = r_.erase(it);
  }
  r_.emplace(lo, hi);
}

void ByteRanges::remove(uintptr_t lo, uintptr_t hi) {
  if (lo >= hi) return;
  auto it = r_.upper_bound(lo);
  if (it != r_.begin() && std::prev(it)->second > lo) --it;
  while (it != r_.end() && it->first < hi) {
    uintptr_t a = it->first, b = it->second;
    it = r_.erase(it);
    if (a < lo) r_.emplace(a, lo);
    if (b > hi) it = r_.emplace(hi, b).first;
  }
}

size_t ByteRanges::covered(uintptr_t lo, uintptr_t hi) const {
  size_t n = 0;
  auto it = r_.upper_bound(lo);
  if (it != r_.begin()) --it;
  for (; it != r_.end() && it->first < hi; ++it) {
    uintptr_t a = std::max(lo, it->first), b = std::min(hi, it->second);
    if (a < b) n += b - a;
  }
  return n;
}

uintptr_t ByteRanges::first_not_in(uintptr_t lo, uintptr_t hi) const {
  auto it = r_.upper_bound(lo);
  if (it == r_.begin()) return lo;
  --it;
  while (it != r_.end() && it->first <= lo && lo < hi) {
    if (it->second <= lo) return lo;
    lo = it->second;
    ++it;
  }
  return std::min(lo, hi);
}

// ---- InitChecker ----------------------------------------------------------------------------

void InitChecker::allocated(const void* p, size_t bytes, const std::string& what) {
  auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  init_.remove(lo, hi);
  allocs_[lo] = Allocation{hi, what};
}

void InitChecker::undefined(const void* p, size_t bytes) {
  auto lo = reinterpret_cast<uintptr_t>(p);
  init_.remove(lo, lo + bytes);
}

void InitChecker::released(const void* p, size_t bytes) {
  auto lo = reinterpret_cast<uintptr_t>(p);
  init_.remove(lo, lo + bytes);
  allocs_.erase(lo);
}

void InitChecker::on_run(const char* kind, const std::string& name, const std::string& where,
                         const std::vector<Access>& reads, const std::vector<Access>& writes) {
  bool read_device_memory = false;
  std::vector<size_t> touched;  // reports this launch added to (a launch counts once in each)
  for (const Access& a : reads) {
    auto lo = reinterpret_cast<uintptr_t>(a.ptr), hi = lo + a.bytes;
    // The allocations the read overlaps (host memory and memory this device does not own overlap
    // none): the bytes checked, those nothing wrote, and the first of them with its allocation.
    size_t checked = 0, uninit = 0, offset = 0;
    const std::string* alloc = nullptr;
    auto it = allocs_.upper_bound(lo);
    if (it != allocs_.begin() && std::prev(it)->second.hi > lo) --it;
    for (; it != allocs_.end() && it->first < hi; ++it) {
      const uintptr_t l = std::max(lo, it->first), h = std::min(hi, it->second.hi);
      if (l >= h) continue;
      checked += h - l;
      const size_t u = (h - l) - init_.covered(l, h);
      if (u > 0 && alloc == nullptr) {
        alloc = &it->second.what;
        offset = init_.first_not_in(l, h) - it->first;
      }
      uninit += u;
    }
    if (checked == 0) continue;
    read_device_memory = true;
    summary_.bytes += checked;
    if (uninit == 0) continue;
    const std::string what = kind + name;
    auto [idx, fresh] = index_.try_emplace(what + "\n" + where + "\n" + *alloc, summary_.uninitialized.size());
    if (fresh) {
      UninitReport r;
      r.reader = what + " on " + where;
      r.allocation = *alloc;
      r.offset = offset;
      summary_.uninitialized.push_back(r);
    }
    UninitReport& r = summary_.uninitialized[idx->second];
    r.bytes += uninit;
    if (std::find(touched.begin(), touched.end(), idx->second) == touched.end()) {
      touched.push_back(idx->second);
      r.reads += 1;
    }
  }
  if (read_device_memory) summary_.launches += 1;
  for (const Access& a : writes) {
    auto lo = reinterpret_cast<uintptr_t>(a.ptr);
    init_.add(lo, lo + a.bytes);
  }
}

std::string UninitReport::describe() const {
  std::ostringstream os;
  os << reader << " read " << bytes << " uninitialized bytes of " << allocation << " (first at offset " << offset
     << ", " << reads << (reads == 1 ? " launch" : " launches") << "): no kernel, copy or memset wrote them since "
     << "it was allocated";
  return os.str();
}

}  // namespace recap::device::sim
