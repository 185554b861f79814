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

uintptr_t ByteRanges::first_in(uintptr_t lo, uintptr_t hi) const {
  auto it = r_.upper_bound(lo);
  if (it != r_.begin() && std::prev(it)->second > lo) return lo;
  return it != r_.end() && it->first < hi ? it->first : hi;
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
  tracked_.add(lo, hi);
  init_.remove(lo, hi);
  allocs_[lo] = {hi, what};
}

void InitChecker::undefined(const void* p, size_t bytes) {
  auto lo = reinterpret_cast<uintptr_t>(p);
  init_.remove(lo, lo + bytes);
}

void InitChecker::released(const void* p, size_t bytes) {
  auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  tracked_.remove(lo, hi);
  init_.remove(lo, hi);
  allocs_.erase(lo);
}

void InitChecker::on_run(const char* kind, const std::string& name, const std::string& where,
                         const std::vector<Access>& reads, const std::vector<Access>& writes) {
  bool read_device_memory = false;
  std::vector<size_t> touched;  // reports this launch added to (a launch counts once in each)
  for (const Access& a : reads) {
    auto lo = reinterpret_cast<uintptr_t>(a.ptr), hi = lo + a.bytes;
    size_t checked = tracked_.covered(lo, hi);
    if (checked == 0) continue;  // host memory, or memory this device does not own
    read_device_memory = true;
    summary_.bytes += checked;
    size_t uninit = checked - init_.covered(lo, hi);
    if (uninit == 0) continue;
    // The allocation the first uninitialized byte lies in names the report.
    uintptr_t first = lo;
    for (uintptr_t at = lo; at < hi;) {
      uintptr_t t = tracked_.first_in(at, hi);
      if (t == hi) break;
      uintptr_t u = init_.first_not_in(t, hi);
      if (u < hi && tracked_.covered(u, u + 1) == 1) {
        first = u;
        break;
      }
      at = u + 1;
    }
    std::string alloc = "device memory";
    size_t offset = 0;
    auto al = allocs_.upper_bound(first);
    if (al != allocs_.begin() && std::prev(al)->second.first > first) {
      --al;
      alloc = al->second.second;
      offset = first - al->first;
    }
    const std::string what = kind + name;
    std::string key = what + "\n" + where + "\n" + alloc;
    auto [it, fresh] = index_.try_emplace(key, summary_.uninitialized.size());
    if (fresh) {
      UninitReport r;
      r.reader = what + " on " + where;
      r.allocation = alloc;
      r.offset = offset;
      summary_.uninitialized.push_back(r);
    }
    UninitReport& r = summary_.uninitialized[it->second];
    r.bytes += uninit;
    if (std::find(touched.begin(), touched.end(), it->second) == touched.end()) {
      touched.push_back(it->second);
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
