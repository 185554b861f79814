#include "harness/runtime/capture.h"

namespace recap::runtime {

void abandon_capture(device::Device& dev, device::Stream origin) {
  device::CaptureStatus st = device::CaptureStatus::None;
  dev.stream_is_capturing(origin, &st);
  if (st != device::CaptureStatus::None) {
    device::Graph g{};
    dev.stream_end_capture(origin, &g);
    if (g.id != 0) dev.graph_destroy(g);
  }
  dev.get_last_error();
}

CapturedGraph capture_graph(device::Device& dev, Allocator& alloc, RngTracker& rng, device::Stream stream, PoolId pool,
                            const std::string& what, const std::function<void()>& body) {
  CapturedGraph out;
  rng.capture_begin();
  device::Status s = dev.stream_begin_capture(stream, device::CaptureMode::Global);
  if (!device::ok(s)) {
    rng.capture_end();
    throw DeviceError("cudaStreamBeginCapture", s, what);
  }
  try {
    PoolScope in_pool(alloc, pool);
    body();
  } catch (...) {
    abandon_capture(dev, stream);
    rng.capture_end();
    throw;
  }
  s = dev.stream_end_capture(stream, &out.graph);
  out.rng = rng.capture_end();
  if (!device::ok(s)) {
    dev.get_last_error();
    throw DeviceError("cudaStreamEndCapture", s, what);
  }
  s = dev.graph_instantiate(&out.exec, out.graph);
  if (!device::ok(s)) {
    dev.graph_destroy(out.graph);
    throw DeviceError("cudaGraphInstantiate", s, what);
  }
  return out;
}

}  // namespace recap::runtime
