// Internal to the conformance library: the scenario groups that all_scenarios() puts together,
// and small helpers shared by them.
#pragma once

#include <string>
#include <vector>

#include "harness/conformance/scenario.h"
#include "harness/device/kernels.h"

namespace recap::conformance::detail {

// The device layer's names every scenario file uses.
using device::CaptureMode;
using device::CaptureStatus;
using device::CopyKind;
using device::Event;
using device::GraphExecUpdateResult;
using device::MemCategory;
using device::Status;
using device::Stream;
namespace k = device::kernels;

// Calls during capture: one scenario per (call, capture mode, thread, capture stream kind).
void add_during_capture(std::vector<Scenario>& out);
// The capture state machine: begin, fork/join, end, merge, invalidation, events, thread modes,
// the last error.
void add_state_machine(std::vector<Scenario>& out);
// Replay, exec update, graph memory nodes, host nodes, memory accounting.
void add_graphs_and_memory(std::vector<Scenario>& out);
// Rules measured on the H200 beyond the reference page (docs/cuda-capture-rules.md, the rules marked *measured*).
void add_measured(std::vector<Scenario>& out);

// Identifiers used in scenario names.

// Appends a scenario.
void add(std::vector<Scenario>& out, std::string name, std::string rule, std::function<void(Recorder&)> run);
// The capture sequence id of `s` (0 when none, or when the capture is invalidated).
uint64_t capture_id(Recorder& r, device::Stream s);

// n copies of v.
std::vector<uint32_t> rep(size_t n, uint32_t v);

// r.launch() of a graph whose allocation p is live after it: p is the Recorder's when it launched.
Status launch_keeping(Recorder& r, const std::string& label, device::GraphExec e, Stream s, void* p);
// cudaFreeAsync(p, s), recorded (expected Success); the scenario freed p, so the Recorder forgets it.
void free_async(Recorder& r, const std::string& label, void* p, Stream s);
// cudaMalloc(bytes, other) as the call under test: not recorded (the caller records its status
// against the rule); a pointer it returns is the Recorder's.
Status try_malloc(Recorder& r, size_t bytes);

}  // namespace recap::conformance::detail
