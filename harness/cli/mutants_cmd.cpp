// recap mutants: the kill gate of recap's oracles. Per fault point (harness/runtime/faults.h), a
// fixed-seed campaign with that fault on; a fault is killed when some case fails, survived when
// every case passes. First, per campaign policy, the same campaign without any fault must pass:
// otherwise a kill would say nothing about the fault. Each kill is shrunk (as recap fuzz does) and
// written to --corpus-dir with the fault in the case, so `recap replay FILE` reproduces it.
// Exit 0 every fault killed, 1 one survived or a baseline failed, 2 bad usage.
//
// With --sut torch|megatron[@V] the mutants are the framework's (drivers/recap_drivers/mutants/,
// listed by the driver's hello): one campaign per mutant in a worker started with
// RECAP_FRAMEWORK_MUTANT=<name>, after a clean baseline in a worker without one. A mutant the worker
// cannot fire (a graph mutant on the CPU) is "not exercised", never killed nor survived. So is a
// fault point of recap's that changes the cuda backend only (runtime::fault_needs_cuda) on sim; on
// cuda its campaign also judges property differential against sim, which is what sees it.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <set>

#include "harness/base/json_read.h"

#include "harness/cli/campaign.h"
#include "harness/cli/cli.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/phase.h"

namespace recap::cli {
namespace {

using runtime::Fault;

struct MutantsArgs {
  std::string backend = "auto";
  std::string seed = "1";
  int cases = 300;
  int shrink_limit = 0;
  std::vector<std::string> faults;  // empty: every fault
  std::string report;
  std::string corpus_dir = "corpus/found/mutants";
  SutFlags sut;                       // --sut torch|megatron: the framework's mutants
  std::vector<std::string> mutants;   // --mutant NAME: only these framework mutants; all when absent
  std::string known_findings;         // --known-findings FILE: buckets the baseline may fail in
};

// The policy a fault's campaign runs under: graph-safe, recap's sound configuration, except for
// the faults of saved RNG states, which only checkpoints under naive or skip take (graph-safe
// checkpoints replay a device pair and save no state); skip's sound campaign is clean too.
std::string policy_of(Fault f) {
  return f == Fault::RngSnapshotIsHandle || f == Fault::TrackerKeysDrift ? "skip" : "graph-safe";
}

// What a kill's shrunk counterexample was: read from its failure record (kill_of), written into
// the report's entry (add_kill_fields).
struct Kill {
  std::string property, disposition, reason, corpus_file;
  int layers = 0, steps = 0, shrinks = 0;
};

Kill kill_of(const FailureRecord& f) {
  Kill k;
  k.property = f.property;
  k.disposition = f.disposition;
  k.reason = f.reason;
  k.corpus_file = f.corpus_path;
  k.shrinks = f.shrinks;
  training::CaseSpec spec;
  if (training::case_from_json(f.case_json, &spec).empty()) {
    k.layers = static_cast<int>(spec.layers.size());
    k.steps = spec.steps();
  }
  return k;
}

// `confirmed`: framework kills say whether the shrunk case failed the same way again.
void add_kill_fields(Json& j, const Kill& k, const bool* confirmed = nullptr) {
  j["property"] = k.property;
  j["disposition"] = k.disposition;
  j["reason"] = k.reason;
  j["layers"] = k.layers;
  j["steps"] = k.steps;
  j["shrinks"] = k.shrinks;
  if (confirmed) j["confirmed"] = *confirmed;
  j["corpus_file"] = k.corpus_file;
}

// The fuzz flags of every campaign recap mutants runs.
FuzzFlags fuzz_flags_of(const MutantsArgs& a) {
  FuzzFlags f;
  f.backend = a.backend;
  f.seed = a.seed;
  f.cases = a.cases;
  f.shrink_limit = a.shrink_limit;
  f.report = a.report;
  f.corpus_dir = a.corpus_dir;
  f.sut = a.sut;
  return f;
}

// A campaign with the seconds at which each case's verdict was in, and its first failing case
// outside the known findings (judged on the case's own spec): what a kill's cases and seconds are.
struct TimedCampaign {
  CampaignResult result;
  int kill_case = 0;    // 1-based; 0: none
  double kill_s = 0.0;  // seconds to its verdict
  std::string kill_bucket;
};

TimedCampaign timed_campaign(const properties::FuzzOptions& fuzz, const KnownFindings& known) {
  std::vector<double> at;  // at[k]: seconds when the k-th case's verdict was in
  auto seen = [&](const properties::Progress& p) {
    if (static_cast<int>(at.size()) <= p.done) at.resize(p.done + 1, -1.0);
    if (at[p.done] < 0) at[p.done] = p.elapsed_s;
  };
  TimedCampaign c;
  c.result = properties::fuzz(fuzz, seen);
  const CampaignResult& r = c.result;
  for (size_t i = 0; i < r.reports.size(); ++i) {
    const std::string b = properties::bucket_of_json(r.reports[i]);
    if (b.empty()) continue;
    training::CaseSpec spec;
    // accepted only by a known finding's bucket and configuration, judged on this case's own spec
    if (known.given() && r.reports[i].contains("spec") && training::case_from_json(r.reports[i]["spec"], &spec).empty() &&
        !accepting_finding(known, b, spec).empty())
      continue;
    c.kill_case = static_cast<int>(i) + 1;
    c.kill_s = c.kill_case < static_cast<int>(at.size()) && at[c.kill_case] >= 0 ? at[c.kill_case] : r.seconds;
    c.kill_bucket = b;
    break;
  }
  return c;
}

struct Mutant {
  std::string fault, policy;
  bool killed = false;
  std::string not_exercised;  // why the fault cannot fire on this backend ("" it can)
  int cases = 0;               // run in all; when killed, up to and including the first failing one
  double seconds = 0.0;        // to the first failing case's verdict (killed) or the whole campaign
  Kill kill;
};

TimedCampaign campaign(CampaignOptions o, const std::string& policy, const std::vector<std::string>& faults) {
  o.policy = policy;
  training::CheckpointPolicy p = training::CheckpointPolicy::GraphSafe;
  training::policy_from_name(policy, &p);
  o.fuzz.gen.policy = p;
  o.fuzz.gen.faults = faults;
  o.fuzz.keep_going = false;
  o.fuzz.max_failures = 1;
  TimedCampaign c = timed_campaign(o.fuzz, KnownFindings{});
  // Campaigns share this process: a fault that leaks runtime state (phase-flag-leak leaves the
  // thread's flags set) must not reach the next campaign.
  runtime::reset_phase_flags();
  return c;
}

Json mutant_json(const Mutant& m) {
  if (!m.not_exercised.empty())
    return {{"fault", m.fault}, {"policy", m.policy}, {"verdict", "not exercised"}, {"reason", m.not_exercised}};
  Json j = {{"fault", m.fault}, {"policy", m.policy}, {"verdict", m.killed ? "killed" : "survived"}, {"cases", m.cases},
            {"seconds", m.seconds}};
  if (m.killed) add_kill_fields(j, m.kill);
  return j;
}

int framework_mutants(const MutantsArgs& a);

int mutants(const MutantsArgs& a) {
  if (a.sut.sut != "recap" && a.sut.sut != "recap-worker") return framework_mutants(a);  // --ranks: make_sut checks it
  if (a.sut.ranks > 0)
    throw UsageError("--ranks: recap's own fault points run on its runtime, which runs one rank (rank groups: --sut torch or --sut megatron)");
  if (!a.mutants.empty() || !a.known_findings.empty())
    throw UsageError(std::string(!a.mutants.empty() ? "--mutant" : "--known-findings") +
                     ": framework mutants need --sut torch or --sut megatron (recap's own are --fault)");
  FuzzFlags f = fuzz_flags_of(a);
  bool seed_random = false;
  std::string device;
  CampaignOptions o = campaign_options(f, &seed_random, &device);  // checks --report and --corpus-dir first

  std::vector<Fault> chosen;
  for (const std::string& n : a.faults) {
    Fault x{};
    if (!runtime::fault_from_name(n, &x))
      throw UsageError("--fault: unknown fault '" + n + "' (known: " + names_list(runtime::kFaultNames) + ")");
    chosen.push_back(x);
  }
  if (chosen.empty())
    for (const auto& e : runtime::kFaultNames) chosen.push_back(e.value);

  std::printf("recap mutants: %zu faults, seed %" PRIu64 ", up to %d cases each, backend %s\n", chosen.size(),
              o.fuzz.seed, a.cases, o.backend.c_str());
  // Baselines: every policy the chosen faults run under, without faults.
  std::vector<std::string> policies;
  for (Fault x : chosen)
    if (std::find(policies.begin(), policies.end(), policy_of(x)) == policies.end()) policies.push_back(policy_of(x));
  Json baselines = Json::array();
  bool baseline_failed = false;
  for (const std::string& p : policies) {
    const TimedCampaign c = campaign(o, p, {});
    const CampaignResult& st = c.result;
    const bool clean = st.failures.empty() && c.kill_case == 0;
    baselines.push_back({{"policy", p}, {"cases", st.cases}, {"passed", clean}});
    std::printf("  baseline %-11s %d cases, %s\n", p.c_str(), st.cases,
                clean ? "no failure" : ("FAILS: " + (st.failures.empty() ? std::string("?") : st.failures[0].reason)).c_str());
    baseline_failed = baseline_failed || !clean;
  }

  std::vector<Mutant> out;
  std::printf("  %-26s %-11s %-9s %6s %8s  %-34s %6s %5s\n", "fault", "policy", "verdict", "cases", "seconds",
              "caught by", "layers", "steps");
  for (Fault x : chosen) {
    Mutant m;
    m.fault = runtime::fault_name(x);
    m.policy = policy_of(x);
    // a fault that kills the process runs in a worker process (recap worker), restarted after each
    // case it kills: the crash is recorded, shrunk and written like any failure
    CampaignOptions fo = o;
    if (runtime::fault_needs_cuda(m.fault)) {
      if (o.backend != "cuda") {
        m.not_exercised = "changes the cuda backend only: nothing to fire on " + o.backend;
        std::printf("  %-26s %-11s %-9s %s\n", m.fault.c_str(), m.policy.c_str(), "-", ("not exercised: " + m.not_exercised).c_str());
        out.push_back(std::move(m));
        continue;
      }
      fo.fuzz.oracle.differential = device::BackendChoice::Sim;  // the cuda run against sim's
      // small tensors, as `fuzz --differential sim --dims small`: sim runs each case again on the CPU
      // (20 cases of the GPU's sizes took 147 s on the H200)
      fo.fuzz.gen.backend = device::Backend::Sim;
    }
    if (runtime::fault_kills_process(m.fault)) {
      SystemUnderTest w = make_sut(o.sut, "recap-worker", o.backend);
      fo.fuzz.oracle.sut = w.sut;
      fo.sut_kind = w.kind;
      fo.sut_info = w.info;
    }
    TimedCampaign c = campaign(fo, m.policy, {m.fault});
    CampaignResult& r = c.result;
    m.killed = !r.failures.empty();
    m.cases = m.killed ? c.kill_case : r.cases;
    m.seconds = m.killed ? c.kill_s : r.seconds;
    if (m.killed) {
      r.failures.resize(1);
      save_failures(r, a.corpus_dir, false, fo);
      m.kill = kill_of(r.failures[0]);
    }
    std::printf("  %-26s %-11s %-9s %6d %8.3f  %-34s %6s %5s\n", m.fault.c_str(), m.policy.c_str(),
                m.killed ? "killed" : "SURVIVED", m.cases, m.seconds,
                m.killed ? (m.kill.property + " " + m.kill.disposition).c_str() : "-",
                m.killed ? std::to_string(m.kill.layers).c_str() : "-", m.killed ? std::to_string(m.kill.steps).c_str() : "-");
    out.push_back(std::move(m));
  }

  std::vector<double> times;
  std::string survived;
  int max_layers = 0, not_exercised = 0;
  for (const Mutant& m : out) {
    if (!m.not_exercised.empty()) {
      ++not_exercised;
    } else if (m.killed) {
      times.push_back(m.seconds);
      max_layers = std::max(max_layers, m.kill.layers);
    } else {
      survived += (survived.empty() ? "" : ", ") + m.fault;
    }
  }
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0.0 : times[times.size() / 2];
  const double worst = times.empty() ? 0.0 : times.back();
  std::printf("  killed %zu of %zu%s%s; time to kill: median %.3f s, max %.3f s; shrunk cases: at most %d layers\n",
              times.size(), out.size() - not_exercised,
              not_exercised ? (" (" + std::to_string(not_exercised) + " not exercised here)").c_str() : "", survived.empty() ? "" : (" (survived: " + survived + ")").c_str(), median, worst,
              max_layers);
  const bool all_killed = survived.empty();
  if (!a.report.empty()) {
    Json j = {{"schema", "recap.mutants/1"}, {"seed", o.fuzz.seed}, {"cases", a.cases}, {"backend", o.backend},
              {"baselines", baselines}};
    Json ms = Json::array();
    for (const Mutant& m : out) ms.push_back(mutant_json(m));
    j["mutants"] = ms;
    j["summary"] = {{"faults", out.size()}, {"killed", times.size()},
                    {"survived", out.size() - times.size() - not_exercised}, {"not_exercised", not_exercised},
                    {"median_seconds_to_kill", median}, {"max_seconds_to_kill", worst}, {"max_layers", max_layers}};
    reports::write_or_throw(a.report, j.dump(2) + "\n", "--report");
  }
  if (baseline_failed) std::printf("  a baseline failed: its kills say nothing about the faults\n");
  return all_killed && !baseline_failed ? kExitOk : kExitFailed;
}


// ---- framework mutants (--sut torch|megatron) --------------------------------------------------

struct FrameworkMutant {
  std::string name, description, upstream, not_exercised;  // not_exercised: the worker's reason, "" when it can fire
  int bug_class = 0;
  bool cpu = false;
  std::string verdict;  // killed, survived, not exercised
  int cases = 0;        // run in all; when killed, up to and including the first failing case outside the known findings
  double seconds = 0.0; // to that case's verdict (killed) or the whole campaign
  std::string bucket;
  Kill kill;
  bool confirmed = false;  // the shrunk kill failed the same way again in a fresh worker
};

// One fixed-seed campaign against a worker (made with o.sut, whose environment names the mutant):
// the first failing case whose bucket is not known is the kill. With known findings every case
// runs (a known bucket must not end the campaign); without, it stops at the first failure.
TimedCampaign framework_campaign(CampaignOptions o) {
  if (!o.fuzz.oracle.sut) {  // a worker of its own, started with o.sut's environment
    SystemUnderTest w = make_sut(o.sut, o.sut.sut, o.backend);  // UsageError: the worker did not start
    o.fuzz.oracle.sut = w.sut;
    o.sut_info = w.info;
  }
  o.fuzz.keep_going = o.known->given();
  o.fuzz.max_failures = 1;
  return timed_campaign(o.fuzz, *o.known);
}

Json framework_mutant_json(const FrameworkMutant& m) {
  Json j = {{"mutant", m.name}, {"bug_class", m.bug_class}, {"upstream", m.upstream}, {"cpu", m.cpu},
            {"description", m.description}, {"verdict", m.verdict}};
  if (m.verdict == "not exercised") {
    j["reason"] = m.not_exercised;
    return j;
  }
  j["cases"] = m.cases;
  j["seconds"] = m.seconds;
  if (m.verdict == "killed") {
    j["bucket"] = m.bucket;
    add_kill_fields(j, m.kill, &m.confirmed);
  }
  return j;
}

// The kill's file names its mutant in "sut" (framework_mutant), so `recap replay FILE` starts a
// worker with it installed; the description says so.
void name_mutant_in_file(const std::string& path, const std::string& mutant) {
  Json j;
  if (std::string err = read_json_file(path, &j); !err.empty()) throw UsageError("--corpus-dir: " + err);
  j["sut"]["framework_mutant"] = mutant;
  j["description"] = "recap mutants: the framework mutant " + mutant + " (drivers/recap_drivers/mutants/) killed by " +
                     j["expected"].value("property", std::string("?")) + ". Replays with the mutant installed (sut.framework_mutant). " +
                     j.value("description", std::string());
  std::string err;
  if (!reports::write_text_file(path, j.dump(2) + "\n", &err)) throw UsageError("--corpus-dir: " + err);
}

int framework_mutants(const MutantsArgs& a) {
  if (!a.faults.empty())
    throw UsageError("--fault: fault points are recap's own runtime's; --sut " + a.sut.sut + " has framework mutants (--mutant)");
  for (const auto& kv : a.sut.worker_env)
    if (kv.rfind("RECAP_FRAMEWORK_MUTANT=", 0) == 0)
      throw UsageError("--worker-env " + kv + ": recap mutants sets RECAP_FRAMEWORK_MUTANT itself (--mutant chooses)");
  FuzzFlags f = fuzz_flags_of(a);
  f.known_findings = a.known_findings;  // read once by campaign_options: o.known, and no shrink into it
  bool seed_random = false;
  std::string device;
  CampaignOptions o = campaign_options(f, &seed_random, &device);  // starts and greets the plain worker
  const KnownFindings& known = *o.known;

  const Json& listed = o.sut_info.mutants;
  if (!listed.is_array() || listed.empty())
    throw UsageError("--sut " + a.sut.sut + ": its driver lists no framework mutants in its hello");
  std::vector<FrameworkMutant> out;
  for (const Json& e : listed) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string())
      throw UsageError("--sut " + a.sut.sut + ": its hello's mutants: an entry without a name");
    FrameworkMutant m;
    m.name = e["name"].get<std::string>();
    m.description = e.value("description", std::string());
    m.upstream = e.value("upstream", std::string());
    m.not_exercised = e.value("not_exercised", std::string());
    m.bug_class = e.value("bug_class", 0);
    m.cpu = e.value("cpu", false);
    out.push_back(std::move(m));
  }
  if (!a.mutants.empty()) {
    std::vector<FrameworkMutant> chosen;
    std::string names;
    for (const auto& m : out) names += (names.empty() ? "" : ", ") + m.name;
    for (const std::string& n : a.mutants) {
      auto it = std::find_if(out.begin(), out.end(), [&](const FrameworkMutant& m) { return m.name == n; });
      if (it == out.end()) throw UsageError("--mutant: '" + n + "' is not a mutant of " + a.sut.sut + " (known: " + names + ")");
      chosen.push_back(*it);
    }
    out = chosen;
  }

  std::printf("recap mutants: %zu framework mutants of %s %s on %s, seed %" PRIu64 ", up to %d cases each%s\n", out.size(),
              o.sut_info.name.c_str(), o.sut_info.version.c_str(), o.sut_info.device.c_str(), o.fuzz.seed, a.cases,
              !known.given() ? "" : (", " + std::to_string(known.entries.size()) + " known findings").c_str());
  std::fflush(stdout);
  TimedCampaign base = framework_campaign(o);  // in the plain worker campaign_options greeted
  o.fuzz.oracle.sut.reset();  // which ends now: each mutant gets a worker of its own
  const bool clean = base.kill_case == 0;
  std::printf("  baseline: %d cases, %s\n", base.result.cases,
              clean ? (!known.given() ? "no failure" : "no failure outside the known findings")
                    : ("FAILS: case " + std::to_string(base.kill_case) + ", " + base.kill_bucket).c_str());
  std::printf("  %-32s %-5s %-4s %-14s %6s %8s  %s\n", "mutant", "class", "cpu", "verdict", "cases", "seconds", "caught by / why not");
  for (FrameworkMutant& m : out) {
    if (!m.not_exercised.empty()) {
      m.verdict = "not exercised";
    } else {
      CampaignOptions mo = o;  // no worker yet: framework_campaign starts one with the mutant
      mo.sut.worker_env.push_back("RECAP_FRAMEWORK_MUTANT=" + m.name);
      TimedCampaign c;
      try {
        c = framework_campaign(mo);
      } catch (const UsageError& e) {  // the mutant does not install on this framework (its feature is absent)
        m.verdict = "not exercised";
        m.not_exercised = std::string("the worker did not start with it: ") + e.what();
      }
      if (m.verdict.empty()) {
        m.cases = c.kill_case ? c.kill_case : c.result.cases;
        m.seconds = c.kill_case ? c.kill_s : c.result.seconds;
        m.verdict = c.kill_case ? "killed" : "survived";
      }
      if (c.kill_case) {
        m.bucket = c.kill_bucket;
        CampaignResult& r = c.result;
        // the kill's counterexample (its bucket's, shrunk), confirmed in a fresh worker with the mutant
        auto it = std::find_if(r.failures.begin(), r.failures.end(), [&](const FailureRecord& x) { return x.bucket == c.kill_bucket; });
        if (it != r.failures.end()) {
          FailureRecord kill = *it;
          r.failures = {kill};
          const std::string dir = (std::filesystem::path(a.corpus_dir) / m.name).string();
          settle_failures(r, mo, known, dir);
          const FailureRecord& k = r.failures[0];
          m.kill = kill_of(k);
          m.confirmed = k.flaky.empty();
          if (!m.kill.corpus_file.empty()) name_mutant_in_file(m.kill.corpus_file, m.name);
        }
      }
    }
    std::string why = m.verdict == "killed" ? m.kill.property + " " + m.kill.disposition + (m.confirmed ? "" : " (not confirmed)")
                      : m.verdict == "not exercised" ? m.not_exercised : "-";
    std::printf("  %-32s %-5d %-4s %-14s %6s %8s  %s\n", m.name.c_str(), m.bug_class, m.cpu ? "yes" : "no",
                m.verdict == "survived" ? "SURVIVED" : m.verdict.c_str(),
                m.verdict == "not exercised" ? "-" : std::to_string(m.cases).c_str(),
                m.verdict == "not exercised" ? "-" : ([&] { char b[32]; std::snprintf(b, sizeof b, "%.3f", m.seconds); return std::string(b); })().c_str(),
                why.c_str());
    std::fflush(stdout);
  }

  std::vector<double> times;
  std::string survived;
  int skipped = 0;
  for (const auto& m : out) {
    if (m.verdict == "killed") times.push_back(m.seconds);
    if (m.verdict == "survived") survived += (survived.empty() ? "" : ", ") + m.name;
    skipped += m.verdict == "not exercised";
  }
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0.0 : times[times.size() / 2];
  const double worst = times.empty() ? 0.0 : times.back();
  std::printf("  killed %zu of %zu exercised (%d not exercised)%s; time to kill: median %.3f s, max %.3f s\n", times.size(),
              out.size() - skipped, skipped, survived.empty() ? "" : (" (survived: " + survived + ")").c_str(), median, worst);
  if (!a.report.empty()) {
    Json j = {{"schema", "recap.mutants/1"}, {"seed", o.fuzz.seed}, {"cases", a.cases}, {"backend", o.backend},
              {"sut", {{"name", o.sut_info.name}, {"version", o.sut_info.version}, {"device", o.sut_info.device}}}};
    Json kf = Json::array();
    for (const auto& k : known.entries) kf.push_back(k.id);
    j["baselines"] = Json::array({{{"policy", "drawn"}, {"cases", base.result.cases}, {"passed", clean}, {"known_findings", kf},
                                   {"first_failure_bucket", base.kill_bucket}}});
    Json ms = Json::array();
    for (const auto& m : out) ms.push_back(framework_mutant_json(m));
    j["mutants"] = ms;
    j["summary"] = {{"mutants", out.size()}, {"killed", times.size()},
                    {"survived", out.size() - times.size() - skipped}, {"not_exercised", skipped},
                    {"median_seconds_to_kill", median}, {"max_seconds_to_kill", worst}};
    reports::write_or_throw(a.report, j.dump(2) + "\n", "--report");
  }
  if (!clean) std::printf("  the baseline failed: its kills say nothing about the mutants\n");
  return survived.empty() && clean ? kExitOk : kExitFailed;
}

}  // namespace

void add_mutants_command(CLI::App& app, Runner* runner) {
  auto [cmd, a] = add_command<MutantsArgs>(app, runner, mutants, "mutants",
      "Kill gate of the oracles: per fault point (a named broken mechanism of recap's runtime, docs/faults.md) a "
      "fixed-seed campaign with it on, after a clean baseline without it; killed when a case fails. Kills are shrunk "
      "and written to --corpus-dir with their fault. With --sut torch|megatron: the framework's mutants, each in a worker "
      "that installs it; one the worker cannot fire is not exercised. Exit 0 every (exercised) fault killed, 1 one "
      "survived, 2 bad usage.");
  add_backend_option(*cmd, &a->backend);
  cmd->add_option("--seed", a->seed, "Campaign seed (digits)")->capture_default_str();
  cmd->add_option("--cases", a->cases, "Cases per campaign before a fault counts as survived")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--fault", a->faults, "Only these faults (repeatable); all when absent");
  cmd->add_option("--shrink-limit", a->shrink_limit, "Evaluations one shrink may spend (0: no limit)")
      ->check(CLI::Range(0, 100000000));
  cmd->add_option("--report", a->report, "Write the JSON report here (schema recap.mutants/1)");
  cmd->add_option("--corpus-dir", a->corpus_dir, "Where each kill's shrunk case is written (framework mutants: one "
                  "folder per mutant)")->capture_default_str();
  add_sut_options(*cmd, &a->sut);
  cmd->get_option("--sut")->description(
      "recap (default; recap-worker: in a worker process) runs recap's own fault points; torch[@VERSION] or "
      "megatron[@VERSION] the framework's mutants (drivers/recap_drivers/mutants/, docs/faults.md), each in a "
      "worker started with RECAP_FRAMEWORK_MUTANT=<name>");
  cmd->add_option("--mutant", a->mutants, "Only these framework mutants (repeatable; --sut torch|megatron); all when absent");
  cmd->add_option("--known-findings", a->known_findings,
                  "The framework's known findings (recap.known-findings/1: buckets and the configuration that defines each, as recap fuzz takes them): the baseline is "
                  "clean when it fails in none other, and a mutant is killed by a failure outside them")
      ->check(CLI::ExistingFile);
}

}  // namespace recap::cli
