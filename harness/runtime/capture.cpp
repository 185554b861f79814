#include "harness/runtime/capture.h"

#include <optional>

#include "harness/runtime/faults.h"

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

namespace {

// alloc-in-capture (bug class 14): a plain cudaMalloc between begin and end capture.
void fault_alloc_in_capture(device::Device& dev, const std::string& what) {
  void* p = nullptr;
  device::Status s = dev.malloc(&p, 256, device::MemCategory::Other);
  if (!device::ok(s)) throw DeviceError("cudaMalloc", s, what);
  dev.free(p);
}

// side-stream-unjoined (bug class 15): the capture forks work to a side stream (an event recorded
// on the capturing stream, waited on by the side stream) and never joins it back.
struct UnjoinedFork {
  device::Device& dev;
  device::Stream side{};
  device::Event fork{};
  void* buf = nullptr;
  explicit UnjoinedFork(device::Device& d) : dev(d) {
    dev.stream_create(&side, true);
    dev.event_create(&fork);
    dev.malloc(&buf, 256, device::MemCategory::Other);
  }
  void run(device::Stream capturing) {
    dev.event_record(fork, capturing);
    dev.stream_wait_event(side, fork);
    dev.memset_async(buf, 0, 256, side);
  }
  ~UnjoinedFork() {
    dev.device_synchronize();
    dev.free(buf);
    dev.event_destroy(fork);
    dev.stream_destroy(side);
    dev.get_last_error();
  }
};

}  // namespace

CapturedGraph capture_graph(device::Device& dev, Allocator& alloc, RngTracker& rng, device::Stream stream, PoolId pool,
                            const std::string& what, const std::function<void()>& body) {
  CapturedGraph out;
  std::optional<UnjoinedFork> unjoined;
  if (fault_on(Fault::SideStreamUnjoined)) unjoined.emplace(dev);
  rng.capture_begin();
  device::Status s = dev.stream_begin_capture(stream, device::CaptureMode::Global);
  if (!device::ok(s)) {
    rng.capture_end();
    throw DeviceError("cudaStreamBeginCapture", s, what);
  }
  try {
    PoolScope in_pool(alloc, pool);
    if (fault_on(Fault::AllocInCapture)) fault_alloc_in_capture(dev, what);
    body();
    if (unjoined) unjoined->run(stream);
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
