// `recap report`: campaign and gate reports (recap.report/1) and trade-off reports
// (recap.tradeoff/1) read for a reader: loaded and labelled here, drawn as one self-contained HTML
// page (html.cpp) and as plain-text tables (text.cpp). What both draw is computed here once: the
// campaign's buckets, properties and coverage, and the trade-off reports compared size by size.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/base/json.h"
#include "reports/tradeoff.h"

namespace recap::reports {

// ---- campaign and gate reports ------------------------------------------------------------------

struct BucketRow {
  std::string bucket;  // property/disposition/api/cuda_error/quantity
  int cases = 0;       // failing cases in it
  bool known = false;  // every failing case accepted by --known-findings
  std::string accepted;  // "M1 12, M3 2": the known findings that accepted its cases
  int new_cases = -1;    // cases no known finding accepted; -1 without --known-findings
  // its counterexample (the lowest chunk's), when the summary lists one
  std::string corpus_file, replay_command, reproduce, reason, diagnosis, flaky;
};
struct PropertyRow {
  std::string property;
  int judged = 0, skipped = 0;
  std::map<std::string, int> by_disposition;          // every disposition's count
  std::vector<std::pair<std::string, int>> skip_reasons;  // the commonest reasons (from the cases), most first
};
struct CoverageRow {
  std::string label, why;
  double min_share = 0, share = 0;
  int count = 0;
  bool met = true;
};
struct ReplayRow {
  std::string file, disposition, expected, mismatch, replay_command;
  bool as_expected = true;
};
struct CampaignView {
  // the run context
  std::string command, recap_version, git_commit, backend, device, seed, policy, shard, started_utc, host;
  std::string sut_name, sut_version, sut_device, known_findings_file;
  int cases_requested = 0, jobs = 0;
  // the summary
  int cases = 0, judged_cases = 0, exit_code = 0;
  double seconds = 0, cases_per_minute = 0;
  std::string interrupted;
  std::map<std::string, int> by_disposition;
  std::vector<BucketRow> buckets;
  std::vector<PropertyRow> properties;
  bool has_coverage = false, coverage_checked = false, coverage_ok = true;
  std::vector<CoverageRow> coverage;
  std::vector<std::string> shortfalls, findings, crashes;
  std::vector<ReplayRow> replays;
};
// What a campaign report says, read leniently (a field of the wrong type is left empty); only a
// report without its context and summary objects is refused ("" or one line).
std::string campaign_view(const Json& report, CampaignView* out);

// One file given to `recap report`.
struct LoadedReport {
  std::string file;    // as given on the command line
  std::string schema;  // kReportSchema or kTradeoffSchema
  Json json;           // the document (a campaign report is drawn from it directly)
  TradeoffReport tradeoff;  // when schema is kTradeoffSchema
  CampaignView campaign;    // when schema is kReportSchema
  std::string label;   // names it among the others: "megatron 0.19.2 (tradeoff-small.json)"
};
// Reads one report (at most 256 MiB: a campaign report keeps every case). "" or one line naming
// the file and the problem: a missing file, malformed JSON, an unknown schema, a trade-off report
// that does not follow its schema.
std::string load_report(const std::string& path, LoadedReport* out);
// Labels every report by its system under test and file, unique among them.
void label_reports(std::vector<LoadedReport>* reports);

// ---- trade-off reports compared -----------------------------------------------------------------

// One size found in two or more trade-off reports: per configuration name (in the order first
// seen), that configuration in each report, or null where a report lacks it.
struct Comparison {
  std::string size;
  std::vector<size_t> reports;  // indices of the loaded reports, in command-line order
  struct Row {
    std::string configuration;
    std::vector<const Configuration*> in;  // one per entry of `reports`
  };
  std::vector<Row> rows;
};
std::vector<Comparison> compare_tradeoffs(const std::vector<LoadedReport>& reports);

// ---- numbers as the page and the table write them --------------------------------------------

// A byte unit for a column: the largest of B, KiB, MiB, GiB in which its largest value is >= 1.
struct ByteUnit {
  const char* name;
  double bytes;
  int decimals;
};
ByteUnit byte_unit(const std::vector<std::optional<int64_t>>& values);
// The units of a comparison's two byte columns (peak allocated, activations in graphs), over
// every configuration of every report in it: the page and the text table print the same.
struct ComparisonUnits {
  ByteUnit allocated, in_graphs;
};
ComparisonUnits comparison_units(const Comparison& c);
std::string bytes_in(int64_t b, const ByteUnit& u);  // "24.1"
std::string with_commas(int64_t v);                  // "25,231,360"
std::string fixed(double v, int decimals);           // "1.83"; "nan", "inf"
std::string percent(double fraction, int decimals);  // 0.317 -> "+31.7%"
// "M1 recompute_on_off/incorrect///grad (corpus/...json)"; "" without findings.
std::string finding_text(const TradeoffFinding& f);
// The SUT's choices as "style=reentrant, recompute=graph-safe".
std::string choice_text(const Configuration& c);
// "11.27 GFLOP", "26.40 TFLOP".
std::string flops_text(double flops);
// "8 layers, hidden 256, 4 heads, seq 256, micro-batch 1, 1 microbatch, bf16".
std::string size_text(const TradeoffSize& s);
// One line per judged size of a size's configurations other than the size itself (recap tradeoff
// --judge-budget): "3 of 4 configurations judged at hidden 16, 4 heads, ffn 64, 8 tokens, not at
// this size (REASON); their step times and memory are this size's". Empty when every judged
// configuration was judged at the size itself.
std::vector<std::string> judged_size_notes(const TradeoffSize& s);

// ---- the renderers ------------------------------------------------------------------------------

// The page: every report, its tables and plots, comparisons, all inline. `plotly_js` is the
// plotting library's source, inlined so that the page renders without the network.
std::string render_html(const std::vector<LoadedReport>& reports, const std::string& plotly_js);
// The same content as plain-text tables, for a terminal.
std::string render_text(const std::vector<LoadedReport>& reports);

}  // namespace recap::reports
