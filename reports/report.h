// Writing what a campaign found: the JSON report (schema "recap.report/1", described by
// reports/schema/recap.report.schema.json), JUnit XML, corpus files named by their content, and
// QuickCheck-style coverage requirements. Everything here works on JSON and plain structs, so it
// knows nothing of how cases are generated or judged.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "harness/base/json.h"

namespace recap::reports {

constexpr const char* kReportSchema = "recap.report/1";

// The run context: what produced the report.
struct RunContext {
  std::string command;      // "fuzz", "gate", "replay"
  std::string recap_version;
  std::string git_commit;   // "" when unknown
  std::string backend;
  std::string device;
  uint64_t seed = 0;
  std::string policy;       // "" when drawn
  std::vector<std::string> properties;  // the --property selection; empty: all
  int cases_requested = 0;
  int chunk_cases = 0;  // fuzz: cases per chunk (0: not a fuzz campaign, not written)
  int jobs = 1;
  std::string jobs_auto;    // --jobs auto: how `jobs` was chosen ("16 (16 CPU cores; ...)"); "" otherwise
  std::string shard;        // "i/n"
  int shard_count = 1;      // n
  bool isolate = false;     // workers even with one job
  std::string started_utc;  // ISO 8601
  std::string host;
  // The system under test: what --sut named (recap, recap-worker, torch, megatron), its version and
  // device as its hello said; "sut" in the JSON when sut_name is set.
  std::string sut_name, sut_version, sut_device;
  // fuzz and gate: the flags that decide the campaign's cases and verdicts beyond the fields above
  // (require_memory_savings, no_checkpoint, no_dropout, faults, dims, shrink_limit, stop_on_first,
  // time_budget, known_findings), "flags" in the JSON when not null: recap merge compares them.
  Json flags;
  std::vector<std::string> merged_from;  // recap merge: the shard reports it merged, in shard order
  std::vector<int> gpus;                 // --gpus: the device ordinals the jobs were spread over
};
Json context_to_json(const RunContext& c);
// RECAP_GIT_COMMIT from the environment (a full or abbreviated hash, at least 7 hex digits),
// else `git rev-parse HEAD` in the source tree (or the working directory), else the compile-time
// RECAP_GIT_COMMIT, else "".
std::string git_commit();
std::string utc_now_iso8601();
std::string host_name();  // gethostname(), "" when it fails

// FNV-1a 64 of a string, as 16 lower-case hex digits.
std::string content_hash_hex(const std::string& s);
// The canonical text of a case for naming: the case JSON without name, description, expected, sut
// and comment keys, compact.
std::string canonical_case_text(const Json& case_json);
// "<property>-<disposition>-<first 12 hex digits of the hash of the canonical case text>.json":
// the same case always gets the same name, so corpora from shards merge by file name.
std::string corpus_file_name(const std::string& property, const std::string& disposition, const Json& case_json);

struct FailureRecord;  // results.h: a counterexample as a campaign found it

// What a corpus file records beyond its counterexample.
struct CorpusContext {
  // The system under test that found it: the file's "sut" {name, version}, what `recap replay
  // FILE` runs it on (not part of the case: the file name does not depend on it).
  std::string sut_name, sut_version;
  bool require_memory_savings = false;  // the oracle option the failure needs (recorded in expected)
  std::string differential;             // a differential failure: the other backend (expected.differential)
  // What found it, for the description: "" is a fuzz campaign ("recap fuzz (seed N, M shrinks)");
  // recap tradeoff names itself and the configuration (its case is not shrunk).
  std::string found_by;
};
// A counterexample as a corpus file: its case JSON with `name`, `description`, `expected`
// {disposition, property, error, api}, `sut` {name, version} when known, and `_found` {seed,
// reproduce, shrinks, reason, diagnosis} (an underscore key: a comment to the case reader). Writes
// it under `dir` (created when missing) and returns the path; "" and *error on failure.
std::string write_corpus_entry(const std::string& dir, const FailureRecord& f, const CorpusContext& context,
                               std::string* error);

// ---- coverage (QuickCheck's checkCoverage) --------------------------------------------------

struct CoverageRequirement {
  std::string label;     // a classify() label, e.g. "checkpoint+capture+dropout"
  double min_share;      // of all cases, in [0, 1]
  std::string why;       // one line, for the docs and --help
};
// The gate's requirements (justified in the README): see coverage.cpp.
const std::vector<CoverageRequirement>& default_coverage(bool policy_fixed);
// One line per unmet requirement: "coverage: checkpoint+capture+dropout in 4.2% of 300 cases, needs
// at least 10%".
std::vector<std::string> check_coverage(const std::map<std::string, int>& classification, int cases,
                                        const std::vector<CoverageRequirement>& reqs);

// ---- JUnit XML --------------------------------------------------------------------------------

struct JUnitCase {
  std::string name;
  std::string classname;
  double seconds = 0.0;
  bool skipped = false;
  std::string skip_message;
  // failure (a property failed or a verdict differed) or error (crashed)
  std::string failure_kind;  // "", "failure", "error"
  std::string failure_type;  // e.g. "failed", "incorrect", "crashed", "coverage"
  std::string message;       // one line (carries the replay command)
  std::string text;          // details
};
struct JUnitSuite {
  std::string name;
  std::vector<JUnitCase> cases;
  std::string timestamp;     // ISO 8601 without zone, as the XSD wants
  std::string hostname;
  std::map<std::string, std::string> properties;  // <properties><property name= value=/>
};
std::string xml_escape(const std::string& s);
// <testsuites> with one <testsuite> per suite (attributes the JUnit XSD requires: name, tests,
// failures, errors, skipped, time, timestamp, hostname, id, package).
std::string junit_xml(const std::vector<JUnitSuite>& suites);

// Writes text to a file; false and *error naming the file on failure.
bool write_text_file(const std::string& path, const std::string& text, std::string* error);

}  // namespace recap::reports
