// A fuzz campaign as the CLI runs it (recap fuzz, recap gate), split by job:
//   campaign.cpp    in this process (properties::fuzz, the progress line, the fault point), and
//                   writing what it found to the corpus
//   workers.cpp     over worker processes (--jobs N, --isolate): a case that kills its process
//                   costs one worker, is recorded as `crashed`, and the campaign goes on
//   shard.cpp       --shard i/n and gtest's sharding variables
//   fuzz_flags.cpp  the flags fuzz and gate share, resolved into CampaignOptions
//   replay_cmd.cpp  replay of corpus files (replay_case, used by gate too)
// What a campaign found is reports::CampaignResult; reports/reporter.h turns it into the console
// summary, the JSON report and JUnit.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/cli.h"
#include "harness/cli/known_findings.h"
#include "properties/fuzz.h"
#include "reports/reporter.h"
#include "reports/results.h"

namespace recap::cli {

using reports::CampaignResult;
using reports::FailureRecord;
using reports::ReplayOutcome;

struct CampaignOptions {
  properties::FuzzOptions fuzz;
  std::string backend = "sim";
  std::string policy;        // "" drawn
  int jobs = 1;
  std::string jobs_auto;  // --jobs auto: how jobs was chosen (the report context's jobs_auto)
  bool isolate = false;      // worker processes even with one job
  bool progress = false;     // the \r progress line on stderr
  std::string worker_out;    // this process is a worker: write the result here
  // A worker: its job number, and the folder where the jobs claim chunks (one file per chunk,
  // created exclusively, holding the job's number); "" deals no chunks dynamically.
  int job = 0;
  std::string claim_dir;
  SutFlags sut;              // --sut and the worker flags (fuzz.oracle.sut is made from them in each process)
  std::string sut_kind = "recap";  // what --sut names (SutChoice::kind), and what the system said of itself:
  sut::SutInfo sut_info;           // the report's context and the corpus files record them
  // --gpus (gpus.h): the ordinals the jobs are spread over, and the CUDA_VISIBLE_DEVICES value each
  // ordinal's jobs get; empty without it. In a job process: the ordinal it was given (-1: none)
  // and what it observed of its device (run_campaign hands it to the parent).
  std::vector<int> gpus;
  std::vector<std::string> gpu_visible;
  int job_gpu = -1;
  reports::JobDevice observed;
  // --known-findings FILE, read once (set_known_findings); its path is passed on to shard workers
  std::shared_ptr<const KnownFindings> known = std::make_shared<const KnownFindings>();
};

// --known-findings FILE: reads it into o.known, and o.fuzz.accepted says which failing cases it
// accepts (bucket and configuration), so they are not shrunk and no shrink moves a new failure into
// them. UsageError for a bad file. Empty path: none.
void set_known_findings(CampaignOptions& o, const std::string& path);

// One counterexample per bucket remains (the lowest chunk's).
CampaignResult run_campaign(const CampaignOptions& o);
// Replays every shrunk counterexample (not known) once more in a fresh system under test (a new
// worker process; recap's runtime: a new device): one that does not fail the same way (verdict,
// property and CUDA error, as shrinking keeps them) is marked flaky with what it gave, and is not
// written as a reproducer. Skipped after a stop signal.
void confirm_failures(CampaignResult& r, const CampaignOptions& o);
// --known-findings: judges every failing case the campaign ran (r.reports, each with its own case as
// generated, not the shrunk counterexample: shrinking can move a case into a known configuration)
// into r.judged; marks a counterexample known when every failing case of its bucket was accepted.
// Returns how many buckets are not known (their counterexamples, and any bucket with new cases but
// no counterexample). Without a file nothing is known.
int mark_known(CampaignResult& r, const KnownFindings& known);
// The end of mark_known, from r.judged as it stands: each counterexample is known when every failing
// case of its bucket was accepted; returns how many buckets are not known (recap merge: the
// judgements of its shards, summed).
int count_unknown(CampaignResult& r);
// One counterexample per bucket: the lowest chunk's (chunks shrink independently, so that how
// chunks are dealt to jobs and shards changes nothing).
void one_per_bucket(CampaignResult& r);
// --jobs N: N worker processes on this process's shard, each taking the next unclaimed chunk when
// it is free (claim_chunk), merged in chunk order.
CampaignResult run_workers(const CampaignOptions& o);
// The jobs' chunk claims: claim_chunk creates DIR/CHUNK exclusively, holding the job's number, and
// is true for the first job to ask; chunks_claimed_by lists a job's chunks, lowest first.
bool claim_chunk(const std::string& dir, int chunk, int job);
std::vector<int> chunks_claimed_by(const std::string& dir, int job);
// Writes each failure to the corpus dir (sets corpus_path), recording the system under test that
// found it (its kind and version: what `recap replay FILE` runs it on); throws UsageError when it
// cannot.
void save_failures(CampaignResult& r, const std::string& corpus_dir, bool require_memory_savings,
                   const CampaignOptions& o);

// What fuzz and gate do with a campaign's counterexamples, in this order: mark the known ones,
// confirm the others in a fresh system, write the confirmed ones to corpus_dir. Returns how many
// are not known (the exit code's failures).
int settle_failures(CampaignResult& r, const CampaignOptions& o, const KnownFindings& known,
                    const std::string& corpus_dir);

// --resume REPORT: what the interrupted campaign's report kept of its complete chunks (their
// cases, totals and counterexamples; partial chunks are run again) and, in o->fuzz.skip_chunks,
// those chunks. UsageError, one line, when the file is not a recap.report/1 of this campaign (its
// seed, cases, policy, backend, shard and system under test) or lacks the chunk totals. *rerun_files
// gets every corpus file the interrupted run wrote: the resumed run writes again those it keeps,
// and not those of a chunk that runs again (a shrink cut short by the signal) or whose bucket a
// chunk that runs again takes (a later chunk's case stood for a bucket whose lowest chunk had not
// reached it yet: another job's chunk, or a shard missing from a recap merge --allow-partial).
CampaignResult read_resumed(const std::string& path, CampaignOptions* o, std::vector<std::string>* rerun_files);
// Removes each of `files` whose name no failure of `r` was written under, so a resumed campaign
// leaves the corpus an uninterrupted run leaves (by name: resumed into another --corpus-dir, the
// files the campaign keeps stay where the interrupted run wrote them too).
void remove_replaced_files(const std::vector<std::string>& files, const CampaignResult& r);
// The resumed part and the rest of the campaign, as one uninterrupted run would have reported it.
void merge_resumed(CampaignResult& kept, CampaignResult&& rest);

// Parses "i/n" (0 <= i < n); throws UsageError naming the flag.
void parse_shard(const std::string& text, int* index, int* count);
// --shard, else GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS (and touches GTEST_SHARD_STATUS_FILE).
void resolve_shard(const std::string& flag, int* index, int* count);
// How many of `cases` shard i of n runs: fuzz() deals chunks of `chunk` cases, chunk c to shard c % n.
int shard_cases(int cases, int chunk, int i, int n);

// Replays one case file (already validated into *spec) on `backend`; prints the verdict and, when
// a check diverged, the step-by-step table of the first divergence. `print` false: quiet. `profile`:
// the case report's timings.profile (--profile). `differential`: property differential against
// that backend (--differential).
ReplayOutcome replay_case(const std::string& path, const training::CaseSpec& spec, const std::string& backend,
                          bool require_memory_savings, const std::vector<std::string>& properties,
                          const std::shared_ptr<sut::Sut>& sut, bool print, bool profile = false,
                          std::optional<device::BackendChoice> differential = std::nullopt);

// The flags fuzz and gate share.
struct FuzzFlags {
  std::string backend = "auto";
  int cases = 1000;
  double time_budget = 0.0;
  std::string seed;  // "" random (fuzz) / fixed (gate)
  std::string policy;
  int jobs = 1;
  bool jobs_auto = false;  // --jobs auto: chosen from the CPU cores and GPU memory (gpus.h, auto_jobs)
  bool isolate = false;
  std::string shard;
  std::string report, corpus_dir = "corpus/found", junit, worker_out;
  bool require_memory_savings = false;
  bool no_checkpoint = false, no_dropout = false;  // generator restrictions
  std::vector<std::string> faults;                 // --fault NAME: fault points every case carries
  int shrink_limit = 0;
  int chunk_cases = 100;
  bool keep_going = true;     // --stop-on-first clears it
  std::string known_findings;  // --known-findings FILE: known findings (bucket and configuration)
  std::string resume;          // --resume REPORT: the report of an interrupted run of this campaign
  std::vector<int> skip_chunks;  // internal (a worker of a resumed campaign): chunks already done
  std::string dims = "auto";  // small | large | auto (large for recap's runtime on cuda, else small)
  std::vector<std::string> properties;  // --property; empty: all
  SutFlags sut;
  bool profile = false;  // --profile: timings.profile per case, the summary's phase table
  std::string differential;  // --differential OTHER: property differential against that backend ("" off)
  std::string gpus;          // --gpus LIST: ordinals or all (gpus.h)
  bool gpus_given = false;   // --gpus was on the command line (an empty LIST is an error, not "off")
  int job_gpu = -1;          // internal (a job of --gpus): the ordinal it was given
  int job = 0;               // internal (a worker): its job number
  std::string claim_dir;     // internal (a worker): where the jobs claim chunks
};
void add_fuzz_flags(CLI::App* cmd, FuzzFlags* f);
// Resolves the backend, seed, shard and policy; *seed_random when the seed was drawn.
CampaignOptions campaign_options(const FuzzFlags& f, bool* seed_random, std::string* device_name);
reports::RunContext run_context(const char* command, const CampaignOptions& o, const std::string& device_name);
// The properties a campaign checks: its --property selection, else all.
// An opt-in property (differential) only when `differential` asks for it.
std::vector<std::string> checked_properties(const std::vector<std::string>& selected, bool differential = false,
                                            bool ranks = false);

// Runs every reporter the flags ask for: the console summary, and --report / --junit when given.
void report_outcome(const reports::Outcome& o, const std::string& report_path, const std::string& junit_path);

}  // namespace recap::cli
