// Fuzzing: RapidCheck generates cases (generators.h), evaluate() judges them (oracles.h), and a
// failure is shrunk to a minimal case.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "properties/generators.h"
#include "properties/oracles.h"
#include "reports/results.h"

namespace recap::properties {

struct FuzzOptions {
  uint64_t seed = 1;
  int cases = 100;             // per campaign (all jobs together), before sharding
  // Cases per chunk (one RapidCheck run each; chunk c is shard c % n). Part of what decides the
  // cases, so a campaign's report is the same for any --jobs but not for another chunk size.
  int chunk_cases = 100;
  double time_budget_s = 0.0;  // 0: none; otherwise stop starting new cases after this
  GenConfig gen;
  OracleOptions oracle;
  int shard_index = 0;         // this process runs shard `shard_index` of `shard_count`
  int shard_count = 1;
  // Several jobs on one shard: a job runs chunk c of its shard only if claim(c) says it is the first
  // to ask (null: every chunk of the shard). Chunks then go to whichever job is free, so one slow
  // chunk no longer holds back the rest of a static deal; a chunk's cases and verdicts depend only
  // on the seed and c, so the merged report is the same however the chunks were dealt.
  std::function<bool(int chunk)> claim;
  // Stop starting chunks once this many counterexamples are found (0: no limit). Chunks are
  // RapidCheck runs of up to chunk_cases cases; a failing chunk ends at its first failure and shrinks it.
  int max_failures = 1;
  // Evaluations a shrink may spend (0: no limit). Past it every candidate counts as passing, so
  // the shrunk case is the smallest failing one found so far: deterministic, unlike a time limit.
  // A framework SUT runs a case in seconds, where an unbounded shrink takes an hour.
  int shrink_limit = 0;
  // Run every case (the CLI's default; max_failures is then ignored): after a counterexample its chunk goes on with
  // the remaining cases; a later failure with the signature of one the chunk already shrank is
  // counted and reported but not shrunk again. A framework with known bugs fails often, and a
  // campaign that stops at the first failure of each shard never reaches its case count.
  bool keep_going = false;
  // Set by a signal handler (harness/cli/signals.h): like a spent time budget, and a shrink in
  // progress keeps the smallest failing case found so far. Null: never.
  const std::atomic<bool>* stop = nullptr;
  // A failure the caller accepts (--known-findings: its bucket and configuration). Such a case is
  // reported but not shrunk (its counterexample is the case as drawn), and a shrink's candidate
  // that it accepts counts as passing, so a new failure never shrinks into a known configuration
  // (the reproducer would show the known bug instead of the new one).
  // Null: none accepted.
  std::function<bool(const CaseReport&)> accepted;
  // Chunks not to run (--resume: the complete chunks of an interrupted campaign's report).
  std::set<int> skip_chunks;
};

struct Progress {
  int done = 0;
  int failures = 0;
  double elapsed_s = 0.0;
  double time_left_s = -1.0;  // -1: no budget
};

// Runs a campaign and returns what the reporters print: the counts (in all and per chunk), every
// case's report in order, and each chunk's counterexamples, shrunk (reports::FailureRecord: the
// shrunk case, its report, its first failing check's property, disposition, error and API, the
// reproduce string, shrinks, bucket, chunk, diagnosis). Deterministic for a seed: the same cases,
// verdicts and reports (timings aside).
reports::CampaignResult fuzz(const FuzzOptions& opts, const std::function<void(const Progress&)>& progress = {});

// What identifies a distinct bug: first_failing_check()'s property, disposition, API, CUDA error
// and, for a divergence, the kind of quantity that diverged first (loss, grad, param):
// "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/",
// "recompute_on_off/incorrect///grad". "" for a case that did not fail.
std::string bucket_of(const CaseReport& r);
// The same of a case report's JSON form (case_report_to_json): what --known-findings judges every
// failing case of a campaign by, from the reports the campaign kept.
std::string bucket_of_json(const Json& report);

// After RapidCheck's shrink of a counterexample (*spec, *rep): deletes layers one at a time while
// the case fails with the same signature (first failing property, disposition, CUDA error), at
// most `budget` evaluations (0: no limit). Returns how many layers it deleted.
int delete_layers(training::CaseSpec* spec, CaseReport* rep, const OracleOptions& oracle, int budget,
                  const std::function<bool(const CaseReport&)>& accepted = {});

// The labels classification() counts a case under (QuickCheck's `classify`): e.g.
// "checkpoint+capture+dropout", "executor=per-layer", "policy=graph-safe", "generator=host", ...
std::vector<std::string> classify(const training::CaseSpec& spec);

}  // namespace recap::properties
