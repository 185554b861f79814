// Reporters, in the manner of Google Benchmark's: each turns a command's Outcome into one output
// (the console summary, the JSON report, JUnit XML), behind one interface, so a command picks the
// ones its flags ask for and hands each the same Outcome.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "reports/results.h"

namespace recap::reports {

// A report could not be written: "--report: cannot write 'x': No space left on device".
struct WriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual void report(const Outcome& o) = 0;
};

// The campaign summary on stdout: counts by disposition, classification, findings, crashes,
// counterexamples with their replay commands, throughput.
class ConsoleReporter : public Reporter {
 public:
  void report(const Outcome& o) override;
};

// The JSON report (schema recap.report/1) written to `path`; `flag` names it in errors.
class JsonReporter : public Reporter {
 public:
  JsonReporter(std::string path, std::string flag = "--report") : path_(std::move(path)), flag_(std::move(flag)) {}
  void report(const Outcome& o) override;

 private:
  std::string path_, flag_;
};

// JUnit XML written to `path`: suite recap.corpus (one test case per replayed file),
// recap.properties (one per property, and one per crashed worker), recap.coverage (one per
// requirement), each where the outcome has it.
class JUnitReporter : public Reporter {
 public:
  explicit JUnitReporter(std::string path) : path_(std::move(path)) {}
  void report(const Outcome& o) override;

 private:
  std::string path_;
};

// The report as JSON (what JsonReporter writes).
Json report_json(const Outcome& o);
// The summary part of it (counts, findings, failures without their case reports, throughput).
Json campaign_summary_json(const CampaignResult& r);
JUnitSuite properties_suite(const Outcome& o);

// Writes text to path (atomically, write_text_file); throws WriteError naming `flag` on failure.
void write_or_throw(const std::string& path, const std::string& text, const std::string& flag);

}  // namespace recap::reports
