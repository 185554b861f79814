// training: the training loop against the math. The gradient the run recorded for step 1,
// microbatch 0, against the fp64 reference computed from the parameters the run had after step 0,
// step 1's input and target (training::step_data) and the masks the run's ledger shows for that
// forward (another system's: the masks it sent, mask_frames). Every other oracle compares runs of
// the same loop with each other, and `reference` checks one pass of the model alone: a loop that
// stops zeroing gradients between steps, or updates with the wrong ones, agrees with all its twins
// (docs/faults.md, grad-accum-not-zeroed).
// Cost: one fp64 pass of the model, as `reference`.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "harness/training/train.h"
#include "models/check.h"
#include "models/reference/reference.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {

// Whether every forward mask of `step`'s microbatch 0 came with its bytes (another system's masks
// are judged only when it sent them: mask_frames).
bool masks_sent(const training::StepRecord& step) {
  for (const auto& e : step.ledger)
    if (e.generator == "mask" && e.site.phase == runtime::Phase::Forward && e.site.microbatch == 0 && e.mask.empty())
      return false;
  return true;
}

CheckResult fp64_microbatch_check(const char* property, const training::CaseSpec& spec,
                                  const std::vector<std::string>& names, const models::reference::Params& params,
                                  const training::StepRecord& step, const std::string& from, int microbatch) {
  namespace mc = models::check;
  const int s = step.step;
  const std::string at = "step " + std::to_string(s) + ", microbatch " + std::to_string(microbatch);
  if (step.microbatches.size() <= static_cast<size_t>(microbatch))
    return bad(property, Disposition::Incorrect, at + ": the run recorded no such microbatch's gradients");
  std::vector<bool> used;
  std::vector<std::string> problems;
  const models::reference::MaskFn masks = mc::ledger_masks(step.ledger, &used, &problems, microbatch);
  const std::vector<float> x = training::step_data(spec, s, microbatch, 0),
                           target = training::step_data(spec, s, microbatch, 1);
  models::reference::Params grads;
  try {
    models::reference::RefModel ref(spec.model, params);
    const std::vector<double> y = ref.forward(models::reference::Vec(x.begin(), x.end()), spec.model.tokens, masks);
    models::reference::Vec dy(y.size());
    for (size_t i = 0; i < y.size(); ++i) dy[i] = (y[i] - target[i]) / static_cast<double>(y.size());  // mse_loss's
    ref.backward(dy);
    grads = ref.grads();
  } catch (const std::exception& e) {
    return bad(property, Disposition::Crashed, std::string("the fp64 reference threw: ") + e.what());
  }
  if (!problems.empty()) return bad(property, Disposition::Incorrect, at + ": " + problems[0]);

  const double tol = mc::tolerance(spec.model);
  Divergence worst;
  worst.step = s;
  worst.microbatch = microbatch;
  worst.tolerance = tol;
  double worst_err = -1.0;
  const auto& got = step.microbatches[static_cast<size_t>(microbatch)].grads;
  size_t compared = 0;
  for (size_t i = 0; i < names.size() && i < got.size(); ++i) {
    const auto it = grads.find(names[i]);
    if (it == grads.end()) continue;
    ++compared;
    double err = mc::rel_l2(got[i], it->second);
    if (std::isnan(err)) err = INFINITY;
    if (err > worst_err) {
      worst_err = err;
      worst.tensor = "grad " + names[i];
      worst.rel_l2_error = err;
      worst.max_abs_error = mc::max_abs(got[i], it->second);
    }
  }
  // No parameter name matched the reference's: nothing was compared (another system's names).
  if (compared == 0) return skipped(property, at + ": no parameter name of the run matches the fp64 reference's");
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s: %zu gradients against fp64 from %s, worst rel L2 %.2e (%s, tolerance %.0e)",
                at.c_str(), compared, from.c_str(), worst_err, worst.tensor.c_str(), tol);
  CheckResult c = passed(property, buf);
  if (worst_err >= 0) c.divergence = worst;
  if (!std::isfinite(worst_err) || worst_err > mc::kNoiseFactor * tol) {
    c.disposition = Disposition::Incorrect;
    c.reason = "step " + std::to_string(s) + " vs the fp64 reference from " + from + ": " + worst.describe();
  }
  return c;
}

CheckResult fp64_replicas_check(const char* property, const training::CaseSpec& spec, const std::vector<std::string>& names,
                                const models::reference::Params& params, const training::StepRecord& step,
                                const std::string& from) {
  CheckResult c = fp64_microbatch_check(property, spec, names, params, step, from, 0);
  const int per = spec.microbatches / std::max(1, spec.dp);
  for (int d = 1; d < spec.dp && per > 0 && c.disposition == Disposition::Passed; ++d) {
    CheckResult more = fp64_microbatch_check(property, spec, names, params, step, from, d * per);
    if (more.disposition != Disposition::Passed) return more;
    const size_t colon = more.evidence.find(": ");  // after "step s, microbatch m"
    c.evidence += "; replica " + std::to_string(d) + "'s first (microbatch " + std::to_string(d * per) + "): " +
                  (colon == std::string::npos ? more.evidence : more.evidence.substr(colon + 2));
  }
  return c;
}

namespace {

CheckResult judge(Runs& runs) {
  const char* p = "training";
  const training::CaseSpec& spec = runs.spec();
  const training::RunResult& r = runs.main();
  if (!r.ok()) return skipped(p, "the run did not complete");
  if (r.steps.size() < 2) return skipped(p, "one step: there is no step after the first");
  if (spec.model.dtype != models::DType::F32)
    return skipped(p, "bf16: a whole stack against fp64 is checked per layer (reference); this check runs in fp32");
  // The fp64 pass runs on the CPU: past the reference oracle's budget the case is left to it.
  if (fp64_macs(spec.model) > kReferenceMacBudget) return skipped(p, "too large for an fp64 pass of the whole stack");
  const training::StepRecord& before = r.steps[0];
  const training::StepRecord& step = r.steps[1];
  if (!masks_sent(step)) return skipped(p, "the system under test sent no dropout masks to apply (mask_frames)");
  if (before.params.size() != r.param_names.size())
    return bad(p, Disposition::Incorrect, "the run recorded no parameters to check");
  auto t0 = std::chrono::steady_clock::now();
  models::reference::Params params;
  for (size_t i = 0; i < r.param_names.size(); ++i)
    params[r.param_names[i]] = models::reference::Vec(before.params[i].begin(), before.params[i].end());
  CheckResult c = fp64_replicas_check(p, spec, r.param_names, params, step, "the parameters after step 0");
  runs.report().timings["training_ms"] = ms_since(t0);
  return c;
}

}  // namespace

Oracle training_oracle() {
  return {"training",
          "step 1's gradients (microbatch 0; with replicas, each replica's first) against the fp64 reference from the parameters after step 0 and step 1's "
          "data and masks: the training loop (zeroing, update) tied to the math",
          judge, /*reads_masks=*/true};
}

}  // namespace recap::properties
