// recap fuzz: a property-based campaign. RapidCheck generates cases, the oracles judge them, each
// failure is shrunk and written to the corpus with the exact replay command. Exit 0 no property
// failed, 1 a property failed (or a case crashed), 2 bad usage or input.
#include <cinttypes>
#include <cstdio>

#include "harness/cli/campaign.h"
#include "harness/cli/cli.h"

namespace recap::cli {
namespace {

int fuzz(const FuzzFlags& f) {
  bool seed_random = false;
  std::string device;
  CampaignOptions o = campaign_options(f, &seed_random, &device);
  bool worker = !o.worker_out.empty();
  if (seed_random && !worker)
    std::printf("recap fuzz: seed %" PRIu64 " (random; --seed %" PRIu64 " repeats this campaign)\n", o.fuzz.seed,
                o.fuzz.seed);
  CampaignResult r = run_campaign(o);
  if (worker) {
    // A worker hands everything to its parent, which saves the corpus and writes the reports.
    write_file_or_throw(o.worker_out, campaign_to_json(r).dump() + "\n", "--worker-out");
    return kExitOk;
  }
  save_failures(r, f.corpus_dir, o.fuzz.oracle.require_memory_savings);
  print_summary("recap fuzz", r, o);
  bool failed = !r.failures.empty() || !r.crashes.empty();
  int rc = failed ? kExitFailed : kExitOk;
  reports::RunContext ctx = run_context("fuzz", o, device);
  if (!f.report.empty()) {
    Json extra = Json::object();
    extra["exit_code"] = rc;
    write_file_or_throw(f.report, make_report(ctx, &r, nullptr, extra).dump(2) + "\n", "--report");
  }
  if (!f.junit.empty()) {
    std::string ts = ctx.started_utc.substr(0, 19);
    reports::JUnitSuite s = properties_suite(r, ts);
    s.hostname = ctx.host;
    s.properties = {{"seed", std::to_string(o.fuzz.seed)}, {"backend", o.backend}, {"cases", std::to_string(r.cases)}};
    write_file_or_throw(f.junit, reports::junit_xml({s}), "--junit");
  }
  return rc;
}

}  // namespace

void add_fuzz_command(CLI::App& app, Runner* runner) {
  auto f = std::make_shared<FuzzFlags>();
  auto* cmd = app.add_subcommand(
      "fuzz",
      "Property-based fuzzing: generate cases over the whole configuration space, judge them with the oracles, shrink "
      "each failure to a minimal case and write it to the corpus with its replay command. Exit 0 no property failed, "
      "1 a property failed or a case crashed, 2 bad usage or input.");
  add_fuzz_flags(cmd, f.get());
  cmd->callback([f, runner] { *runner = [f] { return fuzz(*f); }; });
}

}  // namespace recap::cli
