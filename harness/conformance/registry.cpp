// all_scenarios(): every scenario group, in a fixed order.
#include <mutex>

#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance {
namespace detail {

std::string mode_id(device::CaptureMode m) {
  switch (m) {
    case device::CaptureMode::Global: return "global";
    case device::CaptureMode::ThreadLocal: return "threadlocal";
    case device::CaptureMode::Relaxed: return "relaxed";
  }
  return "unknown";
}

std::vector<uint32_t> rep(size_t n, uint32_t v) { return std::vector<uint32_t>(n, v); }

}  // namespace detail

const std::vector<Scenario>& all_scenarios() {
  static const std::vector<Scenario> scenarios = [] {
    std::vector<Scenario> out;
    detail::add_during_capture(out);
    detail::add_state_machine(out);
    detail::add_graphs_and_memory(out);
    detail::add_measured(out);
    return out;
  }();
  return scenarios;
}

}  // namespace recap::conformance
