// Fault points (faults.h).
#include "harness/runtime/faults.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace recap::runtime {

std::atomic<uint64_t> g_fault_mask{0};
bool g_process_killing_faults_allowed = false;

namespace {
std::recursive_mutex& fault_lock() {
  static std::recursive_mutex m;
  return m;
}
}  // namespace

std::string fault_mask_of(const std::vector<std::string>& names, uint64_t* mask) {
  uint64_t m = 0;
  for (const std::string& n : names) {
    Fault f{};
    if (!fault_from_name(n, &f)) return "unknown fault '" + n + "' (known: " + names_list(kFaultNames) + ")";
    m |= uint64_t{1} << static_cast<unsigned>(f);
  }
  *mask = m;
  return "";
}

uint64_t env_fault_mask() {
  static const uint64_t mask = [] {
    const char* e = std::getenv("RECAP_FAULT");
    if (e == nullptr || *e == '\0') return uint64_t{0};
    std::vector<std::string> names;
    std::stringstream ss(e);
    for (std::string n; std::getline(ss, n, ',');)
      if (!n.empty()) names.push_back(n);
    uint64_t m = 0;
    std::string err = fault_mask_of(names, &m);
    if (!err.empty()) std::fprintf(stderr, "recap: RECAP_FAULT: %s; no fault is on\n", err.c_str());
    return err.empty() ? m : uint64_t{0};
  }();
  return mask;
}

FaultScope::FaultScope(const std::vector<std::string>& names)
    : lock_(fault_lock()), previous_(g_fault_mask.load(std::memory_order_relaxed)) {
  uint64_t m = 0;
  fault_mask_of(names, &m);  // the case validated its names; an unknown one adds nothing
  m |= env_fault_mask();
  // a process that is not a worker never turns on a fault that kills it (runs.cpp skips the case)
  if (!g_process_killing_faults_allowed) m &= ~(uint64_t{1} << static_cast<unsigned>(Fault::LayerSegfault));
  g_fault_mask.store(m, std::memory_order_relaxed);
}

std::string process_killing_fault(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (fault_kills_process(n)) return n;
  return "";
}

}  // namespace recap::runtime
