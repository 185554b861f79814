// What a recap command found, as the reporters consume it: plain structs and JSON, so reports/
// knows nothing of how cases are generated or judged (properties/ and the CLI fill them).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/base/json.h"
#include "reports/report.h"

namespace recap::reports {

struct FailureRecord {
  Json case_json;           // the shrunk case (training::case_to_json)
  Json report;              // its case report
  std::string property;     // the first failing property
  std::string disposition;  // failed, incorrect, crashed
  std::string error, api;   // the failure's CUDA error name (or error kind) and call, when it has them
  std::string reason;       // one line
  std::string reproduce;    // RapidCheck's reproduce string
  uint64_t seed = 0;
  int shrinks = 0;
  std::string corpus_path;  // where it was written ("" before)
  std::string bucket;       // properties::bucket_of(): what makes it a distinct bug
  int chunk = 0;            // the campaign chunk it came from (duplicates keep the lowest)
  bool known = false;       // every failing case of its bucket was accepted by --known-findings: reported, not a failure
  std::string flaky;        // "" or what the shrunk case gave when replayed in a fresh process
  std::string diagnosis;    // properties::diagnose(): the bug class its symptoms match, or ""
};

// A finding that is not a failure (the skip policy's lost memory, ...), tallied over the cases
// that had it: kept as counts so that shards merge into what one process would have said.
struct FindingTally {
  int cases = 0;
  int64_t min_bytes = 0, max_bytes = 0;
};
void tally_finding(std::map<std::string, FindingTally>* tallies, const std::string& key, int64_t bytes);
// "memory: recompute lost inside graphs (skip): 12 cases, 4096 to 65536 bytes", in key order.
std::vector<std::string> finding_lines(const std::map<std::string, FindingTally>& tallies);

// What one chunk of 100 cases added to a campaign's totals, and whether it ran to its end (not
// cut by a signal or the time budget): --resume keeps the complete chunks and runs the others.
struct ChunkTotals {
  int cases = 0;
  bool complete = false;
  std::map<std::string, int> by_disposition, classification, buckets;
  std::map<std::string, FindingTally> finding_tallies;
  // property -> disposition -> checks (every case's check of it, skipped ones included).
  std::map<std::string, std::map<std::string, int>> by_property;
};
Json chunk_totals_to_json(int chunk, const ChunkTotals& t);
// Throws std::runtime_error naming the field that is wrong.
std::pair<int, ChunkTotals> chunk_totals_from_json(const Json& j);

// --known-findings: how the failing cases of one bucket were judged, each by its own case.
struct BucketJudgement {
  std::map<std::string, int> accepted;  // known finding id -> cases it accepted
  int new_cases = 0;                    // cases no known finding accepts
};

// --known-findings: a known finding that accepted no failing case of the campaign (so the file may
// shrink): not a failure.
struct UnseenFinding {
  std::string id;
  std::vector<std::string> buckets;
};

// --gpus (issue 22): one --jobs process and the device it ran on, as its worker observed it (a
// framework worker's hello, recap's runtime's own device), not as recap asked.
struct JobDevice {
  int job = 0;                 // the --jobs index
  std::string shard;           // the job's shard, i/n
  int requested = -1;          // the --gpus ordinal it was given
  std::string visible_set;     // the CUDA_VISIBLE_DEVICES recap set for it
  bool observed = false;       // false: the job died before it said, or its worker's hello has no visible_device
  bool visible_seen_set = false;  // CUDA_VISIBLE_DEVICES was set in the worker's environment
  std::string visible_seen;    // its value there
  std::string device;          // the device name the worker reported ("NVIDIA H200", "cpu", "sim")
  std::string uuid, pci_bus_id;  // the GPU it used ("" when none: a CPU worker)
  int cases = 0;               // cases the job ran
  double seconds = 0.0;        // the job's own time
};
Json job_device_to_json(const JobDevice& d);
JobDevice job_device_from_json(const Json& j);
// The report's "gpus" section: requested ordinals, each job, and per device the jobs that ran there
// with their cases and cases a minute (a device is what the workers observed: uuid, else pci bus
// id, else CUDA_VISIBLE_DEVICES and the device name). Null when `jobs` is empty.
Json gpus_json(const std::vector<int>& requested, const std::vector<JobDevice>& jobs, double seconds);
// One line per device of gpus_json (the console summary).
std::vector<std::string> gpu_lines(const Json& gpus);

struct CampaignResult {
  int cases = 0;
  std::map<std::string, int> by_disposition;
  std::map<std::string, int> classification;
  std::vector<std::string> findings;  // finding_lines(finding_tallies)
  std::map<std::string, FindingTally> finding_tallies;
  std::map<std::string, int> buckets;  // bucket -> failing cases (counterexamples or not)
  std::vector<Json> reports;
  std::vector<int> report_chunks;  // the chunk of each report: shards merge into case order
  std::vector<FailureRecord> failures;
  std::vector<std::string> crashes;  // worker processes that died: one line each (with the shard)
  std::map<int, ChunkTotals> chunks;  // chunk -> its totals (shards run disjoint chunks)
  double seconds = 0.0;
  // Set by the CLI after the campaign when --known-findings was given (not merged: judged once).
  std::string known_findings;                      // the file
  std::map<std::string, BucketJudgement> judged;  // bucket -> its failing cases, judged
  std::vector<UnseenFinding> known_not_seen;      // the file's findings that accepted no case, in its order
  // --gpus: each job and what it observed of its device (merged in job order); empty without it
  std::vector<int> gpus;
  std::vector<JobDevice> job_devices;
};

struct ReplayOutcome {
  std::string path;
  std::string disposition;    // the verdict ("" when the file did not load)
  std::string first_failure;  // one line
  Json expected;
  bool as_expected = false;
  std::string mismatch;       // one line when !as_expected
  Json report;
  double seconds = 0.0;
};

// The gate's coverage check.
struct CoverageOutcome {
  bool checked = true;
  std::vector<CoverageRequirement> requirements;
  std::vector<std::string> shortfalls;  // check_coverage's lines
};

// One command's outcome: what every reporter is given.
struct Outcome {
  const char* title = "recap";  // the console summary's first word(s): "recap fuzz", "recap gate: fuzz"
  RunContext context;
  const CampaignResult* campaign = nullptr;
  const std::vector<ReplayOutcome>* replays = nullptr;
  const CoverageOutcome* coverage = nullptr;
  std::vector<std::string> properties;  // the properties checked, in order (JUnit lists each)
  int exit_code = 0;
  std::string interrupted;  // the signal that cut the command short ("Terminated"), else ""
};

std::string replay_command(const std::string& path);  // "recap replay PATH"
// The cases that judged something (not skipped): what coverage shares are counted over.
int judged_cases(const CampaignResult& r);
// Per property, over the campaign's chunks: {"judged": passed+failed+incorrect+crashed, "skipped",
// and each disposition's count}.
Json property_counts_json(const CampaignResult& r);

// JSON forms (what a worker process hands its parent; the report's summary).
Json failure_to_json(const FailureRecord& f);
FailureRecord failure_from_json(const Json& j);
Json campaign_to_json(const CampaignResult& r);
CampaignResult campaign_from_json(const Json& j);
// The campaign a recap.report/1 of recap fuzz holds (its summary and cases), back in memory: what
// --resume and recap merge read. Finding tallies are the sum of its chunks' (the summary has their
// lines only); --known-findings judgements come back from summary.known_findings. Throws
// std::runtime_error naming what is missing or wrong.
CampaignResult campaign_from_report(const Json& report);
// Sets r's counts (cases, by_disposition, classification, buckets, finding tallies and lines) to
// the sum of its chunks' totals (r.chunks): a campaign counts each case once, in its chunk.
void sum_chunks(CampaignResult& r);
// Adds `from` (another shard's part) into `into`.
void merge_into(CampaignResult& into, CampaignResult&& from);
// Puts the case reports in case order (chunk by chunk, each chunk's in its order), as one process
// lists them; nothing when report_chunks does not match the reports.
void sort_reports_by_chunk(CampaignResult& r);

}  // namespace recap::reports
