// recap gate: the CI mode. Replays every corpus/*.json against its expected verdict, runs a
// fixed-seed fuzz budget of the graph-safe policy (a framework's own) with --require-memory-savings, checks coverage
// (QuickCheck's checkCoverage), and writes --junit and --report. Exit 0 all held, 1 something
// failed, 2 bad usage or input.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "harness/cli/campaign.h"
#include "harness/cli/cli.h"
#include "harness/cli/signals.h"
#include "harness/training/spec.h"

namespace recap::cli {
namespace {

struct GateArgs {
  FuzzFlags f;
  std::string corpus = "corpus";
  bool no_require_memory_savings = false;
  bool no_coverage = false;
};

int gate(GateArgs a) {
  FuzzFlags& f = a.f;
  if (!f.resume.empty()) throw UsageError("--resume: only recap fuzz resumes an interrupted campaign");
  f.require_memory_savings = !a.no_require_memory_savings;
  if (f.seed.empty()) f.seed = "1";
  // recap's runtime is gated on its graph-safe policy; a framework on the policy it has (its hello
  // lists one: megatron-core's changes with PR #3919), so one command gates every version
  if (f.policy.empty() && (f.sut.sut == "recap" || f.sut.sut == "recap-worker")) f.policy = "graph-safe";

  // The corpus: every top-level *.json, loaded before anything runs (a bad file is bad input).
  std::vector<std::string> files;
  std::error_code ec;
  if (!std::filesystem::is_directory(a.corpus, ec))
    throw UsageError("--corpus: '" + a.corpus + "' is not a directory");
  for (const auto& e : std::filesystem::directory_iterator(a.corpus, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError("--corpus: '" + a.corpus + "' holds no *.json case files (a gate that replays nothing passes nothing)");
  std::vector<training::CaseSpec> specs(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    std::string err = training::read_case_file(files[i], &specs[i]);
    if (!err.empty()) throw UsageError(err);
  }

  bool seed_random = false;
  std::string device;
  CampaignOptions o = campaign_options(f, &seed_random, &device);
  reports::RunContext ctx = run_context("gate", o, device);
  const KnownFindings& known = *o.known;
  install_stop_handlers();

  // 1. corpus replays (each file's own expected verdict; the flag only for the fuzz budget)
  std::printf("recap gate: replaying %zu corpus case%s from %s\n", files.size(), files.size() == 1 ? "" : "s",
              a.corpus.c_str());
  std::vector<ReplayOutcome> replays;
  const auto replay_sut = o.fuzz.oracle.sut ? o.fuzz.oracle.sut : make_sut(f.sut, f.sut.sut, o.backend).sut;
  int differ = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    replays.push_back(replay_case(files[i], specs[i], o.backend, false, f.properties, replay_sut, false, f.profile,
                                  o.fuzz.oracle.differential));
    const auto& r = replays.back();
    differ += !r.as_expected;
    std::printf("  %-60s %-9s %s\n", files[i].c_str(), r.disposition.c_str(),
                r.as_expected ? "as expected" : ("DIFFERS: " + r.mismatch + "; " + reports::replay_command(files[i])).c_str());
  }

  // 2. the fuzz budget
  CampaignResult r = run_campaign(o);
  const int unknown = settle_failures(r, o, known, f.corpus_dir);  // the gate fails on new buckets only
  reports::Outcome out;
  out.title = "recap gate: fuzz";
  out.context = ctx;
  out.campaign = &r;
  out.replays = &replays;
  out.properties = checked_properties(f.properties, !f.differential.empty(), f.sut.ranks > 0);
  reports::ConsoleReporter().report(out);

  // 3. coverage
  const auto& reqs = reports::default_coverage(!o.policy.empty());
  std::vector<std::string> cov = a.no_coverage ? std::vector<std::string>{} : reports::check_coverage(r.classification, reports::judged_cases(r), reqs);
  for (const auto& c : cov) std::printf("  %s\n", c.c_str());
  if (cov.empty() && !a.no_coverage) std::printf("  coverage: %zu requirements met\n", reqs.size());

  size_t known_n = 0;
  for (const auto& x : r.failures) known_n += x.known;
  bool failed = differ > 0 || unknown > 0 || !r.crashes.empty() || !cov.empty();
  int rc = exit_code_after_stop(failed ? kExitFailed : kExitOk, &out.interrupted);
  if (!out.interrupted.empty()) std::printf("recap gate: interrupted (%s): partial results\n", out.interrupted.c_str());
  std::printf("recap gate: %s (corpus %zu/%zu as expected, %d new bucket%s, %zu known, %zu crash%s, %zu coverage "
              "shortfall%s)\n",
              failed ? "FAILED" : "passed", files.size() - differ, files.size(), unknown, unknown == 1 ? "" : "s",
              known_n, r.crashes.size(), r.crashes.size() == 1 ? "" : "es",
              cov.size(), cov.size() == 1 ? "" : "s");

  reports::CoverageOutcome coverage{!a.no_coverage, reqs, cov};
  out.coverage = &coverage;
  out.exit_code = rc;
  if (!f.report.empty()) reports::JsonReporter(f.report).report(out);
  if (!f.junit.empty()) reports::JUnitReporter(f.junit).report(out);
  return rc;
}

}  // namespace

void add_gate_command(CLI::App& app, Runner* runner) {
  auto [cmd, a] = add_command<GateArgs>(app, runner, gate,
      "gate",
      "The CI mode: replay every corpus/*.json against its expected verdict, run a fixed-seed fuzz budget (graph-safe "
      "policy, --require-memory-savings), check coverage, write --junit and --report. Exit 0 all held, 1 something "
      "failed, 2 bad usage or input.");
  a->f.cases = 300;  // before the flags: their defaults
  add_fuzz_flags(cmd, &a->f);
  cmd->get_option("--seed")->description("Campaign seed (default 1: the gate is reproducible)");
  cmd->get_option("--policy")->description(
      "Checkpoint policy of every case (default: graph-safe on recap's runtime; a framework's own policy)");
  cmd->add_option("--corpus", a->corpus, "The curated corpus directory (its top-level *.json)")->capture_default_str();
  cmd->add_flag("--no-require-memory-savings", a->no_require_memory_savings,
                "Report recompute lost inside graphs as a finding instead of a failure");
  cmd->add_flag("--no-coverage", a->no_coverage, "Do not check coverage");
}

}  // namespace recap::cli
