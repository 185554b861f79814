// all_scenarios(): every scenario group, in a fixed order; the helpers the groups share.
#include <mutex>

#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance {
namespace detail {

std::vector<uint32_t> rep(size_t n, uint32_t v) { return std::vector<uint32_t>(n, v); }

void add(std::vector<Scenario>& out, std::string name, std::string rule, std::function<void(Recorder&)> run) {
  out.push_back(Scenario{std::move(name), std::move(rule), std::move(run)});
}

Status launch_keeping(Recorder& r, const std::string& label, device::GraphExec e, Stream s, void* p) {
  Status st = r.launch(label, e, s);
  if (device::ok(st)) r.adopt_graph_alloc(p);
  return st;
}

void free_async(Recorder& r, const std::string& label, void* p, Stream s) {
  r.call(label, r.dev().free_async(p, s), Status::Success);
  r.release(p);
}

Status try_malloc(Recorder& r, size_t bytes) {
  void* p = nullptr;
  Status st = r.dev().malloc(&p, bytes, MemCategory::Other);
  if (device::ok(st) && p) r.adopt_device(p);
  return st;
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
