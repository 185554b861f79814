// "Calls during capture": every row of the reference table, as the probe that measured it did:
// begin a capture on a fresh stream, launch one kernel, make the call (from the capturing thread
// or from another one), read the capture status, end the capture. Where the capture survives, the
// graph is also instantiated and replayed, to show that the kernel was recorded and not run, and
// where the call ran eagerly or became a node, its effect is read back.
//
// Scenario names: during_capture.<call>.<capture mode>.<thread>.<capture stream>
//   thread: own            the capturing thread (capture-interaction mode Global, the default)
//           own_relaxed    the capturing thread, its mode set to Relaxed for the call
//           other_global   another thread, mode Global (the default)
//           other_relaxed  another thread, mode Relaxed
//           other_threadlocal  another thread, mode ThreadLocal
//   capture stream: nonblocking | blocking
#include <memory>

#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance::detail {
namespace {

constexpr uint32_t kMark = 0xC0DEu;  // what the captured kernel writes into buf at replay

enum class Who { Own, OwnRelaxed, OtherGlobal, OtherRelaxed, OtherThreadLocal };

std::string who_id(Who w) {
  switch (w) {
    case Who::Own: return "own";
    case Who::OwnRelaxed: return "own_relaxed";
    case Who::OtherGlobal: return "other_global";
    case Who::OtherRelaxed: return "other_relaxed";
    case Who::OtherThreadLocal: return "other_threadlocal";
  }
  return "?";
}

std::string who_text(Who w) {
  switch (w) {
    case Who::Own: return "the capturing thread";
    case Who::OwnRelaxed: return "the capturing thread (its mode set to relaxed)";
    case Who::OtherGlobal: return "another thread (mode global)";
    case Who::OtherRelaxed: return "another thread (mode relaxed)";
    case Who::OtherThreadLocal: return "another thread (mode thread-local)";
  }
  return "?";
}

bool is_other(Who w) { return w == Who::OtherGlobal || w == Who::OtherRelaxed || w == Who::OtherThreadLocal; }

// What the rule predicts for one call.
struct Expect {
  Status code = Status::Success;
  bool invalidates = false;  // the call invalidates the capture (end then returns 901)
  int extra_nodes = 0;       // nodes the call adds to the graph when it does not
};
Expect eager() { return Expect{Status::Success, false, 0}; }
Expect node(int n) { return Expect{Status::Success, false, n}; }
Expect fail(Status code) { return Expect{code, true, 0}; }

// The hooks of one probe run. `act` is the call itself, made on the chosen thread; the others run
// on the capturing thread.
struct Hooks {
  std::function<void()> during;        // during capture, before the call
  std::function<Status()> act;         // the call
  std::function<void()> after_call;    // during capture, after the call, only when it succeeded
  std::function<void()> after_end;     // after end capture, when the capture was predicted to survive
  std::function<void()> after_replay;  // after one replay of the graph, likewise
};

struct Variant {
  CaptureMode mode;
  Who who;
  bool blocking;
};

struct Probe {
  std::string id;    // name segment: "cudaMalloc"
  std::string what;  // the call in words: "cudaMalloc(1024 B)"
  std::string row;   // the table row
  std::vector<Variant> variants;
  std::function<Expect(const Variant&)> expect;
  std::function<std::string(const Variant&)> inferred;  // non-empty: why the expectation is inferred
  std::function<Hooks(Recorder&, Stream cap)> prepare;  // before capture
};

// ---- who may make a potentially unsafe call ------------------------------------------------
// Thread T is barred iff T's capture-interaction mode is not Relaxed and either T owns a
// non-Relaxed active capture, or T's mode is Global and another thread owns an active Global
// capture. The capture in these scenarios is owned by the main thread.
bool barred(CaptureMode capture, Who who) {
  switch (who) {
    case Who::Own: return capture != CaptureMode::Relaxed;
    case Who::OwnRelaxed: return false;
    case Who::OtherGlobal: return capture == CaptureMode::Global;
    case Who::OtherRelaxed: return false;
    case Who::OtherThreadLocal: return false;
  }
  return true;
}

Expect unsafe_call(const Variant& v) { return barred(v.mode, v.who) ? fail(Status::StreamCaptureUnsupported) : eager(); }

// ---- variant sets ------------------------------------------------------------------------
const CaptureMode kModes[] = {CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed};

std::vector<Variant> own_modes(bool both_stream_kinds) {
  std::vector<Variant> v;
  for (CaptureMode m : kModes) {
    v.push_back({m, Who::Own, false});
    if (both_stream_kinds) v.push_back({m, Who::Own, true});
  }
  return v;
}

std::vector<Variant> plus(std::vector<Variant> a, const std::vector<Variant>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Variant> other_modes(Who who, std::initializer_list<CaptureMode> modes, bool blocking = false) {
  std::vector<Variant> v;
  for (CaptureMode m : modes) v.push_back({m, who, blocking});
  return v;
}

// Potentially unsafe calls: own thread in every mode and both stream kinds; another thread (mode
// global) in every mode; and the thread-mode variants that the rule tells apart (under a global
// capture).
std::vector<Variant> unsafe_variants() {
  auto v = own_modes(true);
  v = plus(v, other_modes(Who::OtherGlobal, {CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed}));
  v = plus(v, other_modes(Who::OtherRelaxed, {CaptureMode::Global}));
  v = plus(v, other_modes(Who::OtherThreadLocal, {CaptureMode::Global}));
  v = plus(v, other_modes(Who::OwnRelaxed, {CaptureMode::Global, CaptureMode::ThreadLocal}));
  return v;
}

// ---- inferred-ness -----------------------------------------------------------------------
const char* kByRule =
    "not a measured cell of the table: follows the rule on who may make potentially unsafe calls";
const char* kOtherThread = "the table measured the capturing thread only; the same is expected from another thread";

// Rows 1-2 (alloc/free, uncaptured event query/sync) were measured own and other (mode global).
std::string inferred_unsafe_measured_other(const Variant& v) {
  if (v.who == Who::Own || v.who == Who::OtherGlobal) return "";
  return kByRule;
}
// Row 3 (idle stream query/sync) was measured on the capturing thread only.
std::string inferred_unsafe_own_only(const Variant& v) {
  if (v.who == Who::Own) return "";
  return kByRule;
}
std::string inferred_if_other(const Variant& v) { return is_other(v.who) ? kOtherThread : ""; }
std::string never_inferred(const Variant&) { return ""; }

// ---- probes ------------------------------------------------------------------------------
std::vector<Probe> probes() {
  std::vector<Probe> ps;

  const std::string row_alloc = "cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost: global ✗900 / ✗900, "
                                "thread-local ✗900 / eager, relaxed eager";
  ps.push_back({"cudaMalloc", "cudaMalloc(1024 B)", row_alloc, unsafe_variants(), unsafe_call,
                inferred_unsafe_measured_other, [](Recorder& r, Stream) {
                  Hooks h;
                  h.act = [&r] { return try_malloc(r, 1024); };
                  return h;
                }});
  ps.push_back({"cudaFree", "cudaFree(a buffer allocated before the capture)", row_alloc, unsafe_variants(),
                unsafe_call, inferred_unsafe_measured_other, [](Recorder& r, Stream) {
                  Hooks h;
                  uint32_t* p = r.alloc(256);
                  h.act = [&r, p] {
                    Status st = r.dev().free(p);
                    if (device::ok(st)) r.release(p);
                    return st;
                  };
                  return h;
                }});
  ps.push_back({"cudaMallocHost", "cudaMallocHost(1024 B)", row_alloc, unsafe_variants(), unsafe_call,
                inferred_unsafe_measured_other, [](Recorder& r, Stream) {
                  Hooks h;
                  h.act = [&r] {
                    void* p = nullptr;
                    Status st = r.dev().malloc_host(&p, 1024);
                    if (device::ok(st) && p) r.adopt_pinned(p);
                    return st;
                  };
                  return h;
                }});
  ps.push_back({"cudaFreeHost", "cudaFreeHost(pinned memory allocated before the capture)", row_alloc,
                unsafe_variants(), unsafe_call, inferred_unsafe_measured_other, [](Recorder& r, Stream) {
                  Hooks h;
                  void* p = r.pinned(1024);
                  h.act = [&r, p] {
                    Status st = r.dev().free_host(p);
                    if (device::ok(st)) r.release(p);
                    return st;
                  };
                  return h;
                }});

  // An uncaptured event: recorded on a side stream before the capture, and complete.
  auto uncaptured_event = [](Recorder& r) {
    Stream side = r.stream(true);
    Event e = r.event();
    r.must("cudaEventRecord(e, side stream) before the capture", r.dev().event_record(e, side));
    r.must("cudaStreamSynchronize(side stream) before the capture", r.dev().stream_synchronize(side));
    return e;
  };
  const std::string row_event = "event query/sync on an uncaptured event: global ✗900 / ✗900, "
                                "thread-local ✗900 / eager, relaxed eager";
  ps.push_back({"cudaEventQuery_uncaptured", "cudaEventQuery(uncaptured, complete event)", row_event,
                unsafe_variants(), unsafe_call, inferred_unsafe_measured_other, [uncaptured_event](Recorder& r, Stream) {
                  Hooks h;
                  Event e = uncaptured_event(r);
                  h.act = [&r, e] { return r.dev().event_query(e); };
                  return h;
                }});
  ps.push_back({"cudaEventSynchronize_uncaptured", "cudaEventSynchronize(uncaptured, complete event)", row_event,
                unsafe_variants(), unsafe_call, inferred_unsafe_measured_other, [uncaptured_event](Recorder& r, Stream) {
                  Hooks h;
                  Event e = uncaptured_event(r);
                  h.act = [&r, e] { return r.dev().event_synchronize(e); };
                  return h;
                }});

  const std::string row_idle = "stream query/sync on an idle non-capturing stream; cudaStreamQuery(0): "
                               "global ✗900, thread-local ✗900, relaxed eager";
  ps.push_back({"cudaStreamQuery_idle", "cudaStreamQuery(idle non-capturing stream)", row_idle, unsafe_variants(),
                unsafe_call, inferred_unsafe_own_only, [](Recorder& r, Stream) {
                  Hooks h;
                  Stream idle = r.stream(true);
                  h.act = [&r, idle] { return r.dev().stream_query(idle); };
                  return h;
                }});
  ps.push_back({"cudaStreamSynchronize_idle", "cudaStreamSynchronize(idle non-capturing stream)", row_idle,
                unsafe_variants(), unsafe_call, inferred_unsafe_own_only, [](Recorder& r, Stream) {
                  Hooks h;
                  Stream idle = r.stream(true);
                  h.act = [&r, idle] { return r.dev().stream_synchronize(idle); };
                  return h;
                }});
  ps.push_back({"cudaStreamQuery_legacy",
                "cudaStreamQuery(0)",
                row_idle + "; with a blocking capture stream cudaStreamQuery(0) is ✗906 in every mode",
                plus(own_modes(true), other_modes(Who::OtherGlobal, {CaptureMode::Global, CaptureMode::ThreadLocal})),
                [](const Variant& v) { return v.blocking ? fail(Status::StreamCaptureImplicit) : unsafe_call(v); },
                inferred_unsafe_own_only, [](Recorder& r, Stream) {
                  Hooks h;
                  h.act = [&r] { return r.dev().stream_query(Stream::legacy()); };
                  return h;
                }});

  const std::string row_capturing = "stream query/sync on the capturing stream: ✗900 in every mode";
  auto capturing_variants = plus(own_modes(true), other_modes(Who::OtherGlobal, {CaptureMode::Global,
                                                                                 CaptureMode::ThreadLocal,
                                                                                 CaptureMode::Relaxed}));
  ps.push_back({"cudaStreamQuery_capturing", "cudaStreamQuery(capturing stream)", row_capturing, capturing_variants,
                [](const Variant&) { return fail(Status::StreamCaptureUnsupported); }, inferred_if_other,
                [](Recorder& r, Stream cap) {
                  Hooks h;
                  h.act = [&r, cap] { return r.dev().stream_query(cap); };
                  return h;
                }});
  ps.push_back({"cudaStreamSynchronize_capturing", "cudaStreamSynchronize(capturing stream)", row_capturing,
                capturing_variants, [](const Variant&) { return fail(Status::StreamCaptureUnsupported); },
                inferred_if_other, [](Recorder& r, Stream cap) {
                  Hooks h;
                  h.act = [&r, cap] { return r.dev().stream_synchronize(cap); };
                  return h;
                }});

  ps.push_back({"cudaDeviceSynchronize", "cudaDeviceSynchronize()",
                "cudaDeviceSynchronize: ✗900 in every mode, own and other thread",
                plus(plus(own_modes(true), other_modes(Who::OtherGlobal, {CaptureMode::Global, CaptureMode::ThreadLocal,
                                                                            CaptureMode::Relaxed})),
                     other_modes(Who::OtherRelaxed, {CaptureMode::Global})),
                [](const Variant&) { return fail(Status::StreamCaptureUnsupported); },
                [](const Variant& v) -> std::string {
                  return v.who == Who::OtherRelaxed
                             ? "a thread in relaxed mode was not measured; device-wide synchronization waits on the "
                               "capturing stream whatever the thread's mode"
                             : "";
                },
                [](Recorder& r, Stream) {
                  Hooks h;
                  h.act = [&r] { return r.dev().device_synchronize(); };
                  return h;
                }});

  const std::string row_captured = "event query/sync on a captured event: ✗907 in every mode";
  auto captured_variants = plus(own_modes(false), other_modes(Who::OtherGlobal, {CaptureMode::Global}));
  auto captured_event = [](Recorder& r, Stream cap, bool sync) {
    Hooks h;
    Event e = r.event();
    h.during = [&r, e, cap] { r.call("cudaEventRecord(e, capturing stream)", r.dev().event_record(e, cap), Status::Success); };
    h.act = [&r, e, sync] { return sync ? r.dev().event_synchronize(e) : r.dev().event_query(e); };
    return h;
  };
  ps.push_back({"cudaEventQuery_captured", "cudaEventQuery(event recorded in this capture)", row_captured,
                captured_variants, [](const Variant&) { return fail(Status::CapturedEvent); }, inferred_if_other,
                [captured_event](Recorder& r, Stream cap) { return captured_event(r, cap, false); }});
  ps.push_back({"cudaEventSynchronize_captured", "cudaEventSynchronize(event recorded in this capture)", row_captured,
                captured_variants, [](const Variant&) { return fail(Status::CapturedEvent); }, inferred_if_other,
                [captured_event](Recorder& r, Stream cap) { return captured_event(r, cap, true); }});

  ps.push_back({"cudaStreamWaitEvent_uncaptured", "cudaStreamWaitEvent(capturing stream, uncaptured event)",
                "cudaStreamWaitEvent(capturing, uncaptured event): ✗905 in every mode", own_modes(false),
                [](const Variant&) { return fail(Status::StreamCaptureIsolation); }, never_inferred,
                [uncaptured_event](Recorder& r, Stream cap) {
                  Hooks h;
                  Event e = uncaptured_event(r);
                  h.act = [&r, e, cap] { return r.dev().stream_wait_event(cap, e, false); };
                  return h;
                }});
  ps.push_back({"cudaStreamWaitEvent_uncaptured_external",
                "cudaStreamWaitEvent(capturing stream, uncaptured event, cudaEventWaitExternal)",
                "cudaStreamWaitEvent with cudaEventWaitExternal on an uncaptured event: an event-wait node",
                own_modes(false), [](const Variant&) { return node(1); }, never_inferred,
                [uncaptured_event](Recorder& r, Stream cap) {
                  Hooks h;
                  Event e = uncaptured_event(r);
                  h.act = [&r, e, cap] { return r.dev().stream_wait_event(cap, e, true); };
                  return h;
                }});

  // Work on the legacy stream: eager with a non-blocking capture stream, ✗906 with a blocking one.
  const std::string row_legacy = "synchronous cudaMemcpy/cudaMemset; kernel or MemsetAsync on legacy stream 0: "
                                 "eager; ✗906 when the capture stream is blocking";
  auto legacy_variants = plus(own_modes(true), plus(other_modes(Who::OtherGlobal, {CaptureMode::Global}, false),
                                                    other_modes(Who::OtherGlobal, {CaptureMode::Global}, true)));
  auto legacy_expect = [](const Variant& v) { return v.blocking ? fail(Status::StreamCaptureImplicit) : eager(); };
  // The eager effect on buf2 is read back after the capture ends.
  // `make` runs before the capture (setup) and returns the call.
  using MakeCall = std::function<std::function<Status()>(Recorder&, uint32_t*)>;
  auto legacy_probe = [](MakeCall make, std::vector<uint32_t> effect) {
    return [make, effect](Recorder& r, Stream) {
      Hooks h;
      uint32_t* buf2 = r.alloc(4);
      h.act = make(r, buf2);
      h.after_end = [&r, buf2, effect] { r.buffer("buf2 after the capture (the call ran eagerly)", buf2, 4, effect); };
      return h;
    };
  };
  ps.push_back({"cudaMemcpy", "cudaMemcpy(buf2 <- host, 16 B, HostToDevice)", row_legacy, legacy_variants,
                legacy_expect, inferred_if_other,
                legacy_probe(
                    [](Recorder& r, uint32_t* buf2) -> std::function<Status()> {
                      uint32_t* src = r.host(4);
                      for (uint32_t i = 0; i < 4; ++i) src[i] = 11 + i;
                      return [&r, buf2, src] { return r.dev().memcpy(buf2, src, 16, CopyKind::HostToDevice); };
                    },
                    {11, 12, 13, 14})});
  ps.push_back({"cudaMemset", "cudaMemset(buf2, 0x5A, 16 B)", row_legacy, legacy_variants, legacy_expect,
                inferred_if_other,
                legacy_probe([](Recorder& r, uint32_t* buf2) -> std::function<Status()> {
                               return [&r, buf2] { return r.dev().memset(buf2, 0x5A, 16); };
                             },
                             rep(4, 0x5A5A5A5Au))});
  ps.push_back({"kernel_legacy", "kernel fill_u32(buf2, 77) on the legacy stream", row_legacy, legacy_variants,
                legacy_expect, inferred_if_other,
                legacy_probe([](Recorder& r, uint32_t* buf2) -> std::function<Status()> {
                               return [&r, buf2] { return r.dev().launch(k::fill_u32(buf2, 4, 77), Stream::legacy()); };
                             },
                             rep(4, 77))});
  ps.push_back({"cudaMemsetAsync_legacy", "cudaMemsetAsync(buf2, 0x3C, 16 B, legacy stream)", row_legacy,
                legacy_variants, legacy_expect, inferred_if_other,
                legacy_probe([](Recorder& r, uint32_t* buf2) -> std::function<Status()> {
                               return [&r, buf2] { return r.dev().memset_async(buf2, 0x3C, 16, Stream::legacy()); };
                             },
                             rep(4, 0x3C3C3C3Cu))});

  {
    std::vector<Variant> v;
    for (CaptureMode m : kModes) v.push_back({m, Who::Own, true});
    v.push_back({CaptureMode::Global, Who::Own, false});
    ps.push_back({"kernel_per_thread", "kernel fill_u32(buf2, 88) on cudaStreamPerThread",
                  "kernel on cudaStreamPerThread (blocking capture stream): eager", v,
                  [](const Variant&) { return eager(); },
                  [](const Variant& v) -> std::string {
                    return v.blocking ? "" : "measured with a blocking capture stream; a non-blocking one has still "
                                             "less to do with the per-thread stream";
                  },
                  legacy_probe([](Recorder& r, uint32_t* buf2) -> std::function<Status()> {
                                 return [&r, buf2] { return r.dev().launch(k::fill_u32(buf2, 4, 88), Stream::per_thread()); };
                               },
                               rep(4, 88))});
  }

  // Work on the capturing stream: recorded as nodes, not run at capture, run at replay.
  const std::string row_node = "kernel, cudaMemcpyAsync (pinned or pageable), MemsetAsync on the capturing stream: node";
  using MakeNodeCall = std::function<std::function<Status()>(Recorder&, Stream, uint32_t*)>;
  auto node_probe = [](MakeNodeCall make, std::vector<uint32_t> effect) {
    return [make, effect](Recorder& r, Stream cap) {
      Hooks h;
      uint32_t* buf2 = r.alloc(4);
      h.act = make(r, cap, buf2);
      h.after_end = [&r, buf2] { r.buffer("buf2 after the capture (node not run at capture)", buf2, 4, rep(4, 0)); };
      h.after_replay = [&r, buf2, effect] { r.buffer("buf2 after one replay", buf2, 4, effect); };
      return h;
    };
  };
  ps.push_back({"kernel_capturing", "kernel fill_u32(buf2, 99) on the capturing stream", row_node, own_modes(false),
                [](const Variant&) { return node(1); }, never_inferred,
                node_probe([](Recorder& r, Stream cap, uint32_t* buf2) -> std::function<Status()> {
                             return [&r, cap, buf2] { return r.dev().launch(k::fill_u32(buf2, 4, 99), cap); };
                           },
                           rep(4, 99))});
  ps.push_back({"cudaMemcpyAsync_pinned", "cudaMemcpyAsync(buf2 <- pinned host, 16 B, capturing stream)", row_node,
                own_modes(false), [](const Variant&) { return node(1); }, never_inferred,
                node_probe(
                    [](Recorder& r, Stream cap, uint32_t* buf2) -> std::function<Status()> {
                      auto* src = static_cast<uint32_t*>(r.pinned(16));
                      for (uint32_t i = 0; i < 4; ++i) src[i] = 21 + i;
                      return [&r, cap, buf2, src] { return r.dev().memcpy_async(buf2, src, 16, CopyKind::HostToDevice, cap); };
                    },
                    {21, 22, 23, 24})});
  ps.push_back({"cudaMemcpyAsync_pageable", "cudaMemcpyAsync(buf2 <- pageable host, 16 B, capturing stream)", row_node,
                own_modes(false), [](const Variant&) { return node(1); }, never_inferred,
                node_probe(
                    [](Recorder& r, Stream cap, uint32_t* buf2) -> std::function<Status()> {
                      uint32_t* src = r.host(4);
                      for (uint32_t i = 0; i < 4; ++i) src[i] = 31 + i;
                      return [&r, cap, buf2, src] { return r.dev().memcpy_async(buf2, src, 16, CopyKind::HostToDevice, cap); };
                    },
                    {31, 32, 33, 34})});
  ps.push_back({"cudaMemsetAsync_capturing", "cudaMemsetAsync(buf2, 0x11, 16 B, capturing stream)", row_node,
                own_modes(false), [](const Variant&) { return node(1); }, never_inferred,
                node_probe([](Recorder& r, Stream cap, uint32_t* buf2) -> std::function<Status()> {
                             return [&r, cap, buf2] { return r.dev().memset_async(buf2, 0x11, 16, cap); };
                           },
                           rep(4, 0x11111111u))});

  ps.push_back({"cudaMallocAsync_cudaFreeAsync",
                "cudaMallocAsync(p, 1024 B, capturing stream), then fill p, copy buf2 <- p, cudaFreeAsync(p)",
                "cudaMallocAsync / cudaFreeAsync on the capturing stream: alloc/free nodes", own_modes(false),
                [](const Variant&) { return node(4); }, never_inferred, [](Recorder& r, Stream cap) {
                  Hooks h;
                  uint32_t* buf2 = r.alloc(4);
                  auto p = std::make_shared<void*>(nullptr);
                  h.act = [&r, cap, p] { return r.dev().malloc_async(p.get(), 1024, cap, MemCategory::Activations); };
                  h.after_call = [&r, cap, p, buf2] {
                    auto* q = static_cast<uint32_t*>(*p);
                    if (q == nullptr) r.abort("cudaMallocAsync returned success and a null pointer");
                    r.kernel("kernel fill_u32(p, 55) on the capturing stream", k::fill_u32(q, 4, 55), cap);
                    r.kernel("kernel copy_u32(buf2 <- p) on the capturing stream", k::copy_u32(buf2, q, 4), cap);
                    r.call("cudaFreeAsync(p, capturing stream)", r.dev().free_async(q, cap), Status::Success);
                  };
                  h.after_end = [&r, buf2] { r.buffer("buf2 after the capture (nodes not run)", buf2, 4, rep(4, 0)); };
                  h.after_replay = [&r, buf2] {
                    r.buffer("buf2 after one replay", buf2, 4, rep(4, 55));
                    r.value("graph-pool bytes live after the replay (allocation freed in the graph)",
                            r.live_delta(MemCategory::GraphPool), 0);
                  };
                  return h;
                }});

  ps.push_back({"cudaLaunchHostFunc", "cudaLaunchHostFunc(capturing stream, count += 1)",
                "cudaLaunchHostFunc on the capturing stream: host node, not run at capture, once per replay",
                own_modes(false), [](const Variant&) { return node(1); }, never_inferred, [](Recorder& r, Stream cap) {
                  Hooks h;
                  auto count = r.counter();
                  h.act = [&r, cap, count] { return r.dev().launch_host_func(cap, [count] { count->fetch_add(1); }); };
                  h.after_end = [&r, count] { r.value("host function runs after the capture", count->load(), 0); };
                  h.after_replay = [&r, count] { r.value("host function runs after one replay", count->load(), 1); };
                  return h;
                }});

  const std::string row_create = "cudaStreamCreate, cudaEventCreate, cudaMemGetInfo: eager";
  auto create_variants = plus(own_modes(false), other_modes(Who::OtherGlobal, {CaptureMode::Global}));
  ps.push_back({"cudaStreamCreate", "cudaStreamCreateWithFlags(non-blocking)", row_create, create_variants,
                [](const Variant&) { return eager(); }, inferred_if_other, [](Recorder& r, Stream) {
                  Hooks h;
                  auto made = std::make_shared<Stream>();
                  h.act = [&r, made] {
                    Status st = r.dev().stream_create(made.get(), true);
                    if (device::ok(st) && made->id != 0) r.adopt(*made);
                    return st;
                  };
                  h.after_end = [&r, made] {
                    r.capture("capture status of the stream created during the capture", *made, CaptureStatus::None);
                  };
                  return h;
                }});
  ps.push_back({"cudaEventCreate", "cudaEventCreateWithFlags(DisableTiming)", row_create, create_variants,
                [](const Variant&) { return eager(); }, inferred_if_other, [](Recorder& r, Stream) {
                  Hooks h;
                  h.act = [&r] {
                    Event e{};
                    Status st = r.dev().event_create(&e);
                    if (device::ok(st) && e.id != 0) r.adopt(e);
                    return st;
                  };
                  return h;
                }});
  ps.push_back({"cudaMemGetInfo", "cudaMemGetInfo(&free, &total)", row_create, create_variants,
                [](const Variant&) { return eager(); }, inferred_if_other, [](Recorder& r, Stream) {
                  Hooks h;
                  auto fb = std::make_shared<std::pair<size_t, size_t>>(0, 0);
                  h.act = [&r, fb] { return r.dev().mem_get_info(&fb->first, &fb->second); };
                  h.after_end = [&r, fb] {
                    r.flag("cudaMemGetInfo: total > 0 and free <= total", fb->second > 0 && fb->first <= fb->second, true);
                  };
                  return h;
                }});
  return ps;
}

void run_probe(Recorder& r, const Probe& p, const Variant& v, const Expect& x) {
  Stream s = r.stream(!v.blocking);
  uint32_t* buf = r.alloc(4);
  Hooks h = p.prepare(r, s);
  r.begin("cudaStreamBeginCapture(s, " + device::capture_mode_name(v.mode) + ")", s, v.mode);
  r.kernel("kernel fill_u32(buf) on s", k::fill_u32(buf, 4, kMark), s);
  if (h.during) h.during();

  Status got = Status::Unknown;
  switch (v.who) {
    case Who::Own: got = h.act(); break;
    case Who::OwnRelaxed:
      r.set_thread_mode(CaptureMode::Relaxed);
      got = h.act();
      r.set_thread_mode(CaptureMode::Global);
      break;
    case Who::OtherGlobal:
    case Who::OtherRelaxed:
    case Who::OtherThreadLocal:
      r.on_other_thread([&] {
        if (v.who == Who::OtherRelaxed) r.set_thread_mode(CaptureMode::Relaxed);
        if (v.who == Who::OtherThreadLocal) r.set_thread_mode(CaptureMode::ThreadLocal);
        got = h.act();
      });
      break;
  }
  r.call(p.what + " from " + who_text(v.who), got, x.code);
  if (device::ok(got) && h.after_call) h.after_call();

  r.capture("capture status of s after the call", s, x.invalidates ? CaptureStatus::Invalidated : CaptureStatus::Active);
  device::Graph g = r.end("cudaStreamEndCapture(s)", s, x.invalidates ? Status::StreamCaptureInvalidated : Status::Success,
                          1 + x.extra_nodes);
  r.capture("capture status of s after cudaStreamEndCapture", s, CaptureStatus::None);
  if (x.invalidates) return;

  if (h.after_end) h.after_end();
  r.buffer("buf after the capture (captured kernel not run)", buf, 4, rep(4, 0));
  device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
  r.launch("cudaGraphLaunch(exec, s)", e, s);
  r.buffer("buf after one replay", buf, 4, rep(4, kMark));
  if (h.after_replay) h.after_replay();
}

}  // namespace

void add_during_capture(std::vector<Scenario>& out) {
  for (const Probe& p : probes()) {
    for (const Variant& v : p.variants) {
      Expect x = p.expect(v);
      std::string name = "during_capture." + p.id + "." + device::capture_mode_name(v.mode) + "." + who_id(v.who) + "." +
                         (v.blocking ? "blocking" : "nonblocking");
      std::string predicted = x.invalidates ? "returns " + device::error_name(x.code) + " and invalidates the capture"
                              : x.extra_nodes ? "succeeds and is recorded as " + std::to_string(x.extra_nodes) +
                                                    (x.extra_nodes == 1 ? " node" : " nodes")
                                              : "succeeds eagerly and adds nothing to the graph";
      std::string rule = p.what + " from " + who_text(v.who) + " during a " + device::capture_mode_name(v.mode) +
                         " capture on a " + (v.blocking ? "blocking" : "non-blocking") + " stream " + predicted +
                         ". Table row: " + p.row + ".";
      std::string why = p.inferred(v);
      if (!why.empty()) rule += " (inferred: " + why + ")";
      Probe probe = p;
      out.push_back(Scenario{name, rule, [probe, v, x](Recorder& r) { run_probe(r, probe, v, x); }});
    }
  }
}

}  // namespace recap::conformance::detail
