// A fuzz campaign as the CLI runs it (recap fuzz, recap gate): in this process, or split over
// worker processes (--jobs N, --isolate) that each run a shard and write their result as JSON, so
// that a case that kills its process (a signal, abort, a sticky CUDA error) costs one worker, is
// recorded as `crashed`, and the campaign goes on. Also: corpus writing, the summary, the report
// and JUnit pieces fuzz and gate share, and replay of corpus files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "properties/fuzz.h"
#include "reports/report.h"

namespace recap::cli {


struct FailureRecord {
  Json case_json;          // the shrunk case (training::case_to_json)
  Json report;             // its case report
  std::string property;     // the first failing property
  std::string disposition;  // failed, incorrect, crashed
  std::string error, api;   // the failure's CUDA error name (or error kind) and call, when it has them
  std::string reason;       // one line
  std::string reproduce;    // RapidCheck's reproduce string
  uint64_t seed = 0;
  int shrinks = 0;
  std::string corpus_path;  // where it was written ("" before)
};

struct CampaignResult {
  int cases = 0;
  std::map<std::string, int> by_disposition;
  std::map<std::string, int> classification;
  std::vector<std::string> findings;
  std::vector<Json> reports;
  std::vector<FailureRecord> failures;
  std::vector<std::string> crashes;  // worker processes that died: one line each (with the shard)
  double seconds = 0.0;
};
Json campaign_to_json(const CampaignResult& r);
CampaignResult campaign_from_json(const Json& j);

struct CampaignOptions {
  properties::FuzzOptions fuzz;
  std::string backend = "sim";
  std::string policy;        // "" drawn
  int jobs = 1;
  bool isolate = false;      // worker processes even with one job
  bool progress = false;     // the \r progress line on stderr
  std::string worker_out;    // this process is a worker: write the result here
};

// Parses "i/n" (0 <= i < n); throws UsageError naming the flag.
void parse_shard(const std::string& text, int* index, int* count);
// --shard, else GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS (and touches GTEST_SHARD_STATUS_FILE).
void resolve_shard(const std::string& flag, int* index, int* count);

CampaignResult run_campaign(const CampaignOptions& o);

// Writes each failure to the corpus dir (sets corpus_path); throws UsageError when it cannot.
void save_failures(CampaignResult& r, const std::string& corpus_dir, bool require_memory_savings);

// The summary on stdout: counts by disposition, classification, findings, failures with their
// replay commands, throughput.
void print_summary(const char* what, const CampaignResult& r, const CampaignOptions& o);

Json campaign_summary_json(const CampaignResult& r);

// ---- replay ---------------------------------------------------------------------------------

struct ReplayOutcome {
  std::string path;
  std::string disposition;   // the verdict ("" when the file did not load)
  std::string first_failure; // one line
  Json expected;
  bool as_expected = false;
  std::string mismatch;      // one line when !as_expected
  Json report;
  double seconds = 0.0;
};
// Replays one case file (already validated into *spec) on `backend`; prints the verdict and, when
// a check diverged, the step-by-step table of the first divergence. `print` false: quiet.
ReplayOutcome replay_case(const std::string& path, const training::CaseSpec& spec, const std::string& backend,
                          bool require_memory_savings, const std::vector<std::string>& properties, bool print);

std::string replay_command(const std::string& path);

// The report: schema, context, summary, cases (and replays).
Json make_report(const reports::RunContext& ctx, const CampaignResult* campaign,
                  const std::vector<ReplayOutcome>* replays, const Json& extra_summary);

void write_file_or_throw(const std::string& path, const std::string& text, const char* flag);

}  // namespace recap::cli

namespace recap::cli {

// The flags fuzz and gate share.
struct FuzzFlags {
  std::string backend = "auto";
  int cases = 1000;
  double time_budget = 0.0;
  std::string seed;  // "" random (fuzz) / fixed (gate)
  std::string policy;
  int jobs = 1;
  bool isolate = false;
  std::string shard;
  std::string report, corpus_dir = "corpus/found", junit, worker_out;
  bool require_memory_savings = false;
  std::vector<std::string> properties;  // --property; empty: all
};
void add_fuzz_flags(CLI::App* cmd, FuzzFlags* f);
// Resolves the backend, seed, shard and policy; *seed_random when the seed was drawn.
CampaignOptions campaign_options(const FuzzFlags& f, bool* seed_random, std::string* device_name);
reports::RunContext run_context(const char* command, const CampaignOptions& o, const std::string& device_name);
// The JUnit suite of a campaign: one test case per property (and one per crashed worker).
reports::JUnitSuite properties_suite(const CampaignResult& r, const std::string& timestamp);

}  // namespace recap::cli
