#include "harness/device/accounting.h"

#include <algorithm>

namespace recap::device {

bool MemoryLedger::on_alloc(const void* ptr, int64_t bytes, MemCategory cat) {
  std::lock_guard<std::mutex> lock(mu_);
  if (live_.count(ptr)) return false;
  live_[ptr] = Block{bytes, cat};
  auto& c = stats_.by_category[static_cast<int>(cat)];
  c.live_bytes += bytes;
  c.peak_bytes = std::max(c.peak_bytes, c.live_bytes);
  c.allocations += 1;
  stats_.live_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
  return true;
}

int64_t MemoryLedger::on_free(const void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return -1;
  int64_t bytes = it->second.bytes;
  stats_.by_category[static_cast<int>(it->second.cat)].live_bytes -= bytes;
  stats_.live_bytes -= bytes;
  live_.erase(it);
  return bytes;
}

bool MemoryLedger::is_live(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(ptr) != 0;
}

int64_t MemoryLedger::bytes_of(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? -1 : it->second.bytes;
}

MemoryStats MemoryLedger::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void MemoryLedger::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : stats_.by_category) c.peak_bytes = c.live_bytes;
  stats_.peak_bytes = stats_.live_bytes;
}

}  // namespace recap::device
