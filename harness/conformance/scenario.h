// Conformance scenarios: small programs, each exercising one rule of the CUDA capture model
// (docs/cuda-capture-rules.md). A scenario records the outcome of every call it
// makes (return code, capture status, values read back) through a Recorder, together with what
// the rule predicts. On `sim` every outcome must match the prediction; on the GPU every outcome
// must equal what `sim` recorded, call for call (where they differ, the GPU is right and sim is
// fixed).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/device/device.h"

namespace recap::conformance {

// One recorded observation: a call's return code, a capture status, or a value read back.
struct Observation {
  std::string label;     // what was done: "cudaMalloc during global capture (own thread)"
  std::string got;       // canonical text: "cudaErrorStreamCaptureUnsupported", "active", "[1,2,3]", "2"
  std::string expected;  // what the rule predicts, same form
  bool matches() const { return got == expected; }
};

struct Outcome {
  std::vector<Observation> observations;
};

class Recorder;  // defined below

struct Scenario {
  std::string name;  // stable, filterable id: "alloc.cudaMalloc.global.own"
  std::string rule;  // the rule exercised, in words (a row or state-machine rule of the reference)
  std::function<void(Recorder&)> run;
};

// Thrown by a Recorder to stop a scenario whose setup failed; run_scenario turns it into
// ScenarioResult::error.
struct ScenarioAbort : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Everything a scenario needs: the device, and recording helpers. A Recorder also owns the
// streams, events, graphs and memory it hands out and releases them when the scenario ends, so a
// scenario that stops half-way leaves no state behind for the next one.
//
// Observation helpers record (label, got, expected) in canonical text: error names as
// cudaGetErrorName spells them, capture statuses as capture_status_name, buffers as "[1,2,3]",
// graphs as "graph with N nodes" or "none". Resource helpers (stream, event, alloc, ...) are setup:
// they are not recorded, and a failure aborts the scenario (ScenarioAbort). Buffer reads and
// uploads synchronize the device first, so they must not be made while a capture is active (the
// Recorder aborts rather than invalidate it).
//
// Cleanup (finish(), also run by the destructor): resets the owner thread's capture-interaction
// mode to Global (the CUDA default), ends every capture still active or invalidated on the
// streams it knows, runs at_cleanup actions (last first), synchronizes the device, frees graph
// allocations still live, destroys executables, graphs, events and streams, frees memory, and
// clears the last error.
class Recorder {
 public:
  explicit Recorder(device::Device& dev);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  device::Device& dev() { return dev_; }
  const Outcome& outcome() const { return outcome_; }

  // ---- observations ---------------------------------------------------------------------
  void record(const std::string& label, const std::string& got, const std::string& expected);
  // A call's return code.
  device::Status call(const std::string& label, device::Status got, device::Status expected);
  // A setup call that must succeed: recorded (expected Success); aborts the scenario if it fails.
  void must(const std::string& label, device::Status got);
  // The capture status of `s` (cudaStreamGetCaptureInfo); a failing query records its error name.
  device::CaptureStatus capture(const std::string& label, device::Stream s, device::CaptureStatus expected);
  // Synchronizes the device, copies n words at `ptr` device->host and records them.
  void buffer(const std::string& label, const void* ptr, size_t n, const std::vector<uint32_t>& expected);
  void value(const std::string& label, int64_t got, int64_t expected);
  void flag(const std::string& label, bool got, bool expected);
  void text(const std::string& label, const std::string& got, const std::string& expected);

  // ---- recorded calls that also keep what they create -----------------------------------
  device::Status begin(const std::string& label, device::Stream s, device::CaptureMode mode,
                       device::Status expected = device::Status::Success);
  // cudaStreamEndCapture; records the code, then the graph ("graph with N nodes" / "none"):
  // expected_nodes is used when `expected` is Success, otherwise "none" is expected.
  device::Graph end(const std::string& label, device::Stream s, device::Status expected, int expected_nodes);
  device::GraphExec instantiate(const std::string& label, device::Graph g, unsigned flags = 0,
                                device::Status expected = device::Status::Success);
  device::Status launch(const std::string& label, device::GraphExec e, device::Stream s,
                        device::Status expected = device::Status::Success);
  device::Status kernel(const std::string& label, const device::Kernel& k, device::Stream s,
                        device::Status expected = device::Status::Success);
  // cudaDeviceSynchronize, recorded (expected Success).
  void sync(const std::string& label = "cudaDeviceSynchronize");

  // ---- resources (setup: not recorded, abort on failure) ---------------------------------
  device::Stream stream(bool non_blocking);
  device::Event event();
  uint32_t* alloc(size_t n_words, device::MemCategory cat = device::MemCategory::Other);  // zeroed
  void* pinned(size_t bytes);            // cudaMallocHost, zeroed
  uint32_t* host(size_t n_words);        // pageable host memory, zeroed, lives as long as the Recorder
  std::shared_ptr<std::atomic<int>> counter();
  // Copies words host->device (cudaMemcpy) and synchronizes the device.
  void upload(void* dst, const std::vector<uint32_t>& words);
  // Bytes live in `cat` minus those live when the Recorder was made (total when cat is kCount).
  int64_t live_delta(device::MemCategory cat) const;

  // ---- ownership of things made by raw device calls --------------------------------------
  void adopt(device::Stream s);
  void adopt(device::Event e);
  void adopt(device::Graph g);
  void adopt(device::GraphExec e);
  void adopt_device(void* p);       // freed with cudaFree
  void adopt_pinned(void* p);       // freed with cudaFreeHost
  void adopt_graph_alloc(void* p);  // a graph allocation left live by a launch: freed with cudaFree
  void release(void* p);            // the scenario freed p itself: forget it (any of the three kinds)
  void at_cleanup(std::function<void()> fn);
  void track_capture(device::Stream s);  // a stream on which a capture may be left to end

  // ---- threads --------------------------------------------------------------------------
  // Sets the calling thread's capture-interaction mode (cudaThreadExchangeStreamCaptureMode).
  void set_thread_mode(device::CaptureMode mode);
  // Runs fn on a new std::thread and joins it; an exception thrown there is rethrown here.
  void on_other_thread(const std::function<void()>& fn);
  // Runs fn on this Recorder's one persistent worker thread (made on first use, joined by
  // finish()) and waits for it: for a capture owned by a thread other than the main one, begun
  // and ended on the same thread. An exception thrown there is rethrown here.
  void on_worker(const std::function<void()>& fn);

  [[noreturn]] void abort(const std::string& why);
  // Releases everything (see above); idempotent.
  void finish();

 private:
  bool any_capture_active();
  void require_no_capture(const std::string& what);

  struct Worker;

  device::Device& dev_;
  std::unique_ptr<Worker> worker_;
  Outcome outcome_;
  std::mutex mu_;
  bool finished_ = false;
  device::MemoryStats baseline_;
  std::vector<device::Stream> streams_;
  std::vector<device::Stream> capture_streams_;
  std::vector<device::Event> events_;
  std::vector<device::Graph> graphs_;
  std::vector<device::GraphExec> execs_;
  std::vector<void*> device_ptrs_;
  std::vector<void*> pinned_ptrs_;
  std::vector<void*> graph_allocs_;
  std::vector<std::unique_ptr<uint32_t[]>> host_buffers_;
  std::vector<std::function<void()>> cleanup_;
};

// Canonical text of observations.
std::string words_text(const std::vector<uint32_t>& words);  // "[1,2,3]"
std::string graph_text(int64_t nodes);                        // "graph with 2 nodes"; < 0: "none"
std::string update_result_name(device::GraphExecUpdateResult r);  // "cudaGraphExecUpdateErrorTopologyChanged"

// All scenarios, in a fixed order.
const std::vector<Scenario>& all_scenarios();

struct ScenarioResult {
  std::string name;
  std::string backend;  // "sim" or "cuda"
  Outcome outcome;
  std::string error;    // non-empty when the scenario itself could not run (e.g. a setup call failed)
  // Observations whose `got` differs from `expected`.
  std::vector<Observation> mismatches() const;
  bool passed() const { return error.empty() && mismatches().empty(); }
};

// Runs one scenario on `dev` (clearing the last-error state first) and returns what it observed.
ScenarioResult run_scenario(const Scenario& s, device::Device& dev);

// Differences between two runs of the same scenario (e.g. cuda against sim), call by call:
// one line per differing observation, plus one for a different number of observations.
std::vector<std::string> compare_outcomes(const ScenarioResult& a, const ScenarioResult& b);

}  // namespace recap::conformance
