// The capture state machine of the reference: begin, fork/join through events, end (on the
// origin, on the wrong stream, from another thread), merge, invalidation and what follows it,
// events last recorded in a capture, non-member streams, capture-interaction modes, and the
// last-error state.
#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance::detail {
namespace {

constexpr const char* kInferred = " (inferred)";

// Makes the capture on `s` invalid with a call barred on the capturing thread (cudaMalloc).
void invalidate_with_malloc(Recorder& r) {
  r.call("cudaMalloc from the capturing thread (invalidates)", try_malloc(r, 256), Status::StreamCaptureUnsupported);
}

// s2 joins the capture of s1: record e on s1, s2 waits on e.
void fork(Recorder& r, Stream s1, Stream s2, Event e) {
  r.call("cudaEventRecord(e1, s1)", r.dev().event_record(e, s1), Status::Success);
  r.call("cudaStreamWaitEvent(s2, e1) (s2 joins the capture)", r.dev().stream_wait_event(s2, e), Status::Success);
}

// s1 waits for s2's work: record e on s2, s1 waits on e.
void join(Recorder& r, Stream s1, Stream s2, Event e) {
  r.call("cudaEventRecord(e2, s2)", r.dev().event_record(e, s2), Status::Success);
  r.call("cudaStreamWaitEvent(s1, e2) (join)", r.dev().stream_wait_event(s1, e), Status::Success);
}

// The capture status of s1 and of s2, both expected `st` ("capture status of s1" + when).
void capture_both(Recorder& r, Stream s1, Stream s2, const std::string& when, CaptureStatus st) {
  r.capture("capture status of s1" + when, s1, st);
  r.capture("capture status of s2" + when, s2, st);
}

void add_begin(std::vector<Scenario>& out) {
  for (CaptureMode m : {CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed}) {
    add(out, "state.begin.legacy_stream." + device::capture_mode_name(m),
        "Begin on the legacy default stream returns 900 (cudaErrorStreamCaptureUnsupported); nothing captures.",
        [m](Recorder& r) {
          r.call("cudaStreamBeginCapture(legacy stream, " + device::capture_mode_name(m) + ")",
                 r.dev().stream_begin_capture(Stream::legacy(), m), Status::StreamCaptureUnsupported);
          r.capture("capture status of the legacy stream", Stream::legacy(), CaptureStatus::None);
        });
  }

  add(out, "state.begin.per_thread_stream",
      "Begin on cudaStreamPerThread is allowed: work on it is captured, not run, and replays.", [](Recorder& r) {
        uint32_t* buf = r.alloc(4);
        Stream pt = Stream::per_thread();
        r.begin("cudaStreamBeginCapture(cudaStreamPerThread, global)", pt, CaptureMode::Global);
        r.capture("capture status of cudaStreamPerThread", pt, CaptureStatus::Active);
        r.kernel("kernel fill_u32(buf, 3) on cudaStreamPerThread", k::fill_u32(buf, 4, 3), pt);
        device::Graph g = r.end("cudaStreamEndCapture(cudaStreamPerThread)", pt, Status::Success, 1);
        r.capture("capture status of cudaStreamPerThread after end", pt, CaptureStatus::None);
        r.buffer("buf after the capture", buf, 4, rep(4, 0));
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.launch("cudaGraphLaunch(exec, cudaStreamPerThread)", e, pt);
        r.buffer("buf after one replay", buf, 4, rep(4, 3));
      });

  add(out, "state.begin.already_capturing",
      "Begin on a stream already capturing returns cudaErrorIllegalState; the capture is not invalidated.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* buf = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.kernel("kernel fill_u32(buf) on s", k::fill_u32(buf, 4, 1), s);
        r.begin("cudaStreamBeginCapture(s, global) again", s, CaptureMode::Global, Status::IllegalState);
        r.capture("capture status of s", s, CaptureStatus::Active);
        r.kernel("kernel increment_u32(buf) on s", k::increment_u32(buf, 4), s);
        r.end("cudaStreamEndCapture(s)", s, Status::Success, 2);
      });

  add(out, "state.begin.member_stream",
      std::string("Begin on a stream that joined another capture (a member stream) is a begin on a stream "
                  "already capturing: cudaErrorIllegalState, the capture is not invalidated.") +
          kInferred,
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        Event e1 = r.event(), e2 = r.event();
        uint32_t* buf = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.kernel("kernel fill_u32(buf) on s1", k::fill_u32(buf, 4, 1), s1);
        fork(r, s1, s2, e1);
        r.call("cudaStreamBeginCapture(s2, global) on the member stream",
               r.dev().stream_begin_capture(s2, CaptureMode::Global), Status::IllegalState);
        capture_both(r, s1, s2, "", CaptureStatus::Active);
        join(r, s1, s2, e2);
        r.end("cudaStreamEndCapture(s1)", s1, Status::Success, 1);
      });

  add(out, "state.begin.after_invalidated_end",
      "Capture errors are not sticky: after End returned 901, a new capture on the same stream succeeds.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* buf = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.kernel("kernel fill_u32(buf, 1) on s", k::fill_u32(buf, 4, 1), s);
        invalidate_with_malloc(r);
        r.end("cudaStreamEndCapture(s) (invalidated)", s, Status::StreamCaptureInvalidated, 0);
        r.begin("cudaStreamBeginCapture(s, global) again", s, CaptureMode::Global);
        r.kernel("kernel fill_u32(buf, 2) on s", k::fill_u32(buf, 4, 2), s);
        device::Graph g = r.end("cudaStreamEndCapture(s)", s, Status::Success, 1);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.launch("cudaGraphLaunch(exec, s)", e, s);
        r.buffer("buf after one replay", buf, 4, rep(4, 2));
      });

  add(out, "state.two_captures.independent",
      "Two captures on two streams of one thread are separate sequences (different ids) and both end with a "
      "graph when nothing joins them.",
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        uint32_t* a = r.alloc(4);
        uint32_t* b = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.begin("cudaStreamBeginCapture(s2, global)", s2, CaptureMode::Global);
        r.kernel("kernel fill_u32(a) on s1", k::fill_u32(a, 4, 1), s1);
        r.kernel("kernel fill_u32(b) on s2", k::fill_u32(b, 4, 2), s2);
        r.kernel("kernel increment_u32(b) on s2", k::increment_u32(b, 4), s2);
        uint64_t id1 = capture_id(r, s1), id2 = capture_id(r, s2);
        r.flag("capture ids of s1 and s2 differ (both non-zero)", id1 != 0 && id2 != 0 && id1 != id2, true);
        r.end("cudaStreamEndCapture(s1)", s1, Status::Success, 1);
        r.capture("capture status of s2 after s1's end", s2, CaptureStatus::Active);
        r.end("cudaStreamEndCapture(s2)", s2, Status::Success, 2);
      });
}

void add_fork_join_end(std::vector<Scenario>& out) {
  add(out, "state.fork_join",
      "Recording an event on a member stream and waiting on it from another stream makes that stream join the "
      "capture (same id); joined back, End succeeds, the graph keeps the cross-stream order, and every member "
      "leaves capture.",
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        Event e1 = r.event(), e2 = r.event();
        uint32_t* a = r.alloc(4);
        uint32_t* b = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.kernel("kernel fill_u32(a, 1) on s1", k::fill_u32(a, 4, 1), s1);
        r.capture("capture status of s2 before the wait", s2, CaptureStatus::None);
        fork(r, s1, s2, e1);
        r.capture("capture status of s2 after the wait", s2, CaptureStatus::Active);
        uint64_t id1 = capture_id(r, s1), id2 = capture_id(r, s2);
        r.flag("s2's capture id equals s1's (non-zero)", id1 != 0 && id1 == id2, true);
        r.kernel("kernel copy_u32(b <- a) on s2", k::copy_u32(b, a, 4), s2);
        r.kernel("kernel increment_u32(b) on s2", k::increment_u32(b, 4), s2);
        join(r, s1, s2, e2);
        r.kernel("kernel add_u32(a += b) on s1", k::add_u32(a, b, 4), s1);
        device::Graph g = r.end("cudaStreamEndCapture(s1)", s1, Status::Success, 4);
        capture_both(r, s1, s2, " after end", CaptureStatus::None);
        r.buffer("a after the capture (nothing ran)", a, 4, rep(4, 0));
        r.buffer("b after the capture (nothing ran)", b, 4, rep(4, 0));
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.launch("cudaGraphLaunch(exec, s1)", e, s1);
        r.buffer("a after one replay (1 + 2)", a, 4, rep(4, 3));
        r.buffer("b after one replay (1 + 1)", b, 4, rep(4, 2));
      });

  add(out, "state.fork_unjoined",
      "End with a forked stream not joined back returns 904 (cudaErrorStreamCaptureUnjoined) and no graph; "
      "every member stream leaves capture.",
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        Event e1 = r.event();
        uint32_t* a = r.alloc(4);
        uint32_t* b = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.kernel("kernel fill_u32(a) on s1", k::fill_u32(a, 4, 1), s1);
        fork(r, s1, s2, e1);
        r.kernel("kernel copy_u32(b <- a) on s2 (never joined back)", k::copy_u32(b, a, 4), s2);
        r.end("cudaStreamEndCapture(s1)", s1, Status::StreamCaptureUnjoined, 0);
        capture_both(r, s1, s2, " after end", CaptureStatus::None);
      });

  add(out, "state.end_on_wrong_stream",
      std::string("End on a member stream that is not the origin returns 903 (cudaErrorStreamCaptureUnmatched) "
                  "and invalidates; the origin stays invalidated until End on it, which returns 901. The member's "
                  "status after the 903 (invalidated) and after the origin's End (none)") +
          kInferred,
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        Event e1 = r.event(), e2 = r.event();
        uint32_t* a = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.kernel("kernel fill_u32(a) on s1", k::fill_u32(a, 4, 1), s1);
        fork(r, s1, s2, e1);
        r.kernel("kernel increment_u32(a) on s2", k::increment_u32(a, 4), s2);
        join(r, s1, s2, e2);
        r.end("cudaStreamEndCapture(s2) (not the origin)", s2, Status::StreamCaptureUnmatched, 0);
        capture_both(r, s1, s2, " after the wrong end", CaptureStatus::Invalidated);
        r.end("cudaStreamEndCapture(s1) (origin)", s1, Status::StreamCaptureInvalidated, 0);
        r.capture("capture status of s1 after its end", s1, CaptureStatus::None);
        r.capture("capture status of s2 after the origin's end", s2, CaptureStatus::None);
      });

  add(out, "state.merge",
      "A stream in one capture waiting on an event captured in another capture returns 902 "
      "(cudaErrorStreamCaptureMerge) and invalidates both captures; each End returns 901.",
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        Event e1 = r.event();
        uint32_t* a = r.alloc(4);
        uint32_t* b = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.kernel("kernel fill_u32(a) on s1", k::fill_u32(a, 4, 1), s1);
        r.call("cudaEventRecord(e1, s1)", r.dev().event_record(e1, s1), Status::Success);
        r.begin("cudaStreamBeginCapture(s2, global)", s2, CaptureMode::Global);
        r.kernel("kernel fill_u32(b) on s2", k::fill_u32(b, 4, 2), s2);
        r.call("cudaStreamWaitEvent(s2, e1) across captures", r.dev().stream_wait_event(s2, e1),
               Status::StreamCaptureMerge);
        capture_both(r, s1, s2, "", CaptureStatus::Invalidated);
        r.end("cudaStreamEndCapture(s1)", s1, Status::StreamCaptureInvalidated, 0);
        r.end("cudaStreamEndCapture(s2)", s2, Status::StreamCaptureInvalidated, 0);
        capture_both(r, s1, s2, " after end", CaptureStatus::None);
      });

  for (CaptureMode m : {CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed}) {
    bool relaxed = m == CaptureMode::Relaxed;
    add(out, "state.end_other_thread." + device::capture_mode_name(m),
        relaxed ? "End from another thread of a relaxed capture succeeds and returns the graph; the stream leaves "
                  "capture."
                : "End from another thread when the mode is not relaxed returns 908 "
                  "(cudaErrorStreamCaptureWrongThread), no graph, and terminates the capture (status none): later "
                  "work on the stream runs eagerly.",
        [m, relaxed](Recorder& r) {
          Stream s = r.stream(true);
          uint32_t* buf = r.alloc(4);
          r.begin("cudaStreamBeginCapture(s, " + device::capture_mode_name(m) + ")", s, m);
          r.kernel("kernel fill_u32(buf, 1) on s", k::fill_u32(buf, 4, 1), s);
          device::Graph g{};
          r.on_other_thread([&] {
            g = r.end("cudaStreamEndCapture(s) from another thread", s,
                      relaxed ? Status::Success : Status::StreamCaptureWrongThread, 1);
          });
          r.capture("capture status of s after the other thread's end", s, CaptureStatus::None);
          if (relaxed) {
            device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
            r.launch("cudaGraphLaunch(exec, s)", e, s);
            r.buffer("buf after one replay", buf, 4, rep(4, 1));
          } else {
            r.kernel("kernel fill_u32(buf, 2) on s after the terminated capture", k::fill_u32(buf, 4, 2), s);
            r.buffer("buf (the kernel ran eagerly)", buf, 4, rep(4, 2));
          }
        });
  }
}

void add_invalidation(std::vector<Scenario>& out) {
  add(out, "state.invalidated.enqueue",
      std::string("After invalidation, later enqueues to the member stream return 901 "
                  "(cudaErrorStreamCaptureInvalidated) and End returns 901 with no graph; nothing enqueued runs, "
                  "and afterwards the stream works eagerly again. The 901 of cudaLaunchHostFunc") +
          kInferred,
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* buf = r.alloc(4);
        uint32_t* buf2 = r.alloc(4);
        auto* src = static_cast<uint32_t*>(r.pinned(16));
        auto count = r.counter();
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.kernel("kernel fill_u32(buf, 1) on s", k::fill_u32(buf, 4, 1), s);
        invalidate_with_malloc(r);
        r.capture("capture status of s", s, CaptureStatus::Invalidated);
        r.kernel("kernel increment_u32(buf) on s", k::increment_u32(buf, 4), s, Status::StreamCaptureInvalidated);
        r.call("cudaMemsetAsync(buf2, s)", r.dev().memset_async(buf2, 1, 16, s), Status::StreamCaptureInvalidated);
        r.call("cudaMemcpyAsync(buf2 <- pinned, s)", r.dev().memcpy_async(buf2, src, 16, CopyKind::HostToDevice, s),
               Status::StreamCaptureInvalidated);
        r.call("cudaLaunchHostFunc(s)", r.dev().launch_host_func(s, [count] { count->fetch_add(1); }),
               Status::StreamCaptureInvalidated);
        r.end("cudaStreamEndCapture(s)", s, Status::StreamCaptureInvalidated, 0);
        r.capture("capture status of s after end", s, CaptureStatus::None);
        r.kernel("kernel fill_u32(buf, 5) on s after the capture", k::fill_u32(buf, 4, 5), s);
        r.buffer("buf (only the eager kernel ran)", buf, 4, rep(4, 5));
        r.buffer("buf2 (nothing ran)", buf2, 4, rep(4, 0));
        r.value("host function runs", count->load(), 0);
      });

  add(out, "state.invalidated.member_enqueue",
      std::string("Invalidation covers every member stream: an enqueue on a joined stream returns 901, its status "
                  "is invalidated, and End on the origin returns 901. The member's status after End (none)") +
          kInferred,
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        Event e1 = r.event();
        uint32_t* a = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.kernel("kernel fill_u32(a) on s1", k::fill_u32(a, 4, 1), s1);
        fork(r, s1, s2, e1);
        invalidate_with_malloc(r);
        r.capture("capture status of s2", s2, CaptureStatus::Invalidated);
        r.kernel("kernel increment_u32(a) on s2", k::increment_u32(a, 4), s2, Status::StreamCaptureInvalidated);
        r.end("cudaStreamEndCapture(s1)", s1, Status::StreamCaptureInvalidated, 0);
        capture_both(r, s1, s2, " after end", CaptureStatus::None);
      });

  add(out, "capture.non_member_stream_eager",
      "Enqueue on a stream outside the capture runs eagerly, now, and is not recorded: the graph ends with 0 "
      "nodes, and an empty graph instantiates and launches.",
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true);
        uint32_t* a = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s1, global)", s1, CaptureMode::Global);
        r.kernel("kernel fill_u32(a, 7) on s2 (not a member)", k::fill_u32(a, 4, 7), s2);
        r.capture("capture status of s2", s2, CaptureStatus::None);
        r.capture("capture status of s1", s1, CaptureStatus::Active);
        device::Graph g = r.end("cudaStreamEndCapture(s1)", s1, Status::Success, 0);
        r.buffer("a after the capture (the kernel ran eagerly)", a, 4, rep(4, 7));
        r.upload(a, rep(4, 0));
        device::GraphExec e = r.instantiate("cudaGraphInstantiate (empty graph)", g);
        r.launch("cudaGraphLaunch(exec, s1)", e, s1);
        r.buffer("a after a replay (the graph does not contain the kernel)", a, 4, rep(4, 0));
      });
}

void add_events(std::vector<Scenario>& out) {
  // An event last recorded in a capture, after the capture ended.
  auto captured_event = [](Recorder& r, Stream s, Event e) {
    uint32_t* buf = r.alloc(4);
    r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
    r.kernel("kernel fill_u32(buf) on s", k::fill_u32(buf, 4, 1), s);
    r.call("cudaEventRecord(e, s) during the capture", r.dev().event_record(e, s), Status::Success);
    r.end("cudaStreamEndCapture(s)", s, Status::Success, 1);
  };
  const std::string rule = "An event last recorded in a capture stays unusable after the capture ends: ";
  add(out, "event.captured_then.query", rule + "cudaEventQuery returns cudaErrorInvalidValue.", [captured_event](Recorder& r) {
    Stream s = r.stream(true);
    Event e = r.event();
    captured_event(r, s, e);
    r.call("cudaEventQuery(e) after the capture", r.dev().event_query(e), Status::InvalidValue);
  });
  add(out, "event.captured_then.synchronize", rule + "cudaEventSynchronize returns cudaErrorInvalidValue.",
      [captured_event](Recorder& r) {
        Stream s = r.stream(true);
        Event e = r.event();
        captured_event(r, s, e);
        r.call("cudaEventSynchronize(e) after the capture", r.dev().event_synchronize(e), Status::InvalidValue);
      });
  add(out, "event.captured_then.wait", rule + "cudaStreamWaitEvent on another stream returns cudaErrorInvalidValue.",
      [captured_event](Recorder& r) {
        Stream s = r.stream(true), s2 = r.stream(true);
        Event e = r.event();
        captured_event(r, s, e);
        r.call("cudaStreamWaitEvent(s2, e) after the capture", r.dev().stream_wait_event(s2, e), Status::InvalidValue);
      });
  add(out, "event.captured_then.rerecorded",
      std::string("An event last recorded in a capture becomes usable again once recorded eagerly: query succeeds.") +
          kInferred,
      [captured_event](Recorder& r) {
        Stream s = r.stream(true);
        Event e = r.event();
        captured_event(r, s, e);
        r.call("cudaEventRecord(e, s) after the capture", r.dev().event_record(e, s), Status::Success);
        r.call("cudaStreamSynchronize(s)", r.dev().stream_synchronize(s), Status::Success);
        r.call("cudaEventQuery(e)", r.dev().event_query(e), Status::Success);
        r.call("cudaEventSynchronize(e)", r.dev().event_synchronize(e), Status::Success);
      });
}

void add_thread_modes(std::vector<Scenario>& out) {
  add(out, "thread_mode.exchange",
      "cudaThreadExchangeStreamCaptureMode sets the calling thread's mode and returns the previous one; a thread "
      "starts in global mode.",
      [](Recorder& r) {
        CaptureMode m = CaptureMode::Relaxed;
        r.call("cudaThreadExchangeStreamCaptureMode(relaxed)", r.dev().thread_exchange_capture_mode(&m), Status::Success);
        r.text("previous mode", device::capture_mode_name(m), "global");
        m = CaptureMode::ThreadLocal;
        r.call("cudaThreadExchangeStreamCaptureMode(thread-local)", r.dev().thread_exchange_capture_mode(&m),
               Status::Success);
        r.text("previous mode", device::capture_mode_name(m), "relaxed");
        m = CaptureMode::Global;
        r.call("cudaThreadExchangeStreamCaptureMode(global)", r.dev().thread_exchange_capture_mode(&m), Status::Success);
        r.text("previous mode", device::capture_mode_name(m), "thread-local");
      });

  add(out, "thread_mode.per_thread",
      "The capture-interaction mode is per thread: a new thread starts in global mode whatever another thread set.",
      [](Recorder& r) {
        CaptureMode m = CaptureMode::Relaxed;
        r.call("cudaThreadExchangeStreamCaptureMode(relaxed) on the main thread",
               r.dev().thread_exchange_capture_mode(&m), Status::Success);
        r.on_other_thread([&r] {
          CaptureMode m2 = CaptureMode::ThreadLocal;
          r.call("cudaThreadExchangeStreamCaptureMode(thread-local) on a new thread",
                 r.dev().thread_exchange_capture_mode(&m2), Status::Success);
          r.text("the new thread's previous mode", device::capture_mode_name(m2), "global");
        });
        m = CaptureMode::Global;
        r.call("cudaThreadExchangeStreamCaptureMode(global) on the main thread",
               r.dev().thread_exchange_capture_mode(&m), Status::Success);
        r.text("the main thread's previous mode", device::capture_mode_name(m), "relaxed");
      });

  // A capture begun on another thread, and the main thread's cudaMalloc (global mode) meanwhile.
  struct OtherThreadCapture {
    const char* name;
    const char* rule;
    CaptureMode mode;
    Status malloc_status;   // the main thread's cudaMalloc
    CaptureStatus after;    // the capture after it
    Status end_status;
    int end_nodes;
  };
  const OtherThreadCapture other_thread_captures[] = {
      {"thread_mode.other_thread_owns_global_capture",
       "A thread in global mode is barred from potentially unsafe calls while another thread owns an active global "
       "capture: here the capture is begun on another thread and the main thread's cudaMalloc returns 900 and "
       "invalidates it.",
       CaptureMode::Global, Status::StreamCaptureUnsupported, CaptureStatus::Invalidated,
       Status::StreamCaptureInvalidated, 0},
      {"thread_mode.other_thread_owns_threadlocal_capture",
       "A thread-local capture owned by another thread does not bar the main thread (global mode): its cudaMalloc "
       "succeeds eagerly and the capture stays active.",
       CaptureMode::ThreadLocal, Status::Success, CaptureStatus::Active, Status::Success, 1},
  };
  for (const OtherThreadCapture& c : other_thread_captures) {
    add(out, c.name, c.rule, [c](Recorder& r) {
      Stream s = r.stream(true);
      uint32_t* buf = r.alloc(4);
      r.on_worker([&] {
        r.begin("cudaStreamBeginCapture(s, " + device::capture_mode_name(c.mode) + ") on another thread", s, c.mode);
        r.kernel("kernel fill_u32(buf) on s (other thread)", k::fill_u32(buf, 4, 1), s);
      });
      r.call("cudaMalloc on the main thread", try_malloc(r, 256), c.malloc_status);
      r.capture("capture status of s", s, c.after);
      r.on_worker([&] { r.end("cudaStreamEndCapture(s) on the capturing thread", s, c.end_status, c.end_nodes); });
      r.capture("capture status of s after end", s, CaptureStatus::None);
    });
  }
}

void add_last_error(std::vector<Scenario>& out) {
  add(out, "last_error.after_invalidation",
      "Capture errors are not sticky, but cudaGetLastError reports the last one until read: 901 is read after "
      "later successful capture, instantiate, replays and synchronize, and reading clears it.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* buf = r.alloc(4);
        r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
        r.kernel("kernel fill_u32(buf) on s", k::fill_u32(buf, 4, 1), s);
        invalidate_with_malloc(r);
        r.end("cudaStreamEndCapture(s)", s, Status::StreamCaptureInvalidated, 0);
        r.begin("cudaStreamBeginCapture(s, global) again", s, CaptureMode::Global);
        r.kernel("kernel increment_u32(buf) on s", k::increment_u32(buf, 4), s);
        device::Graph g = r.end("cudaStreamEndCapture(s)", s, Status::Success, 1);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.launch("cudaGraphLaunch(exec, s) #1", e, s);
        r.launch("cudaGraphLaunch(exec, s) #2", e, s);
        r.sync();
        r.buffer("buf after two replays", buf, 4, rep(4, 2));
        r.call("cudaGetLastError", r.dev().get_last_error(), Status::StreamCaptureInvalidated);
        r.call("cudaGetLastError again (cleared)", r.dev().get_last_error(), Status::Success);
      });

  add(out, "last_error.peek_keeps",
      "cudaPeekAtLastError reports the last error without clearing it; cudaGetLastError reports and clears it.",
      [](Recorder& r) {
        r.call("cudaStreamBeginCapture(legacy stream, global)",
               r.dev().stream_begin_capture(Stream::legacy(), CaptureMode::Global), Status::StreamCaptureUnsupported);
        r.call("cudaPeekAtLastError", r.dev().peek_at_last_error(), Status::StreamCaptureUnsupported);
        r.call("cudaPeekAtLastError again", r.dev().peek_at_last_error(), Status::StreamCaptureUnsupported);
        r.call("cudaGetLastError", r.dev().get_last_error(), Status::StreamCaptureUnsupported);
        r.call("cudaGetLastError again (cleared)", r.dev().get_last_error(), Status::Success);
        r.call("cudaPeekAtLastError after clearing", r.dev().peek_at_last_error(), Status::Success);
      });
}

}  // namespace

void add_state_machine(std::vector<Scenario>& out) {
  add_begin(out);
  add_fork_join_end(out);
  add_invalidation(out);
  add_events(out);
  add_thread_modes(out);
  add_last_error(out);
}

}  // namespace recap::conformance::detail
