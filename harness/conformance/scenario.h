// Conformance scenarios: small programs, each exercising one rule of the CUDA capture model
// (../shared/reference/cuda-capture-rules.md). A scenario records the outcome of every call it
// makes (return code, capture status, values read back) through a Recorder, together with what
// the rule predicts. On `sim` every outcome must match the prediction; on the GPU every outcome
// must equal what `sim` recorded, call for call (where they differ, the GPU is right and sim is
// fixed).
#pragma once

#include <cstdint>
#include <functional>
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

// Everything a scenario needs: the device, and recording helpers. A Recorder also owns the
// streams, events, graphs and memory it hands out and releases them when the scenario ends, so a
// scenario that stops half-way leaves no state behind for the next one.
class Recorder;

struct Scenario {
  std::string name;  // stable, filterable id: "alloc.cudaMalloc.global.own"
  std::string rule;  // the rule exercised, in words (a row or state-machine rule of the reference)
  std::function<void(Recorder&)> run;
};

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
