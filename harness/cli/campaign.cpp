// A campaign in this process (properties::fuzz with the progress line and the fault point), or
// over worker processes (workers.cpp); and what it found, written to the corpus.
#include "harness/cli/campaign.h"
#include "harness/base/json_read.h"
#include "harness/runtime/phase.h"

#include <unistd.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "harness/cli/cli.h"
#include "harness/cli/fault.h"
#include "harness/cli/progress.h"
#include "harness/cli/signals.h"
#include "harness/training/executor.h"

namespace recap::cli {

using properties::disposition_name;

namespace {

CampaignResult run_in_process(const CampaignOptions& o) {
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  std::ofstream progress_file;
  if (!o.worker_out.empty()) progress_file.open(o.worker_out + ".progress");
  int total = shard_cases(o.fuzz.cases, o.fuzz.chunk_cases, o.fuzz.shard_index, std::max(1, o.fuzz.shard_count));
  properties::FuzzOptions fo = o.fuzz;
  if (!o.claim_dir.empty()) fo.claim = [&o](int chunk) { return claim_chunk(o.claim_dir, chunk, o.job); };
  auto cb = [&](const properties::Progress& p) {
    maybe_abort(o.job, p.done);
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
  maybe_abort(o.job, 0);  // RECAP_FAULT_ABORT=JOB:0 (fault.h)
  CampaignResult r = properties::fuzz(fo, cb);
  if (o.progress) clear_progress_line();
  return r;
}

}  // namespace

// Chunks shrink their failures independently (so that a campaign's result does not depend on how
// chunks are dealt to jobs), and the lowest chunk's is kept.
void one_per_bucket(CampaignResult& r) {
  std::stable_sort(r.failures.begin(), r.failures.end(),
                   [](const FailureRecord& a, const FailureRecord& b) { return a.chunk < b.chunk; });
  std::set<std::string> seen;
  std::vector<FailureRecord> kept;
  for (auto& f : r.failures)
    if (f.bucket.empty() || seen.insert(f.bucket).second) kept.push_back(std::move(f));
  r.failures = std::move(kept);
}

CampaignResult run_campaign(const CampaignOptions& o) {
  CampaignResult r;
  if (o.worker_out.empty() && (o.jobs > 1 || o.isolate || !o.gpus.empty())) {  // --gpus pins processes
    r = run_workers(o);
  } else {
    auto t0 = std::chrono::steady_clock::now();
    r = run_in_process(o);
    if (r.seconds <= 0) r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (o.worker_out.empty()) one_per_bucket(r);  // a worker's parent merges first
  if (o.job_gpu >= 0) r.job_devices = {o.observed};  // a --gpus job: what it ran on, for its parent
  return r;
}

CampaignResult read_resumed(const std::string& path, CampaignOptions* o, std::vector<std::string>* rerun_files) {
  Json rep;
  JsonLimits lim;
  lim.max_bytes = size_t{1} << 30;  // a report holds every case's report: 1 GiB is 200,000 cases
  if (std::string err = read_json_file(path, &rep, lim); !err.empty()) throw UsageError("--resume: " + err);
  auto bad = [&](const std::string& why) { return UsageError("--resume " + one_line(path, 120) + ": " + why); };
  if (!rep.is_object() || rep.value("schema", Json()) != Json(reports::kReportSchema)) throw bad("not a recap.report/1");
  Json ctx = rep.value("context", Json::object());
  if (!ctx.is_object()) throw bad("its context is not an object");
  // the same campaign: what decides its cases
  auto same = [&](const char* key, const Json& want) {
    if (ctx.value(key, Json()) != want)
      throw bad(std::string("its ") + key + " is " + one_line(ctx.value(key, Json()).dump(), 60) + ", this campaign's " +
                one_line(want.dump(), 60));
  };
  if (ctx.value("command", "") != "fuzz") throw bad("not a report of recap fuzz");
  same("seed", Json(o->fuzz.seed));
  same("cases_requested", Json(o->fuzz.cases));
  if (ctx.is_object() && !ctx.contains("chunk_cases")) ctx["chunk_cases"] = 100;  // reports from before --chunk-cases
  same("chunk_cases", Json(o->fuzz.chunk_cases));
  same("policy", o->policy.empty() ? Json(nullptr) : Json(o->policy));
  same("backend", Json(o->backend));
  const std::string sut = ctx.contains("sut") && ctx["sut"].is_object() ? ctx["sut"].value("name", "") : "";
  if (sut != o->sut_kind) throw bad("it ran on system " + one_line(sut, 40) + ", this campaign on " + o->sut_kind);
  CampaignResult all;
  try {
    all = reports::campaign_from_report(rep);
  } catch (const std::exception& e) {
    throw bad(one_line(e.what(), 160));
  }
  CampaignResult kept;
  for (const auto& [c, t] : all.chunks) {
    if (!t.complete) continue;
    o->fuzz.skip_chunks.insert(c);
    kept.chunks[c] = t;
  }
  reports::sum_chunks(kept);
  for (size_t i = 0; i < all.reports.size(); ++i)
    if (o->fuzz.skip_chunks.count(all.report_chunks[i])) {
      kept.reports.push_back(std::move(all.reports[i]));
      kept.report_chunks.push_back(all.report_chunks[i]);
    }
  for (auto& f : all.failures) {
    if (!f.corpus_path.empty()) rerun_files->push_back(f.corpus_path);
    if (o->fuzz.skip_chunks.count(f.chunk)) kept.failures.push_back(std::move(f));
  }
  return kept;
}

void remove_replaced_files(const std::vector<std::string>& files, const CampaignResult& r) {
  std::set<std::string> written;
  for (const auto& f : r.failures)
    if (!f.corpus_path.empty()) written.insert(std::filesystem::path(f.corpus_path).filename().string());
  for (const auto& p : files) {
    if (written.count(std::filesystem::path(p).filename().string())) continue;
    std::error_code ec;
    std::filesystem::remove(p, ec);  // already gone, or never written: nothing to undo
  }
}

void merge_resumed(CampaignResult& kept, CampaignResult&& rest) {
  const double seconds = rest.seconds;
  reports::merge_into(kept, std::move(rest));
  kept.seconds = seconds;  // this run's
  // cases in case order, and one counterexample per bucket from the lowest chunk, as one run has them
  reports::sort_reports_by_chunk(kept);
  for (auto& f : kept.failures) {  // settled again (confirmed, written), as in one run
    f.corpus_path.clear();
    f.flaky.clear();
  }
  one_per_bucket(kept);
}

void set_known_findings(CampaignOptions& o, const std::string& path) {
  o.known = std::make_shared<const KnownFindings>(read_known_findings(path));
  o.fuzz.accepted = nullptr;
  if (!o.known->given()) return;
  o.fuzz.accepted = [known = o.known](const properties::CaseReport& r) {
    return !accepting_finding(*known, properties::bucket_of(r), r.spec).empty();
  };
}

int mark_known(CampaignResult& r, const KnownFindings& known) {
  r.judged.clear();
  r.known_not_seen.clear();
  r.known_findings = known.path;
  if (known.given()) {
    for (const Json& rep : r.reports) {
      const std::string bucket = properties::bucket_of_json(rep);
      if (bucket.empty()) continue;  // passed, skipped, out of memory
      training::CaseSpec spec;
      const bool ok = rep.contains("spec") && training::case_from_json(rep["spec"], &spec).empty();
      const std::string id = ok ? accepting_finding(known, bucket, spec) : "";
      auto& j = r.judged[bucket];
      if (id.empty()) ++j.new_cases;
      else ++j.accepted[id];
    }
    // the findings that accepted no case: where the file may shrink, after an upgrade
    for (const auto& e : known.entries) {
      bool seen = false;
      for (const auto& [b, j] : r.judged) seen = seen || j.accepted.count(e.id) > 0;
      if (!seen) r.known_not_seen.push_back({e.id, {e.buckets.begin(), e.buckets.end()}});
    }
  }
  if (known.given()) {
    // A bucket with new cases whose counterexample is itself a case the known findings accept (the
    // bucket's first failing case in its chunk was a known one, and it took the chunk's shrink): as
    // a reproducer it would show the known bug. The bucket's first new case, as drawn (not shrunk),
    // takes its place.
    for (auto& f : r.failures) {
      training::CaseSpec cs;
      if (!training::case_from_json(f.case_json, &cs).empty() || accepting_finding(known, f.bucket, cs).empty()) continue;
      for (const Json& rep : r.reports) {
        training::CaseSpec spec;
        if (properties::bucket_of_json(rep) != f.bucket || !rep.contains("spec") ||
            !training::case_from_json(rep["spec"], &spec).empty() || !accepting_finding(known, f.bucket, spec).empty())
          continue;
        f.case_json = rep["spec"];
        f.report = rep;
        f.shrinks = 0;
        f.reproduce.clear();
        f.reason = rep.value("first_failure", f.reason);
        break;
      }
    }
  }
  return count_unknown(r);
}

int count_unknown(CampaignResult& r) {
  auto known_bucket = [&](const std::string& b) {
    auto j = r.judged.find(b);
    return j != r.judged.end() && j->second.new_cases == 0 && !j->second.accepted.empty();
  };
  int unknown = 0;
  std::set<std::string> counted;
  for (auto& f : r.failures) {
    f.known = known_bucket(f.bucket);
    unknown += !f.known;
    counted.insert(f.bucket);
  }
  for (const auto& [b, j] : r.judged)  // new cases in a bucket without a counterexample (cannot happen today)
    if (j.new_cases > 0 && !counted.count(b)) ++unknown;
  return unknown;
}

void confirm_failures(CampaignResult& r, const CampaignOptions& o) {
  if (stop_flag()->load()) return;  // asked to stop: what was found is written as it is
  for (auto& f : r.failures) {
    if (f.known) continue;
    training::CaseSpec spec;
    if (!training::case_from_json(f.case_json, &spec).empty()) continue;  // cannot happen: we wrote it
    // A new system under test for each counterexample: a new worker process (recap's runtime: a new
    // device). One worker for all of them let a counterexample lean on what the one before left in
    // the framework (megatron-core 0.18.2's graph-buffer pool, M10: results/h200/2026-12-02-issue20).
    std::shared_ptr<sut::Sut> fresh = make_sut(o.sut, o.sut.sut, o.backend).sut;
    properties::OracleOptions oracle = o.fuzz.oracle;
    oracle.sut = fresh;
    // recap's runtime in this process: fresh also means the thread's phase flags as a new process
    // has them (a fault point, phase-flag-leak, leaves them set for every later case)
    if (!fresh) runtime::reset_phase_flags();
    const properties::CaseReport again = properties::evaluate(spec, oracle);
    // what identified the shrunk case (its bucket may name another divergent quantity than the
    // case the shrink started from: shrinking keeps property, disposition and error): the check of
    // its property, else the first failing one
    const properties::CheckResult* c = nullptr;
    for (const auto& k : again.checks)
      if (!c && k.property == f.property) c = &k;
    if (!c) c = properties::first_failing_check(again);
    const std::string error = c ? c->cuda_error : "";
    const bool same = disposition_name(again.disposition) == f.disposition && c && c->property == f.property &&
                      c->disposition == again.disposition && error == f.error;
    if (!same)
      f.flaky = disposition_name(again.disposition) +
                (again.first_failure().empty() ? "" : ": " + again.first_failure());
  }
}

void save_failures(CampaignResult& r, const std::string& corpus_dir, bool require_memory_savings,
                   const CampaignOptions& o) {
  for (auto& f : r.failures) {
    if (f.known) continue;  // accepted (--known-findings): reported, not written again
    if (!f.flaky.empty()) continue;  // not a reproducer (confirm_failures)
    reports::CorpusContext context;
    context.require_memory_savings = require_memory_savings && f.property == "memory";
    if (f.property == "differential" && o.fuzz.oracle.differential)  // replay judges it against the same backend
      context.differential = *o.fuzz.oracle.differential == device::BackendChoice::Cuda ? "cuda" : "sim";
    context.sut_name = o.sut_kind;
    context.sut_version = o.sut_info.version;
    std::string err;
    f.corpus_path = reports::write_corpus_entry(corpus_dir, f, context, &err);
    if (f.corpus_path.empty()) throw UsageError("--corpus-dir: " + err);
  }
}

int settle_failures(CampaignResult& r, const CampaignOptions& o, const KnownFindings& known,
                    const std::string& corpus_dir) {
  const int unknown = mark_known(r, known);
  confirm_failures(r, o);
  save_failures(r, corpus_dir, o.fuzz.oracle.require_memory_savings, o);
  return unknown;
}

}  // namespace recap::cli
