// --known-findings FILE: a framework's known bugs, each as the buckets it shows as AND the case
// configuration that defines it (schema recap.known-findings/1, reports/schema/
// recap.known-findings.schema.json; docs/DESIGN.md, "Known findings"). A failing case is accepted
// iff its bucket is one of an entry's buckets and its own case (as generated, before any shrink)
// satisfies that entry's `when`; a bucket is known only if every failing case in it is accepted.
// A bucket alone hides regressions that land in it (a tracker whose set_states is a no-op fails in
// M1's bucket); the configuration keeps them new.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/base/json.h"
#include "harness/training/spec.h"

namespace recap::cli {

// One condition of a `when` clause: the case's values for `key` (one for a case field, any number
// for a derived "any layer" feature) must meet `allowed`.
struct KnownCondition {
  std::string key;
  std::set<std::string> allowed;  // names; a boolean feature has "true" or "false"
};

struct KnownFinding {
  std::string id, summary;
  std::set<std::string> buckets;
  // Any of the clauses (a `when` array), each all of its conditions; one empty clause: every case.
  std::vector<std::vector<KnownCondition>> when;
};

struct KnownFindings {
  std::string path;  // "" when no file was given
  std::string sut_name;  // the file's "sut".name, "" when it names none
  std::string sut_version;  // the file's "sut".version, "" when it names none
  std::vector<KnownFinding> entries;
  bool given() const { return !path.empty(); }
};

// Reads and validates FILE; UsageError, one line naming the problem ("known.json: findings[2].when:
// unknown feature 'graphd'"), for malformed JSON, an unknown field or feature, a value that is not a
// recap.case/1 value, a duplicate id, a string that is not a bucket, or the old one-bucket-per-line
// text. Empty path: none.
KnownFindings read_known_findings(const std::string& path);

// The case's value(s) for each key a `when` may name (case fields and derived features).
std::map<std::string, std::set<std::string>> case_features(const training::CaseSpec& spec);

// The id of the first entry that accepts a case failing in `bucket`, or "" (a new failure).
std::string accepting_finding(const KnownFindings& known, const std::string& bucket, const training::CaseSpec& spec);

}  // namespace recap::cli
