// recap fuzz: a property-based campaign. RapidCheck generates cases, the oracles judge them, each
// failure is shrunk and written to the corpus with the exact replay command. Exit 0 no property
// failed, 1 a property failed (or a case crashed), 2 bad usage or input, 128 + N stopped by signal
// N (SIGINT, SIGTERM) with the partial report and corpus written.
#include <cinttypes>
#include <cstdio>

#include "harness/cli/campaign.h"
#include "harness/cli/cli.h"
#include "harness/cli/signals.h"

namespace recap::cli {
namespace {

int fuzz(const FuzzFlags& f) {
  bool seed_random = false;
  std::string device;
  CampaignOptions o = campaign_options(f, &seed_random, &device);
  bool worker = !o.worker_out.empty();
  const KnownFindings& known = *o.known;
  CampaignResult kept;
  std::vector<std::string> rerun_files;
  if (!f.resume.empty()) kept = read_resumed(f.resume, &o, &rerun_files);  // before any case: a wrong file is bad usage
  install_stop_handlers(/*second_signal_kills=*/!worker);
  if (seed_random && !worker)
    std::printf("recap fuzz: seed %" PRIu64 " (random; --seed %" PRIu64 " repeats this campaign)\n", o.fuzz.seed,
                o.fuzz.seed);
  CampaignResult r = run_campaign(o);
  if (!f.resume.empty()) {
    merge_resumed(kept, std::move(r));
    r = std::move(kept);
  }
  if (worker) {
    // A worker hands everything to its parent, which saves the corpus and writes the reports.
    reports::write_or_throw(o.worker_out, reports::campaign_to_json(r).dump() + "\n", "--worker-out");
    return kExitOk;
  }
  const int unknown = settle_failures(r, o, known, f.corpus_dir);
  remove_replaced_files(rerun_files, r);
  bool failed = unknown > 0 || !r.crashes.empty();
  reports::Outcome out;
  // what ran is reported and written; the exit says when it was cut short
  int rc = exit_code_after_stop(failed ? kExitFailed : kExitOk, &out.interrupted);
  out.title = "recap fuzz";
  out.context = run_context("fuzz", o, device);
  out.campaign = &r;
  out.properties = checked_properties(f.properties, !f.differential.empty(), f.sut.ranks > 0);
  out.exit_code = rc;
  report_outcome(out, f.report, f.junit);
  return rc;
}

}  // namespace

void add_fuzz_command(CLI::App& app, Runner* runner) {
  auto [cmd, f] = add_command<FuzzFlags>(app, runner, fuzz,
      "fuzz",
      "Property-based fuzzing: generate cases over the whole configuration space, judge them with the oracles, shrink "
      "each failure to a minimal case and write it to the corpus with its replay command. Exit 0 no property failed, "
      "1 a property failed or a case crashed, 2 bad usage or input.");
  add_fuzz_flags(cmd, f);
}

}  // namespace recap::cli
