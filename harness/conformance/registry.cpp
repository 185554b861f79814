// all_scenarios(): every scenario group, in a fixed order.
#include <mutex>

#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance {
namespace detail {

std::vector<uint32_t> rep(size_t n, uint32_t v) { return std::vector<uint32_t>(n, v); }

void add(std::vector<Scenario>& out, std::string name, std::string rule, std::function<void(Recorder&)> run) {
  out.push_back(Scenario{std::move(name), std::move(rule), std::move(run)});
}

uint64_t capture_id(Recorder& r, device::Stream s) {
  device::CaptureStatus st = device::CaptureStatus::None;
  uint64_t id = 0;
  r.dev().stream_get_capture_info(s, &st, &id);
  return id;
}

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
