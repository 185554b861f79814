#include "reports/reporter.h"

#include "reports/profile.h"

#include <cinttypes>
#include <cstdio>
#include <filesystem>

namespace recap::reports {

namespace {
// Every case report of the outcome: the campaign's, then the replayed files'.
std::vector<const Json*> outcome_case_reports(const Outcome& o) {
  std::vector<const Json*> all;
  if (o.campaign)
    for (const Json& r : o.campaign->reports) all.push_back(&r);
  if (o.replays)
    for (const auto& r : *o.replays) all.push_back(&r.report);
  return all;
}

// The coverage requirements with what the campaign gave each.
Json coverage_json(const CoverageOutcome& c, const CampaignResult* campaign) {
  static const CampaignResult none;
  if (!campaign) campaign = &none;
  Json creq = Json::array();
  for (const auto& q : c.requirements) {
    int n = campaign->classification.count(q.label) ? campaign->classification.at(q.label) : 0;
    const int judged = judged_cases(*campaign);  // shares of the cases that judged something
    creq.push_back({{"label", q.label},
                    {"min_share", q.min_share},
                    {"count", n},
                    {"share", judged ? double(n) / judged : 0.0},
                    {"met", judged == 0 || double(n) / judged + 1e-12 >= q.min_share},
                    {"why", q.why}});
  }
  return {{"checked", c.checked}, {"ok", c.shortfalls.empty()}, {"requirements", creq}, {"shortfalls", c.shortfalls}};
}
}  // namespace

void write_or_throw(const std::string& path, const std::string& text, const std::string& flag) {
  std::string err;
  if (!write_text_file(path, text, &err)) throw WriteError(flag + ": " + err);
}

Json campaign_summary_json(const CampaignResult& r) {
  Json s = Json::object();
  s["cases"] = r.cases;
  s["by_disposition"] = r.by_disposition;
  s["classification"] = r.classification;  // over judged (not skipped) cases
  s["judged_cases"] = judged_cases(r);
  s["properties"] = property_counts_json(r);
  s["findings"] = r.findings;
  s["buckets"] = r.buckets;
  if (!r.known_findings.empty()) {
    Json k = Json::object();
    for (const auto& [b, j] : r.judged)
      k[b] = {{"accepted", j.accepted}, {"new", j.new_cases}, {"known", j.new_cases == 0 && !j.accepted.empty()}};
    s["known_findings"] = {{"file", r.known_findings}, {"buckets", k}};
    Json ids = Json::array();
    for (const auto& u : r.known_not_seen) ids.push_back(u.id);
    s["known_findings_not_seen"] = ids;
  }
  Json f = Json::array();
  for (const auto& x : r.failures) {
    Json j = failure_to_json(x);
    j.erase("report");
    f.push_back(j);
  }
  s["failures"] = f;
  s["crashes"] = r.crashes;
  // what --resume needs: each chunk's totals, and the chunk of each entry of "cases"
  Json ch = Json::array();
  for (const auto& [c, t] : r.chunks) ch.push_back(chunk_totals_to_json(c, t));
  s["chunks"] = ch;
  s["report_chunks"] = r.report_chunks;
  s["seconds"] = r.seconds;
  s["cases_per_minute"] = r.seconds > 0 ? r.cases * 60.0 / r.seconds : 0.0;
  return s;
}

void ConsoleReporter::report(const Outcome& o) {
  if (!o.campaign) return;
  const CampaignResult& r = *o.campaign;
  const RunContext& c = o.context;
  const char* what = o.title;
  double cpm = r.seconds > 0 ? r.cases * 60.0 / r.seconds : 0.0;
  std::printf("%s: %d cases in %.1f s (%.0f cases/min), seed %" PRIu64 ", backend %s, policy %s", what, r.cases,
              r.seconds, cpm, c.seed, c.backend.c_str(), c.policy.empty() ? "drawn" : c.policy.c_str());
  if (c.shard_count > 1) std::printf(", shard %s", c.shard.c_str());
  if (c.jobs > 1 || c.isolate) std::printf(", %d job%s", c.jobs, c.jobs == 1 ? "" : "s");
  std::printf("\n  by disposition:");
  for (const auto& [k, v] : r.by_disposition) std::printf(" %s %d", k.c_str(), v);
  const Json props = property_counts_json(r);
  if (!props.empty()) {
    std::printf("\n  properties (checks judged / skipped):");
    for (const auto& [p, q] : props.items()) {
      std::string parts;  // "118 passed, 2 failed": counts first, so they read apart from "by disposition"
      for (const char* d : {"passed", "failed", "incorrect", "crashed"})
        if (q.contains(d)) parts += (parts.empty() ? "" : ", ") + std::to_string(q[d].get<int>()) + " " + d;
      std::printf("\n    %-17s judged %6d%s  skipped %d", p.c_str(), q["judged"].get<int>(),
                  parts.empty() ? "" : (" (" + parts + ")").c_str(), q["skipped"].get<int>());
      if (q.contains("out-of-memory")) std::printf(", %d out-of-memory", q["out-of-memory"].get<int>());
    }
  }
  const int judged = judged_cases(r);
  std::printf("\n  classification (judged cases under each label, %d of %d):\n", judged, r.cases);
  for (const auto& [k, v] : r.classification)
    std::printf("    %-34s %6d  %5.1f%%\n", k.c_str(), v, judged ? 100.0 * v / judged : 0.0);
  if (!r.findings.empty()) {
    std::printf("  findings (not failures):\n");
    for (const auto& f : r.findings) std::printf("    %s\n", f.c_str());
  }
  if (!r.buckets.empty()) {
    std::printf("  buckets (failing cases by distinct bug):\n");
    for (const auto& [k, v] : r.buckets) {
      std::string note;  // --known-findings: "(known: M1 12)", "(3 new; accepted: M1 9)"
      if (auto j = r.judged.find(k); j != r.judged.end()) {
        std::string acc;
        for (const auto& [id, n] : j->second.accepted) acc += " " + id + " " + std::to_string(n);
        note = j->second.new_cases == 0 && !acc.empty() ? "  (known:" + acc + ")"
               : "  (" + std::to_string(j->second.new_cases) + " new" + (acc.empty() ? "" : "; accepted:" + acc) + ")";
      }
      std::printf("    %6d  %s%s\n", v, k.c_str(), note.c_str());
    }
  }
  for (const auto& u : r.known_not_seen) {  // --known-findings: what the file may lose (not a failure)
    std::string b;
    for (const auto& x : u.buckets) b += (b.empty() ? "" : ", ") + x;
    std::printf("  known finding %s (bucket%s %s) did not occur in %d judged cases\n", u.id.c_str(),
                u.buckets.size() == 1 ? "" : "s", b.c_str(), judged);
  }
  for (const auto& line : r.crashes) std::printf("  crashed: %s\n", line.c_str());
  if (r.failures.empty() && r.crashes.empty()) {
    std::printf("  no failure\n");
  } else {
    std::printf("  %zu counterexample%s:\n", r.failures.size(), r.failures.size() == 1 ? "" : "s");
    for (const auto& f : r.failures) {
      std::printf("    %s%s %s: %s (%d shrinks)\n", f.known ? "known: " : "", f.property.c_str(), f.disposition.c_str(),
                  f.reason.c_str(), f.shrinks);
      if (!f.diagnosis.empty()) std::printf("      diagnosis: %s\n", f.diagnosis.c_str());
      if (!f.flaky.empty()) std::printf("      flaky, not written: replayed in a fresh process it gave %s\n", f.flaky.c_str());
      if (!f.corpus_path.empty()) std::printf("      written: %s\n      replay:  %s\n", f.corpus_path.c_str(),
                                              replay_command(f.corpus_path).c_str());
      if (!f.reproduce.empty()) std::printf("      reproduce: %s\n", f.reproduce.c_str());
    }
  }
  std::printf("  throughput: %.0f cases/min\n", cpm);
  for (const auto& line : gpu_lines(gpus_json(r.gpus, r.job_devices, r.seconds))) std::printf("  %s\n", line.c_str());
  std::fputs(profile_table_text(profile_summary_json(outcome_case_reports(o))).c_str(), stdout);
  if (!o.interrupted.empty()) std::printf("  interrupted (%s): the results of the cases that ran\n", o.interrupted.c_str());
}

Json report_json(const Outcome& o) {
  const CampaignResult* campaign = o.campaign;
  const std::vector<ReplayOutcome>* replays = o.replays;
  Json rep = Json::object();
  rep["schema"] = reports::kReportSchema;
  rep["context"] = context_to_json(o.context);
  Json summary = campaign ? campaign_summary_json(*campaign) : Json::object();
  if (o.coverage) summary["coverage"] = coverage_json(*o.coverage, campaign);
  summary["exit_code"] = o.exit_code;
  if (!o.interrupted.empty()) summary["interrupted"] = o.interrupted;
  if (replays) {
    int ok = 0;
    for (const auto& r : *replays) ok += r.as_expected;
    summary["replays"] = {{"files", replays->size()}, {"as_expected", ok}};
  }
  if (Json p = profile_summary_json(outcome_case_reports(o)); !p.is_null()) summary["profile"] = p;  // --profile
  rep["summary"] = summary;
  rep["cases"] = campaign ? Json(campaign->reports) : Json::array();
  // --gpus: which jobs ran on which device, as their workers observed it
  if (campaign && !campaign->job_devices.empty()) rep["gpus"] = gpus_json(campaign->gpus, campaign->job_devices, campaign->seconds);
  if (replays) {
    Json a = Json::array();
    for (const auto& r : *replays) {
      Json j = {{"file", r.path},
                {"disposition", r.disposition},
                {"expected", r.expected},
                {"as_expected", r.as_expected},
                {"mismatch", r.mismatch},
                {"first_failure", r.first_failure},
                {"replay_command", replay_command(r.path)},
                {"seconds", r.seconds},
                {"report", r.report}};
      a.push_back(j);
    }
    rep["replays"] = a;
  }
  return explicit_nonfinite(rep);
}

void JsonReporter::report(const Outcome& o) { write_or_throw(path_, report_json(o).dump(2) + "\n", flag_); }

JUnitSuite properties_suite(const Outcome& o) {
  const CampaignResult& r = *o.campaign;
  JUnitSuite s;
  s.name = "recap.properties";
  s.timestamp = o.context.started_utc.substr(0, 19);
  s.hostname = o.context.host;
  s.properties = {{"seed", std::to_string(o.context.seed)}, {"backend", o.context.backend}, {"cases", std::to_string(r.cases)}};
  const Json counts = property_counts_json(r);
  for (const std::string& p : o.properties) {
    JUnitCase c;
    c.name = p;
    c.classname = "recap.properties";
    c.seconds = r.cases ? r.seconds / o.properties.size() : 0.0;
    if (counts.contains(p)) {  // judged vs skipped checks: a property no case judged is skipped, not passed
      const int judged = counts[p]["judged"].get<int>(), skipped = counts[p]["skipped"].get<int>();
      s.properties[p + ".judged"] = std::to_string(judged);
      s.properties[p + ".skipped"] = std::to_string(skipped);
      if (judged == 0) {
        c.skipped = true;
        c.skip_message = "no case judged " + p + " (" + std::to_string(skipped) + " skipped)";
      }
    }
    for (const auto& f : r.failures) {
      if (f.property != p) continue;
      c.failure_kind = f.disposition == "crashed" ? "error" : "failure";
      c.failure_type = f.disposition;
      c.message = p + " " + f.disposition + ": " + f.reason +
                  (f.corpus_path.empty() ? "" : "; replay: " + replay_command(f.corpus_path));
      c.text += c.message + "\nseed " + std::to_string(f.seed) + ", " + std::to_string(f.shrinks) + " shrinks\n" +
                (f.reproduce.empty() ? "" : "reproduce: " + f.reproduce + "\n") + "case: " + f.case_json.dump() + "\n";
    }
    s.cases.push_back(c);
  }
  for (size_t i = 0; i < r.crashes.size(); ++i) {
    JUnitCase c;
    c.name = "worker " + std::to_string(i);
    c.classname = "recap.crashes";
    c.failure_kind = "error";
    c.failure_type = "crashed";
    c.message = r.crashes[i];
    c.text = r.crashes[i];
    s.cases.push_back(c);
  }
  return s;
}

void JUnitReporter::report(const Outcome& o) {
  std::vector<JUnitSuite> suites;
  if (o.replays) {
    JUnitSuite corpus;
    corpus.name = "recap.corpus";
    corpus.timestamp = o.context.started_utc.substr(0, 19);
    corpus.hostname = o.context.host;
    for (const auto& rp : *o.replays) {
      JUnitCase c;
      c.name = std::filesystem::path(rp.path).filename().string();
      c.classname = "recap.corpus";
      c.seconds = rp.seconds;
      if (!rp.as_expected) {
        c.failure_kind = rp.disposition == "crashed" ? "error" : "failure";
        c.failure_type = rp.disposition;
        c.message = rp.mismatch + "; replay: " + replay_command(rp.path);
        c.text = c.message + "\n" + rp.first_failure + "\n";
      }
      corpus.cases.push_back(c);
    }
    suites.push_back(corpus);
  }
  if (o.campaign) suites.push_back(properties_suite(o));
  if (o.coverage) {
    JUnitSuite covs;
    covs.name = "recap.coverage";
    covs.timestamp = o.context.started_utc.substr(0, 19);
    covs.hostname = o.context.host;
    for (const auto& q : o.coverage->requirements) {
      JUnitCase c;
      c.name = q.label;
      c.classname = "recap.coverage";
      if (!o.coverage->checked) {
        c.skipped = true;
        c.skip_message = "--no-coverage";
      }
      for (const auto& line : o.coverage->shortfalls)
        if (line.find(" " + q.label + " in ") != std::string::npos) {
          c.failure_kind = "failure";
          c.failure_type = "coverage";
          c.message = line;
          c.text = line + "\n" + q.why + "\n";
        }
      covs.cases.push_back(c);
    }
    suites.push_back(covs);
  }
  write_or_throw(path_, junit_xml(suites), "--junit");
}

}  // namespace recap::reports
