// capture_clean: a capture-safe configuration raises no capture or run error; when one is raised
// (the naive policy's get_rng_state during capture, a reentrant checkpoint refusing .grad()), the
// check names the failing API and the CUDA error (docs/recompute-and-rng.md, bug classes 1, 4, 14,
// 15). A run that throws out of recap's own error handling is `crashed` before any oracle runs
// (evaluate()).
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

Oracle capture_clean_oracle() {
  return {"capture_clean", "no capture or run error; a raised one is reported with its API and CUDA error", judge};
}

}  // namespace recap::properties
