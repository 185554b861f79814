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
#include "harness/conformance/scenarios_during_capture_probes.h"

namespace recap::conformance::detail {
namespace {

using during::Expect;
using during::Hooks;
using during::Probe;
using during::Variant;
using during::Who;

constexpr uint32_t kMark = 0xC0DEu;  // what the captured kernel writes into buf at replay

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
  for (const Probe& p : during::probes()) {
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
