// One oracle = one file in this folder: its name, what it demands, and its judge over the runs it
// needs (docs/DESIGN.md, "Oracles"). registry.cpp lists them in the order they are checked;
// evaluate() (properties/oracles.cpp) runs the case once and then asks each selected oracle.
//
// Runs gives an oracle the case's own run and makes the twins it asks for on demand, each at most
// once per case and each on a fresh device, so two oracles that need the same twin share it:
//   eager twin          the same case, executor eager
//   no-checkpoint twin  the same case with every checkpoint flag off
//   graph-safe twin     the same case under the graph-safe policy
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/training/executor.h"
#include "models/reference/reference.h"
#include "properties/oracles.h"

namespace recap::properties {

// A run of a case on a fresh device. `crash`: the exception that escaped it.
struct Run {
  std::optional<training::RunResult> result;
  std::string crash;
  std::string crash_signal;  // a worker killed by a signal: its name ("SIGSEGV")
  std::string out_of_memory;  // the case ran out of device memory outside the run's own error handling
  std::string skipped;  // the system under test cannot run it as specified: its reason
  double ms = 0;
  // Device bytes live after teardown; nullopt when the system under test does not report them
  // (frameworks): not observed, never 0.
  std::optional<int64_t> live_after;
  // After a failed capture: training::hygiene_after_failed_capture ("" clean); nullopt when the
  // system under test does not observe hygiene (a framework driver sends none).
  std::optional<std::string> hygiene;
  // What the device's init check saw (recap's runtime on sim); nullopt: not observed.
  std::optional<training::InitObservation> init;
  std::string device_name, backend;  // what it ran on ("sim", "NVIDIA H200"; "sim", "cuda")
  // With OracleOptions::profile: the run's phases (harness/base/profile.h) as JSON, "total_ms" its
  // whole time, "other_ms" what no phase holds, "worker" a worker's own (its reply's timings.profile).
  std::optional<Json> profile;
};
// Records a run's profile (when it has one) in the case report's timings.profile.runs[name].
void record_run_profile(CaseReport& report, const std::string& name, const Run& r);
// On opts.sut when set, else on recap's runtime in this process (sut::InProcessSut of
// opts.backend), asked for what the selected oracles read (run_request).
Run run_on_fresh_device(const training::CaseSpec& spec, const OracleOptions& opts);
// "" when the twin ran through, else "<what> crashed: ..." / "<what> failed: ...".
std::string twin_trouble(const char* what, const Run& r);
// Where two runs of the same case first differ, bitwise (steps in order; per microbatch the loss
// then every gradient; then the step's gradients and the parameters after the update).
// `equal` (when given) counts the tensors found bitwise equal before the first divergence.
std::optional<Divergence> first_divergence(const training::RunResult& a, const training::RunResult& b,
                                           size_t* equal = nullptr);

class Runs;
// The case's run against a twin, bit for bit: skipped when the twin did not run through (naming
// it as `twin_name`) or nothing was compared, incorrect at their first divergence ("<versus>:
// step 3, ..."); passed with "5 steps x 2 microbatches, 412 tensors bitwise equal to <twin_name>".
CheckResult compare_with_twin(const char* property, const Runs& runs, const Run& twin, const char* twin_name,
                              const char* versus);

class Runs {
 public:
  Runs(const training::CaseSpec& spec, const OracleOptions& opts, CaseReport& report, device::Backend backend,
       const training::RunResult& main)
      : spec_(spec), opts_(opts), report_(report), backend_(backend), main_(main) {}

  const training::CaseSpec& spec() const { return spec_; }
  const OracleOptions& options() const { return opts_; }
  CaseReport& report() { return report_; }          // memory figures, findings, timings
  device::Backend backend() const { return backend_; }  // what the case ran on
  const training::RunResult& main() const { return main_; }
  bool ran() const { return main_.ok(); }
  // Device bytes live once the case's device is torn down; nullopt: not observed.
  std::optional<int64_t> live_after() const { return live_after_; }
  void set_live_after(std::optional<int64_t> bytes) { live_after_ = bytes; }
  // Whether the system under test reports hygiene after a failed capture (Run::hygiene).
  bool hygiene_observed() const { return hygiene_observed_; }
  void set_hygiene_observed(bool b) { hygiene_observed_ = b; }
  // What the case's own device saw of reads of uninitialized memory; nullopt: not observed.
  const std::optional<training::InitObservation>& init() const { return init_; }
  void set_init(std::optional<training::InitObservation> o) { init_ = std::move(o); }

  const Run& eager_twin();
  const Run& no_checkpoint_twin();
  const Run& graph_safe_twin();
  // The same case on one rank (tp 1): a rank group's case run by the ordinary worker.
  const Run& one_rank_twin();

  // What was seen of the case's own session while it was alive, by oracle name ("hygiene": the
  // check after its failed capture).
  std::map<std::string, std::string> session_notes;

 private:
  // `name` keys the run in the report: timings[name + "_ms"] and timings.profile.runs[name].
  const Run& twin(std::optional<Run>& slot, const training::CaseSpec& spec, const std::string& name);

  const training::CaseSpec& spec_;
  const OracleOptions& opts_;
  CaseReport& report_;
  device::Backend backend_;
  const training::RunResult& main_;
  std::optional<int64_t> live_after_;
  bool hygiene_observed_ = true;
  std::optional<training::InitObservation> init_;
  std::optional<Run> eager_, plain_, graph_safe_, one_rank_;
};

struct Oracle {
  const char* name;
  const char* demands;  // one line, for --help and the docs
  CheckResult (*judge)(Runs&);
  // It applies another system's dropout masks to its fp64 reference: the system is asked to send
  // them (run_request).
  bool reads_masks = false;
  // Judged only when its option asks for it (OracleOptions::differential), even with no --property.
  bool opt_in = false;
  // A cross-rank property: judged only when the system under test runs a rank group (--ranks N,
  // sut::Sut::ranks), so that one-rank campaigns and their reports are as they were.
  bool ranks_only = false;
};

// Whether opts selects the property (no selection: every one).
bool selected(const OracleOptions& opts, const std::string& property);
// What every run of the case is asked to send, decided by the selected oracles (registry.cpp).
sut::RunRequest run_request(const training::CaseSpec& spec, const OracleOptions& opts);

// The memory figures of a run, for every case report (CaseReport::memory; memory.cpp).
Json case_memory_json(const training::RunResult& r);

// Every oracle, in the order they are checked.
const std::vector<Oracle>& oracles();

// The oracles, one per file.
Oracle capture_clean_oracle();
// capture_clean's check of a case that is not valid (training::validate's line): skipped.
CheckResult capture_clean_of_invalid_case(const std::string& why);
// capture_clean's check of a case whose own run gives nothing to judge, the case's only one:
// skipped by the system, out of memory, crashed (its signal as the error), a driver's error.
// nullopt: the run can be judged (every selected oracle, capture_clean's judge first).
std::optional<CheckResult> capture_clean_of_unjudged_run(const Run& own);
Oracle eager_vs_graphed_oracle();
Oracle recompute_on_off_oracle();
Oracle rng_ledger_oracle();
Oracle memory_oracle();
// Multiply-adds of one fp64 CPU pass of `model` (projections and attention cores), and the budget
// past which the reference oracles shrink or skip it (a 1024-wide, 512-token stack costs minutes).
double fp64_macs(const models::ModelSpec& model);
constexpr double kReferenceMacBudget = 2e8;
Oracle reference_oracle();
Oracle training_oracle();
// The fp64 check both of them make of a run's step: a microbatch's gradients (named `names`, in the
// record's order) against the fp64 reference from `params`, the microbatch's input and target
// (training::step_data) and the forward masks of its ledger (training.cpp). `from` names the
// parameters in the reason ("the parameters after step 0"). The microbatch is a fresh
// accumulation: 0, or with data-parallel replicas the first of a replica's share.
CheckResult fp64_microbatch_check(const char* property, const training::CaseSpec& spec,
                                  const std::vector<std::string>& names, const models::reference::Params& params,
                                  const training::StepRecord& step, const std::string& from, int microbatch = 0);
// fp64_microbatch_check of microbatch 0 and, with dp replicas, of each replica's first (d * M / dp):
// a replica that ran other data than its share of the step's fails here.
CheckResult fp64_replicas_check(const char* property, const training::CaseSpec& spec, const std::vector<std::string>& names,
                                const models::reference::Params& params, const training::StepRecord& step,
                                const std::string& from);
// Whether every forward mask of the step's microbatch 0 came with its bytes: another system's
// masks are applied only when it sent them (the worker's mask_frames).
bool masks_sent(const training::StepRecord& step);
Oracle hygiene_oracle();
Oracle differential_oracle();
// The cross-rank oracles of a rank group's run (ranks.cpp; Oracle::ranks_only), and their judges of
// runs (unit tests give hand-made observations): skipped when the run has no `ranks` (one rank).
Oracle rank_recompute_equal_oracle();
Oracle tp_masks_differ_oracle();
Oracle outside_masks_equal_oracle();
Oracle grads_match_one_rank_oracle();
Oracle pp_schedule_1f1b_oracle();
Oracle pp_stage_masks_differ_oracle();
Oracle dp_grads_reduced_oracle();
CheckResult dp_grads_reduced_check(const training::RunResult& r);
CheckResult pp_schedule_1f1b_check(const training::RunResult& r);
CheckResult pp_stage_masks_differ_check(const training::RunResult& r);
CheckResult rank_recompute_equal_check(const training::RunResult& r);
CheckResult tp_masks_differ_check(const training::RunResult& r);
CheckResult outside_masks_equal_check(const training::RunResult& r);
// `one`: the same case's run on one rank (tp 1).
CheckResult grads_match_one_rank_check(const training::RunResult& group, const Run& one);

// The differential's tolerance for losses, gradients and parameters of two backends' runs of one
// case. Element by element (rel_l2 == 0): a of one run against b of the other passes when
// |a - b| <= atol + rtol * |b|. Tensor by tensor (rel_l2 > 0): a tensor of SGD step s passes when
// ||a - b||_2 <= rel_l2 * (1 + s) * ||b||_2 + atol * sqrt(n).
struct DifferentialTolerance {
  double rtol = 0, atol = 0;
  double rel_l2 = 0;
};
DifferentialTolerance differential_tolerance(runtime::DType dtype);
// The differential's judge of two runs of `spec` (the case's own on `own_backend`, the other's on
// `other_backend`; unit tests give synthetic ones): skipped when the other did not run (its
// trouble named), incorrect at the first difference of disposition, failure, graphs, ledger entry
// (bitwise) or tensor (beyond differential_tolerance of spec.model.dtype), else passed with what
// was compared and the worst relative error seen.
CheckResult compare_backends(const training::CaseSpec& spec, const training::RunResult& own, const std::string& own_backend,
                             const Run& other, const std::string& other_backend);

// Check results.
CheckResult passed(const std::string& property, const std::string& evidence);
CheckResult skipped(const std::string& property, const std::string& why);
CheckResult bad(const std::string& property, Disposition d, const std::string& why);

double ms_since(std::chrono::steady_clock::time_point t0);

}  // namespace recap::properties
