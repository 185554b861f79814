// recap mutants: the kill gate of recap's oracles. Per fault point (harness/runtime/faults.h), a
// fixed-seed campaign with that fault on; a fault is killed when some case fails, survived when
// every case passes. First, per campaign policy, the same campaign without any fault must pass:
// otherwise a kill would say nothing about the fault. Each kill is shrunk (as recap fuzz does) and
// written to --corpus-dir with the fault in the case, so `recap replay FILE` reproduces it.
// Exit 0 every fault killed, 1 one survived or a baseline failed, 2 bad usage.
#include <algorithm>
#include <cinttypes>
#include <cstdio>

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
};

// The policy a fault's campaign runs under: graph-safe, recap's sound configuration, except for
// the faults of saved RNG states, which only checkpoints under naive or skip take (graph-safe
// checkpoints replay a device pair and save no state); skip's sound campaign is clean too.
std::string policy_of(Fault f) {
  return f == Fault::RngSnapshotIsHandle || f == Fault::TrackerKeysDrift ? "skip" : "graph-safe";
}

struct Mutant {
  std::string fault, policy;
  bool killed = false;
  int cases = 0;               // run in all; when killed, up to and including the first failing one
  double seconds = 0.0;        // to the first failing case's verdict (killed) or the whole campaign
  std::string property, disposition, reason, corpus_file;
  int layers = 0, steps = 0, shrinks = 0;
};

properties::FuzzStats campaign(CampaignOptions o, const std::string& policy, const std::vector<std::string>& faults) {
  o.policy = policy;
  training::CheckpointPolicy p = training::CheckpointPolicy::GraphSafe;
  training::policy_from_name(policy, &p);
  o.fuzz.gen.policy = p;
  o.fuzz.gen.faults = faults;
  o.fuzz.keep_going = false;
  o.fuzz.max_failures = 1;
  properties::FuzzStats st = properties::fuzz(o.fuzz);
  // Campaigns share this process: a fault that leaks runtime state (phase-flag-leak leaves the
  // thread's flags set) must not reach the next campaign.
  runtime::reset_phase_flags();
  return st;
}

Json mutant_json(const Mutant& m) {
  Json j = {{"fault", m.fault}, {"policy", m.policy}, {"verdict", m.killed ? "killed" : "survived"}, {"cases", m.cases},
            {"seconds", m.seconds}};
  if (m.killed) {
    j["property"] = m.property;
    j["disposition"] = m.disposition;
    j["reason"] = m.reason;
    j["layers"] = m.layers;
    j["steps"] = m.steps;
    j["shrinks"] = m.shrinks;
    j["corpus_file"] = m.corpus_file;
  }
  return j;
}

int mutants(const MutantsArgs& a) {
  FuzzFlags f;
  f.backend = a.backend;
  f.seed = a.seed;
  f.cases = a.cases;
  f.shrink_limit = a.shrink_limit;
  f.report = a.report;
  f.corpus_dir = a.corpus_dir;
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
    properties::FuzzStats st = campaign(o, p, {});
    const bool clean = st.failures.empty() && st.first_failure_case == 0;
    baselines.push_back({{"policy", p}, {"cases", st.cases}, {"passed", clean}});
    std::printf("  baseline %-11s %d cases, %s\n", p.c_str(), st.cases,
                clean ? "no failure" : ("FAILS: " + (st.failures.empty() ? std::string("?") : st.failures[0].report.first_failure())).c_str());
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
    if (runtime::fault_kills_process(m.fault)) {
      SystemUnderTest w = make_sut(o.sut, "recap-worker", o.backend);
      fo.fuzz.oracle.sut = w.sut;
      fo.sut_kind = w.kind;
      fo.sut_info = w.info;
    }
    properties::FuzzStats st = campaign(fo, m.policy, {m.fault});
    m.killed = !st.failures.empty();
    m.cases = m.killed ? st.first_failure_case : st.cases;
    m.seconds = m.killed ? st.first_failure_s : st.seconds;
    if (m.killed) {
      CampaignResult r = from_stats(st);
      r.failures.resize(1);
      save_failures(r, a.corpus_dir, false, fo);
      const auto& cx = st.failures[0];
      m.property = r.failures[0].property;
      m.disposition = r.failures[0].disposition;
      m.reason = r.failures[0].reason;
      m.corpus_file = r.failures[0].corpus_path;
      m.layers = static_cast<int>(cx.spec.layers.size());
      m.steps = cx.spec.steps();
      m.shrinks = cx.shrinks;
    }
    std::printf("  %-26s %-11s %-9s %6d %8.3f  %-34s %6s %5s\n", m.fault.c_str(), m.policy.c_str(),
                m.killed ? "killed" : "SURVIVED", m.cases, m.seconds,
                m.killed ? (m.property + " " + m.disposition).c_str() : "-",
                m.killed ? std::to_string(m.layers).c_str() : "-", m.killed ? std::to_string(m.steps).c_str() : "-");
    out.push_back(std::move(m));
  }

  std::vector<double> times;
  std::string survived;
  int max_layers = 0;
  for (const Mutant& m : out) {
    if (m.killed) {
      times.push_back(m.seconds);
      max_layers = std::max(max_layers, m.layers);
    } else {
      survived += (survived.empty() ? "" : ", ") + m.fault;
    }
  }
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0.0 : times[times.size() / 2];
  const double worst = times.empty() ? 0.0 : times.back();
  std::printf("  killed %zu of %zu%s; time to kill: median %.3f s, max %.3f s; shrunk cases: at most %d layers\n",
              times.size(), out.size(), survived.empty() ? "" : (" (survived: " + survived + ")").c_str(), median, worst,
              max_layers);
  const bool all_killed = survived.empty();
  if (!a.report.empty()) {
    Json j = {{"schema", "recap.mutants/1"}, {"seed", o.fuzz.seed}, {"cases", a.cases}, {"backend", o.backend},
              {"baselines", baselines}};
    Json ms = Json::array();
    for (const Mutant& m : out) ms.push_back(mutant_json(m));
    j["mutants"] = ms;
    j["summary"] = {{"faults", out.size()}, {"killed", times.size()}, {"survived", out.size() - times.size()},
                    {"median_seconds_to_kill", median}, {"max_seconds_to_kill", worst}, {"max_layers", max_layers}};
    reports::write_or_throw(a.report, j.dump(2) + "\n", "--report");
  }
  if (baseline_failed) std::printf("  a baseline failed: its kills say nothing about the faults\n");
  return all_killed && !baseline_failed ? kExitOk : kExitFailed;
}

}  // namespace

void add_mutants_command(CLI::App& app, Runner* runner) {
  auto a = std::make_shared<MutantsArgs>();
  auto* cmd = add_command(app, runner, a, mutants, "mutants",
      "Kill gate of the oracles: per fault point (a named broken mechanism of recap's runtime, docs/faults.md) a "
      "fixed-seed campaign with it on, after a clean baseline without it; killed when a case fails. Kills are shrunk "
      "and written to --corpus-dir with their fault. Exit 0 every fault killed, 1 one survived, 2 bad usage.");
  add_backend_option(*cmd, &a->backend);
  cmd->add_option("--seed", a->seed, "Campaign seed (digits)")->capture_default_str();
  cmd->add_option("--cases", a->cases, "Cases per campaign before a fault counts as survived")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--fault", a->faults, "Only these faults (repeatable); all when absent");
  cmd->add_option("--shrink-limit", a->shrink_limit, "Evaluations one shrink may spend (0: no limit)")
      ->check(CLI::Range(0, 100000000));
  cmd->add_option("--report", a->report, "Write the JSON report here (schema recap.mutants/1)");
  cmd->add_option("--corpus-dir", a->corpus_dir, "Where each kill's shrunk case is written")->capture_default_str();
}

}  // namespace recap::cli
