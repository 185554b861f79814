// The probes of "calls during capture" (scenarios_during_capture.cpp runs them): one per call of
// the reference table, each with the thread/mode/stream variants it is run in and what the rule
// predicts for each.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance::detail::during {

enum class Who { Own, OwnRelaxed, OtherGlobal, OtherRelaxed, OtherThreadLocal };

// What the rule predicts for one call.
struct Expect {
  Status code = Status::Success;
  bool invalidates = false;  // the call invalidates the capture (end then returns 901)
  int extra_nodes = 0;       // nodes the call adds to the graph when it does not
};

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

// Every probe of the table, in the table's order.
std::vector<Probe> probes();

}  // namespace recap::conformance::detail::during
