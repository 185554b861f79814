// A campaign in this process (properties::fuzz with the progress line and the fault point), or
// over worker processes (workers.cpp); and what it found, written to the corpus.
#include "harness/cli/campaign.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "harness/cli/cli.h"
#include "harness/cli/fault.h"
#include "harness/cli/progress.h"
#include "harness/training/executor.h"

namespace recap::cli {

using properties::CaseReport;
using properties::disposition_name;

namespace {

// The check a counterexample failed on: its property's check, else the first that did not pass.
const properties::CheckResult* failing_check(const CaseReport& r, const std::string& property) {
  for (const auto& c : r.checks)
    if (c.property == property) return &c;
  for (const auto& c : r.checks)
    if (c.disposition != properties::Disposition::Passed && c.disposition != properties::Disposition::Skipped) return &c;
  return nullptr;
}

}  // namespace

CampaignResult from_stats(const properties::FuzzStats& s) {
  CampaignResult r;
  r.cases = s.cases;
  r.by_disposition = s.by_disposition;
  r.classification = s.classification;
  r.findings = s.findings;
  r.seconds = s.seconds;
  for (const auto& c : s.reports) r.reports.push_back(properties::case_report_to_json(c));
  for (const auto& cx : s.failures) {
    FailureRecord f;
    f.case_json = training::case_to_json(cx.spec);
    f.report = properties::case_report_to_json(cx.report);
    f.property = cx.property;
    f.disposition = disposition_name(cx.report.disposition);
    if (const auto* c = failing_check(cx.report, cx.property)) {
      f.error = c->cuda_error;
      f.api = c->api;
      if (f.property.empty()) f.property = c->property;
    }
    f.reason = cx.report.first_failure();
    f.reproduce = cx.reproduce;
    f.seed = cx.seed;
    f.shrinks = cx.shrinks;
    r.failures.push_back(std::move(f));
  }
  return r;
}

namespace {

CampaignResult run_in_process(const CampaignOptions& o) {
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  std::ofstream progress_file;
  if (!o.worker_out.empty()) progress_file.open(o.worker_out + ".progress");
  int total = shard_cases(o.fuzz.cases, o.fuzz.shard_index, std::max(1, o.fuzz.shard_count));
  auto cb = [&](const properties::Progress& p) {
    maybe_abort(o.fuzz.shard_index, p.done);
    if (progress_file.is_open()) {
      progress_file.seekp(0);
      progress_file << p.done << ' ' << p.failures << "        " << std::flush;
    }
    if (o.progress) {
      auto now = std::chrono::steady_clock::now();
      if (now - last > std::chrono::milliseconds(100) || p.done == total) {
        last = now;
        progress_line(p.done, total, p.failures, p.elapsed_s, p.time_left_s);
      }
    }
  };
  properties::FuzzStats s = properties::fuzz(o.fuzz, cb);
  if (o.progress) clear_progress_line();
  return from_stats(s);
}

}  // namespace

CampaignResult run_campaign(const CampaignOptions& o) {
  if (o.worker_out.empty() && (o.jobs > 1 || o.isolate)) return run_workers(o);
  auto t0 = std::chrono::steady_clock::now();
  CampaignResult r = run_in_process(o);
  if (r.seconds <= 0) r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void save_failures(CampaignResult& r, const std::string& corpus_dir, bool require_memory_savings,
                   const CampaignOptions& o) {
  for (auto& f : r.failures) {
    reports::CorpusEntry e;
    e.case_json = f.case_json;
    e.property = f.property;
    e.disposition = f.disposition;
    e.error = f.error;
    e.api = f.api;
    e.reason = f.reason;
    e.reproduce = f.reproduce;
    e.seed = f.seed;
    e.shrinks = f.shrinks;
    e.require_memory_savings = require_memory_savings && f.property == "memory";
    e.sut_name = o.sut_kind;
    e.sut_version = o.sut_info.version;
    std::string err;
    f.corpus_path = reports::write_corpus_entry(corpus_dir, e, &err);
    if (f.corpus_path.empty()) throw UsageError("--corpus-dir: " + err);
  }
}

}  // namespace recap::cli
