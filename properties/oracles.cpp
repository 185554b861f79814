// evaluate(): the case's own run, then every selected oracle of the registry (properties/oracles/)
// in order; the case's disposition is the worst of their checks.
#include "properties/oracles.h"

#include <algorithm>
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

bool failing(Disposition d) {
  return d == Disposition::Failed || d == Disposition::Incorrect || d == Disposition::Crashed;
}

const CheckResult* first_failing_check(const CaseReport& r) {
  for (const auto& c : r.checks)
    if (failing(c.disposition)) return &c;
  return nullptr;
}

std::string CaseReport::first_failure() const {
  const CheckResult* c = first_failing_check(*this);
  return c ? c->property + ": " + c->reason : "";
}

namespace {
// The sum of the runs' times the report's profile holds.
double runs_ms(const CaseReport& rep) {
  double ms = 0;
  if (auto p = rep.timings.find("profile"); p != rep.timings.end())
    if (auto runs = p->find("runs"); runs != p->end())
      for (const auto& [name, run] : runs->items()) ms += run.value("total_ms", 0.0);
  return ms;
}

// With --profile: the case's whole time and what no run or oracle holds.
CaseReport finish_profile(CaseReport rep, const OracleOptions& opts, std::chrono::steady_clock::time_point t0) {
  if (!opts.profile) return rep;
  Json& p = rep.timings["profile"];
  if (!p.contains("runs")) p["runs"] = Json::object();
  if (!p.contains("oracles")) p["oracles"] = Json::object();
  const double wall = ms_since(t0);
  double held = runs_ms(rep);
  for (const auto& [name, ms] : p["oracles"].items()) held += ms.get<double>();
  p["wall_ms"] = wall;
  p["other_ms"] = std::max(0.0, wall - held);
  return rep;
}
}  // namespace

CaseReport evaluate(const CaseSpec& spec, const OracleOptions& opts) {
  const auto t_case = std::chrono::steady_clock::now();
  CaseReport rep;
  rep.spec = spec;
  rep.backend = opts.backend == device::BackendChoice::Cuda ? "cuda" : "sim";
  rep.memory = Json::object();
  rep.timings = Json::object();
  if (std::string invalid = training::validate(spec); !invalid.empty()) {
    rep.checks.push_back(capture_clean_of_invalid_case(invalid));
    rep.disposition = Disposition::Skipped;
    return finish_profile(std::move(rep), opts, t_case);
  }

  // The case itself (on the system under test; in process, hygiene's check of the session runs
  // right after a failed capture).
  Run own = run_on_fresh_device(spec, opts);
  rep.timings["case_ms"] = own.ms;
  record_run_profile(rep, "case", own);
  if (!own.device_name.empty()) rep.device_name = own.device_name;
  if (!own.backend.empty()) rep.backend = own.backend;
  device::Backend backend = rep.backend == "cuda" ? device::Backend::Cuda : device::Backend::Sim;
  if (std::optional<CheckResult> alone = capture_clean_of_unjudged_run(own)) {  // nothing else can be judged
    rep.checks.push_back(*alone);
    rep.disposition = alone->disposition;
    if (own.result && alone->disposition == Disposition::OutOfMemory) rep.memory = case_memory_json(*own.result);
    return finish_profile(std::move(rep), opts, t_case);
  }
  const RunResult& r = *own.result;
  Runs runs(spec, opts, rep, backend, r);
  runs.set_live_after(own.live_after);
  runs.set_hygiene_observed(own.hygiene.has_value());
  runs.set_init(own.init);
  if (r.failure && r.failure->phase == "capture" && own.hygiene) runs.session_notes["hygiene"] = *own.hygiene;
  rep.memory = case_memory_json(r);
  {
    double eager_ms = 0, replay_ms = 0;
    int ne = 0, nr = 0;
    for (const auto& s : r.steps) {
      if (s.phase == "replay") {
        replay_ms += s.ms;
        if (nr++ == 0) rep.first_replay_step = s.step;
      } else {
        eager_ms += s.ms;
        ++ne;
      }
    }
    if (ne) rep.timings["eager_step_ms"] = eager_ms / ne;
    if (nr) rep.timings["replay_step_ms"] = replay_ms / nr;
    if (r.captured) rep.timings["capture_ms"] = r.capture_ms;
  }

  for (const Oracle& o : oracles()) {
    if (!selected(opts, o.name)) continue;
    if (!opts.profile) {
      rep.checks.push_back(o.judge(runs));
      continue;
    }
    // the oracle's own time: its judge less the runs it asked for (each twin is its own entry)
    const double before = runs_ms(rep);
    const auto t0 = std::chrono::steady_clock::now();
    rep.checks.push_back(o.judge(runs));
    rep.timings["profile"]["oracles"][std::string(o.name) + "_ms"] = std::max(0.0, ms_since(t0) - (runs_ms(rep) - before));
  }

  // A case whose every check is skipped judged nothing: it is skipped, not passed.
  rep.disposition = Disposition::Skipped;
  for (const auto& c : rep.checks) rep.disposition = worse(rep.disposition, c.disposition);
  return finish_profile(std::move(rep), opts, t_case);
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
