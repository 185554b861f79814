// hygiene: after a capture fails, the phase flags are clear, no stream is left capturing, no
// checkpoint keeps pending records, and the next eager step works (docs/recompute-and-rng.md,
// bug class 6: flags not reset in a finally block leave recompute off for the rest of training).
// A case whose own capture failed is judged on its own session; any other case is turned into one
// whose capture fails (injected_failure) and that one is judged.
#include <cmath>

#include "harness/runtime/phase.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {

using training::CaseSpec;
using training::CheckpointGranularity;
using training::CheckpointPolicy;
using training::ExecutorKind;

namespace {

// The case turned into one whose capture fails: naive policy, host generator, the first layer
// checkpointed whole and graphed, per-layer graphs unless full-iteration, no warmup, one replay.
CaseSpec injected_failure(CaseSpec s) {
  s.policy = CheckpointPolicy::Naive;
  s.generator = runtime::GeneratorMode::Host;
  s.style = training::CheckpointStyle::Reentrant;
  s.warmup_backward = training::WarmupBackward::Backward;
  if (s.executor == ExecutorKind::Eager) s.executor = ExecutorKind::PerLayer;
  s.layers[0].checkpoint = CheckpointGranularity::Full;
  s.layers[0].modules.clear();
  s.layers[0].graphed = true;
  s.warmup = 0;
  s.replays = 1;
  return s;
}

bool capture_failed(const training::RunResult& r) { return r.failure && r.failure->phase == "capture"; }

// A hygiene answer: "" clean; out of memory judges nothing; anything else is what is wrong.
CheckResult verdict(const char* p, const std::string& h, const std::string& after) {
  if (h.empty()) return passed(p, after + ": phase flags clear, no stream capturing, no pending checkpoint record, the next eager step ran");
  if (h.rfind(training::kHygieneOutOfMemory, 0) == 0) return skipped(p, h);
  return bad(p, Disposition::Incorrect, h);
}

CheckResult judge(Runs& runs) {
  const char* p = "hygiene";
  // A framework driver sends no hygiene observation (CONTRACT): nothing to judge, never passed.
  if (!runs.hygiene_observed()) return skipped(p, "the system under test does not observe hygiene after a failed capture");
  if (capture_failed(runs.main())) {
    return verdict(p, runs.session_notes["hygiene"], "after the case's own failed capture");
  }
  CaseSpec inj = injected_failure(runs.spec());
  auto t0 = std::chrono::steady_clock::now();
  CheckResult c;
  try {
    Run ir = run_on_fresh_device(inj, runs.options());
    record_run_profile(runs.report(), "hygiene_run", ir);
    if (!ir.crash.empty()) {
      c = bad(p, Disposition::Crashed, "after an injected capture failure: " + ir.crash);
      c.cuda_error = ir.crash_signal;  // as capture_clean's: the bucket names the signal
      runs.report().timings["hygiene_ms"] = ms_since(t0);
      return c;
    }
    if (!ir.skipped.empty() || !ir.out_of_memory.empty()) {
      runs.report().timings["hygiene_ms"] = ms_since(t0);
      return skipped(p, "the injected capture failure cannot run on the system under test: " +
                            (ir.skipped.empty() ? "out of device memory: " + ir.out_of_memory : ir.skipped));
    }
    if (!capture_failed(*ir.result)) {
      c = skipped(p, "the injected capture failure did not happen");
    } else {
      if (!ir.hygiene) c = skipped(p, "the system under test does not observe hygiene after a failed capture");
      else c = verdict(p, *ir.hygiene, "after an injected capture failure");
    }
  } catch (const std::exception& e) {
    c = bad(p, Disposition::Crashed, std::string("after an injected capture failure: ") + e.what());
  }
  runs.report().timings["hygiene_ms"] = ms_since(t0);
  return c;
}

}  // namespace

Oracle hygiene_oracle() {
  return {"hygiene", "after an injected capture failure, flags and streams are clean and the next step works", judge};
}

}  // namespace recap::properties
