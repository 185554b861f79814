// evaluate(): the case's own run, then every selected oracle of the registry (properties/oracles/)
// in order; the case's disposition is the worst of their checks.
#include "properties/oracles.h"

#include <chrono>
#include <iomanip>
#include <sstream>

#include "harness/base/names.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {

using training::CaseSpec;
using training::RunResult;

namespace {
constexpr EnumName<Disposition> kDispositions[] = {{Disposition::Passed, "passed"},
                                                   {Disposition::Failed, "failed"},
                                                   {Disposition::Incorrect, "incorrect"},
                                                   {Disposition::Crashed, "crashed"},
                                                   {Disposition::Skipped, "skipped"},
                                                   {Disposition::OutOfMemory, "out-of-memory"}};

// How bad a disposition is: skipped < out-of-memory < passed < incorrect < failed < crashed.
int rank(Disposition d) {
  switch (d) {
    case Disposition::Skipped: return 0;
    case Disposition::OutOfMemory: return 1;
    case Disposition::Passed: return 2;
    case Disposition::Incorrect: return 3;
    case Disposition::Failed: return 4;
    case Disposition::Crashed: return 5;
  }
  return 0;
}

bool wanted(const OracleOptions& o, const std::string& p) {
  if (o.properties.empty()) return true;
  for (const auto& q : o.properties)
    if (q == p) return true;
  return false;
}
}  // namespace

std::string disposition_name(Disposition d) { return name_of(kDispositions, d); }
bool disposition_from_name(const std::string& s, Disposition* out) { return from_name(kDispositions, s, out); }
Disposition worse(Disposition a, Disposition b) { return rank(a) >= rank(b) ? a : b; }

std::string unknown_property(const std::vector<std::string>& selected) {
  for (const auto& p : selected) {
    bool known = false;
    for (const auto& q : property_names()) known = known || p == q;
    if (!known) {
      std::string all;
      for (const auto& q : property_names()) all += (all.empty() ? "" : ", ") + q;
      return "unknown property '" + p + "' (one of: " + all + ")";
    }
  }
  return "";
}

std::string Divergence::describe() const {
  std::ostringstream o;
  o << "step " << step;
  if (microbatch >= 0) o << ", microbatch " << microbatch;
  o << ", " << tensor << ": ";
  if (rel_l2_error) {
    o << std::setprecision(2) << std::scientific << "rel L2 " << *rel_l2_error << " (tolerance " << tolerance
      << "), max abs " << max_abs_error;
  } else {
    o << "max abs " << max_abs_error << ", " << max_ulps << " ulps";
  }
  return o.str();
}

std::string CaseReport::first_failure() const {
  for (const auto& c : checks)
    if (c.disposition != Disposition::Passed && c.disposition != Disposition::Skipped &&
        c.disposition != Disposition::OutOfMemory)
      return c.property + ": " + c.reason;
  return "";
}

CaseReport evaluate(const CaseSpec& spec, const OracleOptions& opts) {
  CaseReport rep;
  rep.spec = spec;
  rep.backend = opts.backend == device::BackendChoice::Cuda ? "cuda" : "sim";
  rep.memory = Json::object();
  rep.timings = Json::object();
  std::string invalid = training::validate(spec);
  if (!invalid.empty()) {
    rep.disposition = Disposition::Skipped;
    rep.checks.push_back(skipped("capture_clean", "invalid case: " + invalid));
    return rep;
  }

  // The case itself (on the system under test; in process, hygiene's check of the session runs
  // right after a failed capture).
  Run own = run_on_fresh_device(spec, opts);
  rep.timings["case_ms"] = own.ms;
  const std::string& crash = own.crash;
  if (!own.device_name.empty()) rep.device_name = own.device_name;
  if (!own.backend.empty()) rep.backend = own.backend;
  device::Backend backend = rep.backend == "cuda" ? device::Backend::Cuda : device::Backend::Sim;
  if (!own.skipped.empty()) {
    rep.disposition = Disposition::Skipped;
    rep.checks.push_back(skipped("capture_clean", "the system under test cannot run this case: " + own.skipped));
    return rep;
  }
  if (!own.out_of_memory.empty()) {  // nothing can be judged (Disposition)
    rep.checks.push_back(bad("capture_clean", Disposition::OutOfMemory, "out of device memory: " + own.out_of_memory));
    rep.checks.back().cuda_error = "cudaErrorMemoryAllocation";
    rep.disposition = Disposition::OutOfMemory;
    return rep;
  }
  if (!crash.empty()) {
    rep.checks.push_back(bad("capture_clean", Disposition::Crashed, "the run threw: " + crash));
    rep.checks.back().cuda_error = own.crash_signal;  // the error slot of the bucket: a signal kills differently from a hang
    rep.disposition = Disposition::Crashed;
    return rep;
  }
  const RunResult& r = *own.result;
  if (!r.driver_error.empty()) {  // the driver claims graphs it did not show: its error, not the system's
    rep.checks.push_back(bad("capture_clean", Disposition::Crashed, r.driver_error));
    rep.checks.back().cuda_error = "DriverError";  // the error kind: its own bucket
    rep.disposition = Disposition::Crashed;
    return rep;
  }
  if (r.failure && r.failure->error == "cudaErrorMemoryAllocation") {  // nothing can be judged (Disposition)
    CheckResult c;
    c.property = "capture_clean";
    c.disposition = Disposition::OutOfMemory;
    c.reason = "out of device memory: " + r.failure->line();
    c.api = r.failure->api;
    c.cuda_error = r.failure->error;
    rep.checks.push_back(c);
    rep.memory = memory_json(r);
    rep.disposition = Disposition::OutOfMemory;
    return rep;
  }
  Runs runs(spec, opts, rep, backend, r);
  runs.set_live_after(own.live_after);
  runs.set_hygiene_observed(own.hygiene.has_value());
  if (r.failure && r.failure->phase == "capture" && own.hygiene) runs.session_notes["hygiene"] = *own.hygiene;
  rep.memory = memory_json(r);
  {
    double eager_ms = 0, replay_ms = 0;
    int ne = 0, nr = 0;
    for (const auto& s : r.steps) {
      if (s.phase == "replay") {
        replay_ms += s.ms;
        ++nr;
      } else {
        eager_ms += s.ms;
        ++ne;
      }
    }
    if (ne) rep.timings["eager_step_ms"] = eager_ms / ne;
    if (nr) rep.timings["replay_step_ms"] = replay_ms / nr;
    if (r.captured) rep.timings["capture_ms"] = r.capture_ms;
  }

  for (const Oracle& o : oracles())
    if (wanted(opts, o.name)) rep.checks.push_back(o.judge(runs));

  // A case whose every check is skipped judged nothing: it is skipped, not passed.
  rep.disposition = Disposition::Skipped;
  for (const auto& c : rep.checks) rep.disposition = worse(rep.disposition, c.disposition);
  return rep;
}

Json case_report_to_json(const CaseReport& r) {
  Json j;
  j["spec"] = training::case_to_json(r.spec);
  j["backend"] = r.backend;
  j["device"] = r.device_name;
  j["disposition"] = disposition_name(r.disposition);
  Json checks = Json::array();
  for (const auto& c : r.checks) {
    Json k;
    k["property"] = c.property;
    k["disposition"] = disposition_name(c.disposition);
    if (!c.reason.empty()) k["reason"] = c.reason;
    if (!c.evidence.empty()) k["evidence"] = c.evidence;
    if (c.divergence) {
      k["divergence"] = {{"step", c.divergence->step},
                         {"microbatch", c.divergence->microbatch},
                         {"tensor", c.divergence->tensor},
                         {"max_abs_error", json_number(c.divergence->max_abs_error)},
                         {"max_ulps", c.divergence->max_ulps}};
      if (c.divergence->rel_l2_error) {
        k["divergence"]["rel_l2_error"] = json_number(*c.divergence->rel_l2_error);
        k["divergence"]["tolerance"] = c.divergence->tolerance;
      }
    }
    if (!c.api.empty() || !c.cuda_error.empty()) k["capture_error"] = {{"api", c.api}, {"error", c.cuda_error}};
    if (c.bytes) k["bytes"] = c.bytes;
    checks.push_back(k);
  }
  j["checks"] = checks;
  j["findings"] = r.findings;
  j["memory"] = r.memory;
  j["timings"] = r.timings;
  std::string ff = r.first_failure();
  if (!ff.empty()) j["first_failure"] = ff;
  return sorted_keys(explicit_nonfinite(j));
}

}  // namespace recap::properties
