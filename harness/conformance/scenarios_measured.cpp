// Rules the reference page does not state, measured on the H200 while the backends were built
// (docs/cuda-capture-rules.md, the rules marked *measured*). Each is kept as a scenario so the GPU keeps arbitrating them.
#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance::detail {
namespace {

// A one-kernel graph (buf += 1) captured on t: the graph the scenarios below then misuse.
device::Graph capture_increment(Recorder& r, Stream t, uint32_t* buf) {
  r.begin("cudaStreamBeginCapture(t, global)", t, CaptureMode::Global);
  r.kernel("kernel increment_u32(buf) on t", k::increment_u32(buf, 4), t);
  return r.end("cudaStreamEndCapture(t)", t, Status::Success, 1);
}

// Records the capture on s as invalidated (`status_label`), then ends it: 901, no graph.
void end_invalidated(Recorder& r, Stream s, const std::string& status_label, const std::string& end_label) {
  r.capture(status_label, s, CaptureStatus::Invalidated);
  r.end(end_label, s, Status::StreamCaptureInvalidated, -1);
}

// The setup of a misuse scenario: streams s and t, and the graph of capture_increment on t.
struct Increment {
  Stream s, t;
  uint32_t* buf = nullptr;
  device::Graph g;
};
Increment increment_setup(Recorder& r) {
  Increment m;
  m.s = r.stream(true);
  m.t = r.stream(true);
  m.buf = r.alloc(4);
  m.g = capture_increment(r, m.t, m.buf);
  return m;
}

}  // namespace

void add_measured(std::vector<Scenario>& out) {
  add(out, "measured.capture_info.invalidated_id_is_zero",
      "cudaStreamGetCaptureInfo on an invalidated capture returns Success, status invalidated and id 0.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.flag("capture id of the active capture is non-zero", capture_id(r, s) != 0, true);
        r.call("cudaMalloc from the capturing thread (invalidates)", try_malloc(r, 256), Status::StreamCaptureUnsupported);
        r.capture("capture status after the invalidation", s, CaptureStatus::Invalidated);
        r.value("capture id of the invalidated capture", static_cast<int64_t>(capture_id(r, s)), 0);
        r.end("cudaStreamEndCapture(s)", s, Status::StreamCaptureInvalidated, -1);
      });

  add(out, "measured.free_async.eager_allocation_in_capture",
      "A captured cudaFreeAsync of memory no alloc node of this capture returned (an eager pool allocation) "
      "returns cudaErrorInvalidValue and leaves the capture active.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        void* p = nullptr;
        r.must("cudaMallocAsync(1 KiB, s) before the capture", r.dev().malloc_async(&p, 1024, s, MemCategory::Other));
        r.must("cudaStreamSynchronize(s)", r.dev().stream_synchronize(s));
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.call("cudaFreeAsync(eager allocation, s) during the capture", r.dev().free_async(p, s), Status::InvalidValue);
        r.capture("capture status after the refused free", s, CaptureStatus::Active);
        r.end("cudaStreamEndCapture(s)", s, Status::Success, 0);
        r.call("cudaFreeAsync(p, s) after the capture", r.dev().free_async(p, s), Status::Success);
        r.sync();
      });

  add(out, "measured.graph_launch.into_capturing_stream",
      "Launching a graph into a capturing stream returns 900 and invalidates the capture (no child-graph node).",
      [](Recorder& r) {
        auto [s, t, buf, g] = increment_setup(r);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.launch("cudaGraphLaunch(exec, s) while s captures", e, s, Status::StreamCaptureUnsupported);
        end_invalidated(r, s, "capture status of s after the launch", "cudaStreamEndCapture(s)");
        r.buffer("buf: the graph never ran", buf, 4, rep(4, 0));
      });

  add(out, "measured.end_capture.not_capturing",
      "cudaStreamEndCapture on a stream that is not capturing returns cudaErrorIllegalState.", [](Recorder& r) {
        Stream s = r.stream(true);
        r.end("cudaStreamEndCapture(s) with no capture", s, Status::IllegalState, -1);
        r.capture("capture status of s", s, CaptureStatus::None);
      });

  add(out, "measured.zero_byte_allocations",
      "Zero-byte cudaMalloc and cudaMallocAsync (eager or captured) succeed, return a null pointer and add no node.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        void* p = reinterpret_cast<void*>(0x1);
        r.call("cudaMalloc(0 B)", r.dev().malloc(&p, 0, MemCategory::Other), Status::Success);
        r.flag("cudaMalloc(0 B) returned null", p == nullptr, true);
        void* q = reinterpret_cast<void*>(0x1);
        r.call("cudaMallocAsync(0 B, s)", r.dev().malloc_async(&q, 0, s, MemCategory::Other), Status::Success);
        r.flag("cudaMallocAsync(0 B) returned null", q == nullptr, true);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        void* c = reinterpret_cast<void*>(0x1);
        r.call("cudaMallocAsync(0 B, s) during the capture", r.dev().malloc_async(&c, 0, s, MemCategory::Other),
               Status::Success);
        r.flag("captured cudaMallocAsync(0 B) returned null", c == nullptr, true);
        r.end("cudaStreamEndCapture(s)", s, Status::Success, 0);
        r.value("live bytes added", r.live_delta(MemCategory::kCount), 0);
      });

  add(out, "measured.graph_exec_destroy.during_global_capture",
      "cudaGraphExecDestroy during a Global capture on the capturing thread returns 900 and invalidates it "
      "(it is a potentially unsafe call, like cudaFree).",
      [](Recorder& r) {
        auto [s, t, buf, g] = increment_setup(r);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.call("cudaGraphExecDestroy(exec) during the capture", r.dev().graph_exec_destroy(e),
               Status::StreamCaptureUnsupported);
        end_invalidated(r, s, "capture status of s", "cudaStreamEndCapture(s)");
        r.launch("cudaGraphLaunch(exec, t): the executable survived", e, t);
        r.buffer("buf after one replay", buf, 4, rep(4, 1));
      });

  add(out, "measured.graph_instantiate.during_global_capture",
      "cudaGraphInstantiate during a Global capture on the capturing thread returns 900 and invalidates it.",
      [](Recorder& r) {
        auto [s, t, buf, g] = increment_setup(r);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.instantiate("cudaGraphInstantiate during the capture", g, 0, Status::StreamCaptureUnsupported);
        end_invalidated(r, s, "capture status of s", "cudaStreamEndCapture(s)");
      });

  add(out, "measured.wait.never_recorded_event_in_capture",
      "During a capture, waiting on an event that was never recorded is a no-op: Success, capture active, no node.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        device::Event e = r.event();
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.call("cudaStreamWaitEvent(s, never-recorded event)", r.dev().stream_wait_event(s, e), Status::Success);
        r.capture("capture status of s", s, CaptureStatus::Active);
        r.end("cudaStreamEndCapture(s)", s, Status::Success, 0);
      });

  add(out, "measured.legacy_waits_on_captured_event",
      "The legacy stream waiting on an event recorded in a capture returns 906 (cudaErrorStreamCaptureImplicit).",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* buf = r.alloc(4);
        device::Event e = r.event();
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.kernel("kernel increment_u32(buf) on s", k::increment_u32(buf, 4), s);
        r.call("cudaEventRecord(e, s)", r.dev().event_record(e, s), Status::Success);
        r.call("cudaStreamWaitEvent(legacy stream, e)", r.dev().stream_wait_event(Stream::legacy(), e),
               Status::StreamCaptureImplicit);
        end_invalidated(r, s, "capture status of s", "cudaStreamEndCapture(s)");
      });
}

}  // namespace recap::conformance::detail
