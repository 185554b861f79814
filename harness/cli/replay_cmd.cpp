// recap replay FILE...: runs corpus cases verbatim through the oracles and compares each verdict
// with the case's `expected` {disposition, property, error}; prints, for a case whose checks
// diverged, the step-by-step table of the run against its reference with the first divergence
// marked. Exit 0 every verdict as expected, 1 one differs, 2 a file does not load.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "harness/cli/campaign.h"
#include "harness/runtime/phase.h"
#include "properties/diagnosis.h"
#include "reports/profile.h"
#include "harness/cli/cli.h"
#include "harness/training/executor.h"
#include "harness/training/spec.h"

namespace recap::cli {

using namespace recap::training;
using properties::Disposition;

namespace {

uint64_t ulps_between(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0 : UINT64_MAX;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  int64_t oa = ia < 0 ? int64_t(INT32_MIN) - ia : ia;
  int64_t ob = ib < 0 ? int64_t(INT32_MIN) - ib : ib;
  return static_cast<uint64_t>(oa > ob ? oa - ob : ob - oa);
}

struct Diff {
  double max_abs = 0;
  uint64_t ulps = 0;
  std::string where;  // the tensor with the largest ulps
};

Diff diff_tensors(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                  const std::vector<std::string>& names, const char* kind) {
  Diff d;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    for (size_t k = 0; k < a[t].size() && k < b[t].size(); ++k) {
      double e = std::fabs(double(a[t][k]) - double(b[t][k]));
      if (std::isnan(e)) e = INFINITY;
      uint64_t u = ulps_between(a[t][k], b[t][k]);
      if (e > d.max_abs) d.max_abs = e;
      if (u > d.ulps) d.ulps = u;
      if (u > 0 && d.where.empty()) d.where = std::string(kind) + " " + (t < names.size() ? names[t] : std::to_string(t));
    }
  }
  return d;
}

std::string ulps_text(uint64_t u) { return u == UINT64_MAX ? "nan" : std::to_string(u); }

// The reference a diverging case is compared with: the eager run of the same case for a graphed
// one (oracle 2), the same case without checkpointing for an eager one (oracle 3).
CaseSpec reference_of(const CaseSpec& s, const std::string& property, std::string* what) {
  CaseSpec r = s;
  bool no_recompute = property == "recompute_on_off" || s.executor == ExecutorKind::Eager;
  if (no_recompute) {
    r = without_checkpoints(s);
    *what = "the same case without checkpointing";
  } else {
    r.executor = ExecutorKind::Eager;
    *what = "the eager run of the same case";
  }
  r.expected = nullptr;
  return r;
}

void print_divergence_table(const CaseSpec& spec, const std::string& backend, const std::string& property) {
  std::string what;
  CaseSpec ref_spec = reference_of(spec, property, &what);
  RunResult run, ref;
  try {
    auto dev = open_device(backend);
    run = run_case(*dev, spec);
    auto dev2 = open_device(backend);
    ref = run_case(*dev2, ref_spec);
  } catch (const std::exception& e) {
    std::printf("  (no table: %s)\n", e.what());
    return;
  }
  std::printf("  step by step against %s:\n", what.c_str());
  std::printf("    %4s %-7s %3s %16s %16s %10s %10s %8s %10s %8s\n", "step", "phase", "mb", "loss", "reference loss",
              "loss err", "grad err", "ulps", "param err", "ulps");
  bool marked = false;
  std::string first;
  for (size_t si = 0; si < run.steps.size(); ++si) {
    const StepRecord& a = run.steps[si];
    const StepRecord* b = si < ref.steps.size() ? &ref.steps[si] : nullptr;
    Diff g, p;
    if (b) {
      g = diff_tensors(a.grads, b->grads, run.param_names, "grad");
      p = diff_tensors(a.params, b->params, run.param_names, "param");
    }
    for (size_t m = 0; m < a.microbatches.size(); ++m) {
      double la = a.microbatches[m].loss;
      double lb = b && m < b->microbatches.size() ? b->microbatches[m].loss : NAN;
      double le = std::fabs(la - lb);
      bool last = m + 1 == a.microbatches.size();
      bool loss_diff = !(la == lb);
      bool diverged = loss_diff || (last && (g.ulps > 0 || p.ulps > 0));
      const char* mark = "  ";
      if (diverged && !marked) {
        marked = true;
        mark = "=>";
        char buf[256];
        if (loss_diff)
          std::snprintf(buf, sizeof buf, "step %d, microbatch %zu, loss: abs error %.3g, %s ulps", a.step, m, le,
                        ulps_text(ulps_between(float(la), float(lb))).c_str());
        else if (g.ulps > 0)
          std::snprintf(buf, sizeof buf, "step %d, first diverging %s (all grads: max abs %.3g, %s ulps)", a.step, g.where.c_str(), g.max_abs,
                        ulps_text(g.ulps).c_str());
        else
          std::snprintf(buf, sizeof buf, "step %d, first diverging %s (all params: max abs %.3g, %s ulps)", a.step, p.where.c_str(), p.max_abs,
                        ulps_text(p.ulps).c_str());
        first = buf;
      }
      if (last)
        std::printf("  %s%4d %-7s %3zu %16.9g %16.9g %10.3g %10.3g %8s %10.3g %8s\n", mark, a.step, a.phase.c_str(), m,
                    la, lb, le, g.max_abs, ulps_text(g.ulps).c_str(), p.max_abs, ulps_text(p.ulps).c_str());
      else
        std::printf("  %s%4d %-7s %3zu %16.9g %16.9g %10.3g\n", mark, a.step, a.phase.c_str(), m, la, lb, le);
    }
  }
  if (run.failure) std::printf("    run stopped: %s\n", run.failure->line().c_str());
  if (ref.failure) std::printf("    reference stopped: %s\n", ref.failure->line().c_str());
  if (marked) std::printf("  first divergence: %s\n", first.c_str());
  else std::printf("  no divergence in losses, gradients or parameters\n");
}

bool check_failed(const properties::CheckResult& c) {
  return c.disposition != Disposition::Passed && c.disposition != Disposition::Skipped &&
         c.disposition != Disposition::OutOfMemory;
}

}  // namespace

ReplayOutcome replay_case(const std::string& path, const CaseSpec& spec, const std::string& backend,
                          bool require_memory_savings, const std::vector<std::string>& properties,
                          const std::shared_ptr<sut::Sut>& sut, bool print, bool profile,
                          std::optional<device::BackendChoice> differential) {
  ReplayOutcome out;
  out.path = path;
  out.expected = spec.expected;
  // each file replays as in a fresh process: a fault point of an earlier file (phase-flag-leak)
  // must not leave this thread's phase flags set for this one
  if (!sut) runtime::reset_phase_flags();
  const Json& exp = spec.expected;
  bool exp_obj = exp.is_object();
  properties::OracleOptions opts;
  device::BackendChoice choice = device::BackendChoice::Sim;
  device::parse_backend_choice(backend, &choice);
  if (choice == device::BackendChoice::Auto) {
    // evaluate() wants a concrete backend: what auto resolves to.
    auto dev = open_device(backend);
    choice = dev->backend() == device::Backend::Sim ? device::BackendChoice::Sim : device::BackendChoice::Cuda;
  }
  opts.backend = choice;
  opts.properties = properties;
  opts.sut = sut;
  opts.profile = profile;
  opts.differential = differential;
  // a differential counterexample names the backend it was judged against (expected.differential)
  if (!differential && exp_obj && exp.contains("differential") && exp["differential"].is_string()) {
    const std::string other = exp["differential"].get<std::string>();
    if (other == "sim" || other == "cuda")
      opts.differential = other == "cuda" ? device::BackendChoice::Cuda : device::BackendChoice::Sim;
  }
  opts.require_memory_savings =
      require_memory_savings || (exp_obj && exp.contains("require_memory_savings") && exp["require_memory_savings"].is_boolean() &&
                                 exp["require_memory_savings"].get<bool>());
  auto t0 = std::chrono::steady_clock::now();
  properties::CaseReport rep = properties::evaluate(spec, opts);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.report = properties::case_report_to_json(rep);
  out.disposition = properties::disposition_name(rep.disposition);
  out.first_failure = rep.first_failure();

  // What was expected: the disposition, and when named, the property and the error.
  std::string want = "passed", want_prop, want_err;
  if (exp_obj && exp.contains("disposition") && exp["disposition"].is_string()) want = exp["disposition"].get<std::string>();
  if (exp_obj && exp.contains("property") && exp["property"].is_string()) want_prop = exp["property"].get<std::string>();
  if (exp_obj && exp.contains("error") && exp["error"].is_string()) want_err = exp["error"].get<std::string>();
  std::vector<std::string> problems;
  if (out.disposition != want) problems.push_back("verdict " + out.disposition + ", expected " + want);
  if (!want_prop.empty() && want != "passed") {
    bool found = false;
    for (const auto& c : rep.checks) found = found || (c.property == want_prop && check_failed(c));
    if (!found) problems.push_back("property " + want_prop + " did not fail");
  }
  if (!want_err.empty() && want != "passed") {
    bool found = false;
    for (const auto& c : rep.checks)
      found = found || (check_failed(c) && (c.cuda_error == want_err || c.api == want_err ||
                                           c.reason.find(want_err) != std::string::npos));
    if (!found) problems.push_back("error " + want_err + " not raised");
  }
  out.as_expected = problems.empty();
  for (size_t i = 0; i < problems.size(); ++i) out.mismatch += (i ? "; " : "") + problems[i];

  if (print) {
    std::printf("replay %s%s: %s", path.c_str(), spec.name.empty() ? "" : (" (" + spec.name + ")").c_str(),
                out.disposition.c_str());
    if (!out.first_failure.empty()) std::printf(": %s", out.first_failure.c_str());
    std::printf("\n");
    int width = 17;  // the longest property name printed, so that the dispositions line up
    for (const auto& c : rep.checks) width = std::max(width, static_cast<int>(c.property.size()));
    for (const auto& c : rep.checks) {
      std::printf("  %-*s %s", width, c.property.c_str(), properties::disposition_name(c.disposition).c_str());
      if (!c.reason.empty()) std::printf(": %s", c.reason.c_str());
      if (!c.evidence.empty()) std::printf(c.reason.empty() ? ": %s" : " [evidence: %s]", c.evidence.c_str());
      if (!c.api.empty() && !c.cuda_error.empty()) std::printf(" [%s: %s]", c.api.c_str(), c.cuda_error.c_str());
      else if (!c.api.empty() || !c.cuda_error.empty()) std::printf(" [%s]", (c.api + c.cuda_error).c_str());
      if (c.bytes) std::printf(" [%" PRId64 " bytes]", c.bytes);
      std::printf("\n");
    }
    for (const auto& f : rep.findings) std::printf("  finding: %s\n", f.c_str());
    if (std::string d = properties::diagnose(rep); !d.empty()) std::printf("  diagnosis: %s\n", d.c_str());
    // The table when a comparison diverged (or the case did not pass).
    std::string prop;
    for (const auto& c : rep.checks)
      if (check_failed(c) && prop.empty()) prop = c.property;
    bool diverged = false;
    for (const auto& c : rep.checks) diverged = diverged || (check_failed(c) && c.divergence.has_value());
    // The reference oracle compares one eager forward/backward with fp64, not two training runs:
    // its divergence (tensor, relative error, tolerance) is on its check line, and a step table
    // against a twin would say nothing about it.
    if (prop == "reference")
      std::printf("  (reference: one eager forward and backward against fp64; see the check line)\n");
    else if (diverged || out.disposition != "passed")
      print_divergence_table(spec, backend, prop);
    std::printf("  expected %s%s%s%s: %s\n", want.c_str(), want_prop.empty() ? "" : (" (" + want_prop + ")").c_str(),
                want_err.empty() ? "" : " ", want_err.c_str(), out.as_expected ? "as expected" : ("DIFFERS: " + out.mismatch).c_str());
  }
  return out;
}

namespace {

struct ReplayArgs {
  std::vector<std::string> files;
  std::string backend = "sim";
  bool require_memory_savings = false;
  std::vector<std::string> properties;
  SutFlags sut;  // without --sut, each file runs on its own "sut" (recap when it names none)
  std::string report;
  bool profile = false;
  std::string differential;  // --differential OTHER
};

int replay(const ReplayArgs& a) {
  check_output_file("--report", a.report);  // before any case
  // Every file must load before any runs: a bad file is bad input (exit 2), not a failure.
  std::vector<CaseSpec> specs(a.files.size());
  std::vector<std::string> suts(a.files.size());  // the --sut value each file runs on
  std::vector<std::string> mutants(a.files.size());  // the framework mutant its worker installs ("" none)
  for (size_t i = 0; i < a.files.size(); ++i) {
    CaseFileSut named;
    std::string err = read_case_file(a.files[i], &specs[i], &named);
    if (!err.empty()) throw UsageError(err);
    SutChoice c;
    mutants[i] = named.framework_mutant;
    if (!mutants[i].empty() && (named.name == "recap" || named.name == "recap-worker"))
      throw UsageError(a.files[i] + ": sut.framework_mutant: recap's runtime has fault points (\"faults\"), not framework mutants");
    if (a.sut.sut_given) {
      suts[i] = a.sut.sut;
    } else if (named.name.empty()) {
      suts[i] = "recap";
    } else if (std::string e = parse_sut(named.name, &c); !e.empty() || named.name.find('@') != std::string::npos) {
      throw UsageError(a.files[i] + ": sut.name: " + (e.empty() ? "'" + named.name + "' names no system under test" : e));
    } else if (std::string v = parse_sut(sut_text(named.name, named.version), &c); !v.empty()) {
      throw UsageError(a.files[i] + ": sut.version: " + v);
    } else {
      suts[i] = sut_text(named.name, named.version);
    }
  }
  // --differential: recap's runtime only (each file's sut, or --sut, must be recap or recap-worker)
  // (--property differential alone is refused unless a file names its other backend itself)
  bool file_names_other = false;
  for (const CaseSpec& s : specs) file_names_other = file_names_other || (s.expected.is_object() && s.expected.contains("differential"));
  std::optional<device::BackendChoice> differential;
  for (size_t i = 0; i < a.files.size(); ++i) {
    const std::string sut = suts[i].substr(0, suts[i].find('@'));
    differential = resolve_differential(a.differential, sut, file_names_other ? std::vector<std::string>{} : a.properties);
  }
  open_device(a.backend);  // an unusable backend is bad usage, said once
  const std::string backend = device::backend_name(open_device(a.backend)->backend());
  // Every system the files need, started and greeted before any case runs.
  // A file found with a framework mutant runs in a worker that installs it (RECAP_FRAMEWORK_MUTANT).
  std::map<std::string, SystemUnderTest> systems;
  for (size_t i = 0; i < suts.size(); ++i) {
    if (!mutants[i].empty()) suts[i] += " with mutant " + mutants[i];
    // A case of tp N (or pp N) found on a rank group replays on one (its --ranks N) without being told
    const int ranks = specs[i].ranks();
    const bool group = a.sut.ranks == 0 && ranks > 1 && (suts[i].rfind("torch", 0) == 0 || suts[i].rfind("megatron", 0) == 0);
    if (group) suts[i] += " --ranks " + std::to_string(ranks);
    if (systems.count(suts[i])) continue;
    SutFlags f = a.sut;
    if (group) f.ranks = ranks;
    if (!mutants[i].empty()) f.worker_env.push_back("RECAP_FRAMEWORK_MUTANT=" + mutants[i]);
    const std::string text = suts[i].substr(0, suts[i].find(' '));
    systems.emplace(suts[i], make_sut(f, text, backend));
  }
  std::vector<ReplayOutcome> outs;
  int differ = 0;
  for (size_t i = 0; i < a.files.size(); ++i) {
    outs.push_back(replay_case(a.files[i], specs[i], a.backend, a.require_memory_savings, a.properties,
                               systems.at(suts[i]).sut, true, a.profile, differential));
    differ += !outs.back().as_expected;
  }
  if (a.files.size() > 1)
    std::printf("replay: %zu files, %zu as expected, %d differ\n", a.files.size(), a.files.size() - differ, differ);
  if (a.profile) {
    std::vector<const Json*> reports;
    for (const auto& o : outs) reports.push_back(&o.report);
    std::fputs(reports::profile_table_text(reports::profile_summary_json(reports)).c_str(), stdout);
  }
  if (!a.report.empty()) {
    reports::Outcome out;
    reports::RunContext& ctx = out.context;
    ctx.command = "replay";
    ctx.recap_version = "0.1.0";
    ctx.git_commit = reports::git_commit();
    ctx.backend = a.backend;
    ctx.properties = a.properties;
    ctx.device = open_device(a.backend)->name();
    ctx.started_utc = reports::utc_now_iso8601();
    if (systems.size() == 1) {  // files run on several systems: each file says which
      const SystemUnderTest& s = systems.begin()->second;
      ctx.sut_name = s.kind;
      ctx.sut_version = s.info.version;
      ctx.sut_device = s.info.device;
    }
    out.replays = &outs;
    out.exit_code = differ ? kExitFailed : kExitOk;
    reports::JsonReporter(a.report).report(out);
  }
  return differ ? kExitFailed : kExitOk;
}

}  // namespace

void add_replay_command(CLI::App& app, Runner* runner) {
  auto [cmd, args] = add_command<ReplayArgs>(app, runner, replay,
      "replay",
      "Replay corpus cases verbatim through the oracles; print each verdict and, where a check diverged, the step-by-step "
      "table of the first divergence. Exit 0 every verdict as the case's `expected`, 1 one differs, 2 bad input.");
  cmd->add_option("files", args->files, "Case files (JSON, schema recap.case/1)")->required();
  cmd->add_option("--backend", args->backend, "Device backend: sim, cuda or auto")
      ->check(CLI::IsMember({"sim", "cuda", "auto"}))
      ->default_val("sim");
  add_property_option(*cmd, &args->properties);
  add_sut_options(*cmd, &args->sut);
  add_profile_flag(*cmd, &args->profile);
  add_differential_option(*cmd, &args->differential);
  cmd->get_option("--sut")->description(
      "System under test (default: the one the file names, recap when it names none): recap, recap-worker, "
      "torch[@VERSION] or megatron[@VERSION]");
  cmd->add_flag("--require-memory-savings", args->require_memory_savings,
                "Recompute that saves no activation memory inside graphs is a failure, not a finding");
  cmd->add_option("--report", args->report, "Write a JSON report (schema recap.report/1)");
}

}  // namespace recap::cli
