// The oracles (docs/DESIGN.md, "Oracles"): what recap demands of a case. evaluate() runs
// the case and whatever references its properties need (the eager run of the same case, the same
// case without recompute, the fp64 reference of each layer), then judges it.
//
// Properties know nothing of CUDA: they see cases, runs and devices through the runtime.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/base/json.h"
#include "harness/device/device.h"
#include "harness/sut/sut.h"
#include "harness/training/spec.h"
#include "models/check.h"

namespace recap::properties {

// Dispositions, as CUTLASS names them.
// OutOfMemory: the case ran out of device memory, so nothing could be judged: its own verdict,
// never a property failure (a campaign that fills the device is not a bug of the system).
enum class Disposition { Passed, Failed, Incorrect, Crashed, Skipped, OutOfMemory };
// "passed", "failed", "incorrect", "crashed", "skipped", "out-of-memory"
std::string disposition_name(Disposition d);
bool disposition_from_name(const std::string& s, Disposition* out);
// The worse of two (crashed > failed > incorrect > passed > out-of-memory > skipped).
Disposition worse(Disposition a, Disposition b);
// A failure of the system: failed, incorrect or crashed (not passed, skipped or out-of-memory).
bool failing(Disposition d);

// The property names, in the order they are checked (from the registry, properties/oracles/).
//   capture_clean     a capture-safe configuration raises no capture error (naive's is reported
//                     with the failing API and CUDA error name)
//   eager_vs_graphed  loss, gradients, parameters bitwise equal to the eager run at every step
//                     and microbatch
//   recompute_on_off  bitwise equal to the same case without checkpointing
//   rng_ledger        every recomputed draw equals its forward draw; no mask reused across steps; no
//                     two draws of one Philox stream share a value
//   memory            peak and graph-pool bytes against the prediction; recompute saves
//                     activation memory inside graphs; nothing live after teardown
//   reference         y, dx and every parameter gradient of one eager forward+backward of the
//                     case's model against the fp64 reference (relative L2, tolerance by dtype
//                     and depth: models::check::tolerance)
//   hygiene           after an injected capture failure, flags and streams are clean and the
//                     next step works
//   differential      (only with OracleOptions::differential) the same case on the other backend:
//                     same disposition and failure, bitwise equal RNG ledgers, losses, gradients
//                     and parameters within differential_tolerance
const std::vector<std::string>& property_names();
//   rank_recompute_equal  (only with a rank group, --ranks N: the seven below) on every rank, every
//                     recompute draw equals its forward draw (steps[].ranks)
//   tp_masks_differ   draws inside tensor-parallel regions differ across ranks (beyond chance)
//   outside_masks_equal  draws outside those regions are equal on every rank
//   grads_match_one_rank  the group's full gradients and parameters equal a one-rank run's of the
//                     same case (tp 1) within a relative L2 tolerance (pp stages of tp 1: bitwise)
//   pp_schedule_1f1b  every pipeline stage's observed forward/backward events are the 1F1B order
//   pp_stage_masks_differ  pipeline stages draw from their own streams (beyond chance)
//   dp_grads_reduced  data-parallel replicas apply bitwise equal step gradients, the sum of the
//                     replicas' own accumulations (within the tolerance)
// Whether a property is judged only when asked for (differential: a second backend's run).
bool opt_in_property(const std::string& name);
// Whether a property is judged only where the system under test runs a rank group (sut::Sut::ranks).
bool ranks_property(const std::string& name);
// "" when every name is a property, else one line naming the first that is not.
std::string unknown_property(const std::vector<std::string>& selected);

// Where two runs first differ; for `reference`, the worst quantity against the fp64 reference.
struct Divergence {
  int step = -1;
  int microbatch = -1;       // -1: after the step (parameters)
  std::string tensor;        // "loss", "grad block1.mlp.fc1.weight", "param block0.ln1.weight"; "y", "dx"
  double max_abs_error = 0.0;
  uint64_t max_ulps = 0;     // bitwise comparisons only (0 against the fp64 reference)
  // `reference` only: the relative L2 error ||run - ref|| / ||ref|| of `tensor` (+inf when
  // non-finite) and the tolerance it was judged by.
  std::optional<double> rel_l2_error;
  double tolerance = 0.0;
  // "step 3, microbatch 1, grad block1.mlp.fc1.weight: max abs 2.4e-07, 3 ulps";
  // reference: "step 0, microbatch 0, grad block0.mlp.fc1.weight: rel L2 3.1e-02 (tolerance 2e-02), max abs 1.2e-03"
  std::string describe() const;
};

struct CheckResult {
  std::string property;
  Disposition disposition = Disposition::Skipped;  // Skipped: not applicable to this case
  std::string reason;                              // one line; empty when passed
  // What was compared, with counts, one line ("24 recompute masks equal their forward masks"):
  // every passed check has it (a check that observed nothing is skipped, never passed).
  std::string evidence;
  std::optional<Divergence> divergence;
  std::string api;         // capture failures: the failing call ("cudaStreamSynchronize")
  std::string cuda_error;  // capture failures: "cudaErrorStreamCaptureUnsupported"
  int64_t bytes = 0;       // memory findings: activation bytes recompute failed to save
};

struct OracleOptions {
  device::BackendChoice backend = device::BackendChoice::Sim;
  // The skip policy's lost saving inside graphs: a finding (false) or a failure (true).
  bool require_memory_savings = false;
  std::vector<std::string> properties;  // the ones to check; empty: all
  // The system under test: null runs recap's runtime in this process (the default); a Sut (a worker
  // process speaking recap.worker/1) runs the case and every twin.
  std::shared_ptr<sut::Sut> sut;
  // --profile: where the case's time goes, in its report's timings.profile (docs/profile.md):
  // per run (the case's own, each twin, hygiene's injected run) its phases, per oracle its own
  // time less the runs it asked for. Off: no profile key, no clock read beyond the timings'.
  bool profile = false;
  // --differential OTHER: the case is also run on a fresh device of OTHER (recap's runtime in this
  // process) and compared with its own run (property differential). nullopt: not judged.
  std::optional<device::BackendChoice> differential;
};

struct CaseReport {
  training::CaseSpec spec;
  std::string backend;      // "sim", "cuda"
  std::string device_name;
  Disposition disposition = Disposition::Passed;  // the worst over the checks
  std::vector<CheckResult> checks;
  std::vector<std::string> findings;  // what is worth a reviewer's eye without failing
  Json memory;   // by category (live/peak), graph pool, prediction
  Json timings;  // eager step, capture, replay step (ms), with --profile "profile"; excluded from determinism comparisons
  // The first step the system under test reported as a replay, -1 when none (not serialized; the
  // diagnosis reads it: Megatron's per-layer graphs replay from step 1 whatever the case's warmup).
  int first_replay_step = -1;
  // The first failing check, one line: "eager_vs_graphed: step 3, microbatch 1, grad ...".
  std::string first_failure() const;
};

// The first check whose disposition is failing(), or null: what names a failing case (its
// first_failure line, its bucket and shrink signature, what its counterexample records).
const CheckResult* first_failing_check(const CaseReport& r);

// The `reference` check alone: the case's model (its params, data and rng seeds) run once eagerly
// on `backend` (one forward+backward, host generator, inputs from models::check::test_values),
// compared with the fp64 reference. Passed or incorrect (over the tolerance, non-finite, a draw
// the reference cannot match; bf16 past the tolerance but within models::check::kBf16NoiseFactor
// of it passes, and evaluate() reports it as a finding), with the worst quantity as the divergence; crashed when the run
// throws. `tamper` (tests of the oracle): applied to the device results before the comparison.
CheckResult reference_check(const training::CaseSpec& spec, device::Backend backend,
                            const std::function<void(models::check::RunOutput&)>& tamper = {},
                            const models::check::ParamsPerturbation& perturb_reference = {});

// Runs and judges one case. Never throws for a case that validates: an exception inside a run is
// a `crashed` check with its message.
CaseReport evaluate(const training::CaseSpec& spec, const OracleOptions& opts);

// The case report as written in reports: keys sorted at every level (sorted_keys), non-finite
// numbers as strings.
Json case_report_to_json(const CaseReport& r);

}  // namespace recap::properties
