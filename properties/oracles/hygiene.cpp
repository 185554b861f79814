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

// Hygiene after a failed capture, on the session whose capture failed: "" or the problem.
std::string hygiene_after(training::Session& session, device::Device& dev, int step) {
  if (!runtime::phase_flags_clear()) return "phase flags still set after the failed capture";
  auto& t = session.trainer();
  for (device::Stream s : {t.main, t.side, t.capture}) {
    device::CaptureStatus st = device::CaptureStatus::None;
    uint64_t id = 0;
    dev.stream_get_capture_info(s, &st, &id);
    if (st != device::CaptureStatus::None)
      return "stream " + std::to_string(s.id) + " still " + device::capture_status_name(st) + " after the failed capture";
  }
  for (auto* c : t.checkpoints)
    if (c->pending() != 0) return "a checkpoint keeps " + std::to_string(c->pending()) + " pending records";
  training::StepRecord rec = session.eager_step(step);
  for (const auto& m : rec.microbatches)
    if (!std::isfinite(m.loss)) return "the eager step after the failed capture has a non-finite loss";
  if (!runtime::phase_flags_clear()) return "phase flags set after the eager step";
  return "";
}

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

// While the case's own session lives: when its capture failed, judge that session.
void inspect_session(Runs& runs, training::Session& session, device::Device& dev) {
  if (!capture_failed(runs.main())) return;
  std::string h;
  try {
    h = hygiene_after(session, dev, runs.spec().steps());
  } catch (const std::exception& e) {
    h = std::string("the eager step after the failed capture threw: ") + e.what();
  }
  runs.session_notes["hygiene"] = h;
}

CheckResult judge(Runs& runs) {
  const char* p = "hygiene";
  if (capture_failed(runs.main())) {
    const std::string& h = runs.session_notes["hygiene"];
    return h.empty() ? passed(p) : bad(p, Disposition::Incorrect, h);
  }
  CaseSpec inj = injected_failure(runs.spec());
  auto t0 = std::chrono::steady_clock::now();
  CheckResult c;
  try {
    auto dev = new_device(runs.options().backend);
    training::Session session(*dev, inj);
    training::RunResult ir = session.run();
    if (!capture_failed(ir)) {
      c = skipped(p, "the injected capture failure did not happen");
    } else {
      std::string h = hygiene_after(session, *dev, inj.steps());
      c = h.empty() ? passed(p) : bad(p, Disposition::Incorrect, h);
    }
  } catch (const std::exception& e) {
    c = bad(p, Disposition::Crashed, std::string("after an injected capture failure: ") + e.what());
  }
  runs.report().timings["hygiene_ms"] = ms_since(t0);
  return c;
}

}  // namespace

Oracle hygiene_oracle() {
  return {"hygiene", "after an injected capture failure, flags and streams are clean and the next step works", judge,
          inspect_session};
}

}  // namespace recap::properties
