// The probe table of "calls during capture" (scenarios_during_capture_probes.h): per row of the reference
// table, the call, the variants it runs in, the rule's prediction and why it is inferred where
// the table did not measure it.
#include "harness/conformance/scenarios_during_capture_probes.h"

#include <functional>
#include <memory>
#include <utility>

namespace recap::conformance::detail::during {
namespace {

bool is_other(Who w) { return w == Who::OtherGlobal || w == Who::OtherRelaxed || w == Who::OtherThreadLocal; }

// The status of a call that freed p; when it succeeded, the recorder no longer owns p.
Status released(Recorder& r, void* p, Status st) {
  if (device::ok(st)) r.release(p);
  return st;
}

// The hooks of a probe whose call is all it does.
Hooks acting(std::function<Status()> act) {
  Hooks h;
  h.act = std::move(act);
  return h;
}

Expect eager() { return Expect{Status::Success, false, 0}; }
Expect node(int n) { return Expect{Status::Success, false, n}; }
Expect fail(Status code) { return Expect{code, true, 0}; }

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

}  // namespace

// ---- probes ------------------------------------------------------------------------------
std::vector<Probe> probes() {
  std::vector<Probe> ps;

  const std::string row_alloc = "cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost: global ✗900 / ✗900, "
                                "thread-local ✗900 / eager, relaxed eager";
  ps.push_back({"cudaMalloc", "cudaMalloc(1024 B)", row_alloc, unsafe_variants(), unsafe_call,
                inferred_unsafe_measured_other, [](Recorder& r, Stream) {
                  return acting([&r] { return try_malloc(r, 1024); });
                }});
  ps.push_back({"cudaFree", "cudaFree(a buffer allocated before the capture)", row_alloc, unsafe_variants(),
                unsafe_call, inferred_unsafe_measured_other, [](Recorder& r, Stream) {
                  uint32_t* p = r.alloc(256);
                  return acting([&r, p] { return released(r, p, r.dev().free(p)); });
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
                  void* p = r.pinned(1024);
                  return acting([&r, p] { return released(r, p, r.dev().free_host(p)); });
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
                  Event e = uncaptured_event(r);
                  return acting([&r, e] { return r.dev().event_query(e); });
                }});
  ps.push_back({"cudaEventSynchronize_uncaptured", "cudaEventSynchronize(uncaptured, complete event)", row_event,
                unsafe_variants(), unsafe_call, inferred_unsafe_measured_other, [uncaptured_event](Recorder& r, Stream) {
                  Event e = uncaptured_event(r);
                  return acting([&r, e] { return r.dev().event_synchronize(e); });
                }});

  const std::string row_idle = "stream query/sync on an idle non-capturing stream; cudaStreamQuery(0): "
                               "global ✗900, thread-local ✗900, relaxed eager";
  ps.push_back({"cudaStreamQuery_idle", "cudaStreamQuery(idle non-capturing stream)", row_idle, unsafe_variants(),
                unsafe_call, inferred_unsafe_own_only, [](Recorder& r, Stream) {
                  Stream idle = r.stream(true);
                  return acting([&r, idle] { return r.dev().stream_query(idle); });
                }});
  ps.push_back({"cudaStreamSynchronize_idle", "cudaStreamSynchronize(idle non-capturing stream)", row_idle,
                unsafe_variants(), unsafe_call, inferred_unsafe_own_only, [](Recorder& r, Stream) {
                  Stream idle = r.stream(true);
                  return acting([&r, idle] { return r.dev().stream_synchronize(idle); });
                }});
  ps.push_back({"cudaStreamQuery_legacy",
                "cudaStreamQuery(0)",
                row_idle + "; with a blocking capture stream cudaStreamQuery(0) is ✗906 in every mode",
                plus(own_modes(true), other_modes(Who::OtherGlobal, {CaptureMode::Global, CaptureMode::ThreadLocal})),
                [](const Variant& v) { return v.blocking ? fail(Status::StreamCaptureImplicit) : unsafe_call(v); },
                inferred_unsafe_own_only, [](Recorder& r, Stream) {
                  return acting([&r] { return r.dev().stream_query(Stream::legacy()); });
                }});

  const std::string row_capturing = "stream query/sync on the capturing stream: ✗900 in every mode";
  auto capturing_variants = plus(own_modes(true), other_modes(Who::OtherGlobal, {CaptureMode::Global,
                                                                                 CaptureMode::ThreadLocal,
                                                                                 CaptureMode::Relaxed}));
  ps.push_back({"cudaStreamQuery_capturing", "cudaStreamQuery(capturing stream)", row_capturing, capturing_variants,
                [](const Variant&) { return fail(Status::StreamCaptureUnsupported); }, inferred_if_other,
                [](Recorder& r, Stream cap) {
                  return acting([&r, cap] { return r.dev().stream_query(cap); });
                }});
  ps.push_back({"cudaStreamSynchronize_capturing", "cudaStreamSynchronize(capturing stream)", row_capturing,
                capturing_variants, [](const Variant&) { return fail(Status::StreamCaptureUnsupported); },
                inferred_if_other, [](Recorder& r, Stream cap) {
                  return acting([&r, cap] { return r.dev().stream_synchronize(cap); });
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
                  return acting([&r] { return r.dev().device_synchronize(); });
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
                  Event e = uncaptured_event(r);
                  return acting([&r, e, cap] { return r.dev().stream_wait_event(cap, e, false); });
                }});
  ps.push_back({"cudaStreamWaitEvent_uncaptured_external",
                "cudaStreamWaitEvent(capturing stream, uncaptured event, cudaEventWaitExternal)",
                "cudaStreamWaitEvent with cudaEventWaitExternal on an uncaptured event: an event-wait node",
                own_modes(false), [](const Variant&) { return node(1); }, never_inferred,
                [uncaptured_event](Recorder& r, Stream cap) {
                  Event e = uncaptured_event(r);
                  return acting([&r, e, cap] { return r.dev().stream_wait_event(cap, e, true); });
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

}  // namespace recap::conformance::detail::during
