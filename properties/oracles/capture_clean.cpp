// capture_clean: a capture-safe configuration raises no capture or run error; when one is raised
// (the naive policy's get_rng_state during capture, a reentrant checkpoint refusing .grad()), the
// check names the failing API and the CUDA error (docs/recompute-and-rng.md, bug classes 1, 4, 14,
// 15). A case whose own run gives nothing to judge (invalid, skipped by the system, out of memory,
// thrown out of the run's own error handling, a driver's error) has capture_clean's check alone:
// evaluate() asks capture_clean_of_unjudged_run before any oracle.
#include "properties/oracles/oracle.h"

namespace recap::properties {

namespace {
CheckResult judge(Runs& runs) {
  const training::RunResult& r = runs.main();
  const auto& failure = r.failure;
  if (!failure) {
    if (r.steps.empty()) return skipped("capture_clean", "the run recorded no step");
    std::string ev = "no capture or run error in " + std::to_string(r.steps.size()) + " steps";
    if (r.captured) ev += " (" + std::to_string(r.graphs) + (r.graphs == 1 ? " graph" : " graphs") + " captured)";
    return passed("capture_clean", ev);
  }
  CheckResult c = bad("capture_clean", Disposition::Failed, failure->line());
  c.api = failure->api;
  c.cuda_error = failure->error;
  return c;
}
}  // namespace

CheckResult capture_clean_of_invalid_case(const std::string& why) {
  return skipped("capture_clean", "invalid case: " + why);
}

std::optional<CheckResult> capture_clean_of_unjudged_run(const Run& own) {
  if (!own.skipped.empty())
    return skipped("capture_clean", "the system under test cannot run this case: " + own.skipped);
  if (!own.out_of_memory.empty()) {  // nothing can be judged (Disposition)
    CheckResult c = bad("capture_clean", Disposition::OutOfMemory, "out of device memory: " + own.out_of_memory);
    c.cuda_error = "cudaErrorMemoryAllocation";
    return c;
  }
  if (!own.crash.empty()) {
    CheckResult c = bad("capture_clean", Disposition::Crashed, "the run threw: " + own.crash);
    c.cuda_error = own.crash_signal;  // the error slot of the bucket: a signal kills differently from a hang
    return c;
  }
  const training::RunResult& r = *own.result;
  if (!r.driver_error.empty()) {  // the driver claims graphs it did not show: its error, not the system's
    CheckResult c = bad("capture_clean", Disposition::Crashed, r.driver_error);
    c.cuda_error = "DriverError";  // the error kind: its own bucket
    return c;
  }
  if (r.failure && sut::out_of_memory_error(r.failure->error)) {  // nothing can be judged (Disposition)
    CheckResult c = bad("capture_clean", Disposition::OutOfMemory, "out of device memory: " + r.failure->line());
    c.api = r.failure->api;
    c.cuda_error = r.failure->error;
    return c;
  }
  return std::nullopt;
}

Oracle capture_clean_oracle() {
  return {"capture_clean", "no capture or run error; a raised one is reported with its API and CUDA error", judge};
}

}  // namespace recap::properties
