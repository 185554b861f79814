// recap compare REPORT... [--known-findings FILE...] [--markdown]: the findings of several campaigns
// (recap.report/1 of fuzz or gate) as one matrix: a row per finding (its known-finding id, when a
// file names it, and its bucket), a column per system under test and version (from each report's
// context.sut), each cell the failing cases and the bucket's corpus file. What changed from one
// version to the next (a finding that appears, one that is gone) is marked. Reports of the same
// version are merged (their counts add up): shards, seeds, or campaigns with other flags of one
// version are all evidence about that version. Exit 0, or 2 for bad input; never 1: it judges
// nothing itself.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/base/json_read.h"
#include "harness/cli/cli.h"
#include "harness/cli/known_findings.h"
#include "harness/training/spec.h"
#include "properties/fuzz.h"
#include "reports/report.h"

namespace recap::cli {
namespace {

struct CompareArgs {
  std::vector<std::string> reports;
  std::vector<std::string> known_findings;
  bool markdown = false;
};

// "0.9.1" < "0.15.3" < "0.19.2": runs of digits compare as numbers, the rest as text.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      std::string x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i2, j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// A row: the known finding that accepted the cases ("" none) and their bucket.
using RowKey = std::pair<std::string, std::string>;
bool row_less(const RowKey& a, const RowKey& b) {
  if (a.first.empty() != b.first.empty()) return !a.first.empty();  // named findings first
  if (a.first != b.first) return natural_less(a.first, b.first);
  return a.second < b.second;
}

const std::vector<std::string> kDispositions = {"passed", "failed", "incorrect", "crashed", "out-of-memory", "skipped"};

// One system under test at one version: the reports of it, summed.
struct Column {
  std::string name, version;
  std::vector<std::string> files;
  int cases = 0;
  std::map<std::string, int> by_disposition;
  std::map<std::string, int> judged;  // property -> checks that judged something
  bool has_properties = false;        // summary.properties present (else every property counts as judged)
  std::map<RowKey, int> counts;
  std::map<std::string, std::string> representative;  // bucket -> corpus file name ("*" appended: not written)
  std::string label() const { return name + " " + version; }
};

int int_at(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0 || j[key].get<int64_t>() > (1 << 30))
    throw UsageError(where + ": " + key + " is not a count");
  return j[key].get<int>();
}

// Adds one report to its column (found or made in *columns). UsageError, one line, naming the file.
void add_report(const std::string& path, const std::vector<KnownFindings>& files, std::vector<Column>* columns) {
  Json rep;
  JsonLimits lim;
  lim.max_bytes = size_t{1} << 30;  // a report holds every case: as --resume reads it
  if (std::string err = read_json_file(path, &rep, lim); !err.empty()) throw UsageError("compare: " + err);
  const std::string name = "compare " + one_line(path, 120);
  if (!rep.is_object() || rep.value("schema", Json()) != Json(reports::kReportSchema))
    throw UsageError(name + ": not a recap.report/1");
  const Json summary = rep.value("summary", Json::object());
  if (!summary.is_object() || !summary.contains("buckets") || !summary["buckets"].is_object() ||
      !summary.contains("by_disposition") || !summary["by_disposition"].is_object())
    throw UsageError(name + ": no campaign summary (summary.buckets, summary.by_disposition): not a report of recap fuzz or gate");
  const Json ctx = rep.value("context", Json::object());
  const Json sut = ctx.is_object() ? ctx.value("sut", Json()) : Json();
  if (!sut.is_object() || !sut.value("name", Json()).is_string() || !sut.value("version", Json()).is_string())
    throw UsageError(name + ": context.sut has no name and version (what names its column)");
  const Json cases = rep.value("cases", Json::array());
  if (!cases.is_array()) throw UsageError(name + ": cases is not an array");
  // The files of this system (a file that names another, torch's for a megatron report, does not
  // name its cases), in the order given: those of the report's own version when there are any (its
  // triage names its cases: 0.18.2's M1+M3, not 0.16.1's M9 of the same bucket), else all of them.
  KnownFindings known;
  const std::string sut_name = sut["name"].get<std::string>(), sut_version = sut["version"].get<std::string>();
  bool own_version = false;
  for (const auto& k : files)
    own_version = own_version || (k.sut_name == sut_name && k.sut_version == sut_version);
  for (const auto& k : files)
    if ((k.sut_name.empty() || k.sut_name == sut_name) && (!own_version || k.sut_version == sut_version)) {
      known.path += (known.path.empty() ? "" : ", ") + k.path;
      known.entries.insert(known.entries.end(), k.entries.begin(), k.entries.end());
    }

  Column* col = nullptr;
  for (auto& c : *columns)
    if (c.name == sut["name"].get<std::string>() && c.version == sut["version"].get<std::string>()) col = &c;
  if (!col) {
    columns->push_back({});
    col = &columns->back();
    col->name = sut["name"].get<std::string>();
    col->version = sut["version"].get<std::string>();
  }
  col->files.push_back(path);
  col->cases += int_at(summary, "cases", name + ": summary");
  for (const auto& [d, n] : summary["by_disposition"].items())
    col->by_disposition[d] += int_at(summary["by_disposition"], d.c_str(), name + ": summary.by_disposition");
  if (summary.contains("properties") && summary["properties"].is_object()) {
    col->has_properties = true;
    for (const auto& [p, q] : summary["properties"].items())
      if (q.is_object()) col->judged[p] += int_at(q, "judged", name + ": summary.properties." + one_line(p, 40));
  }

  // Each failing case by its own case, as fuzz --known-findings judges it; the counts must be the
  // summary's, else the report is not one campaign's (cut, or edited).
  std::map<RowKey, int> rows;
  std::map<std::string, int> by_bucket;
  for (const Json& c : cases) {
    const std::string bucket = properties::bucket_of_json(c);
    if (bucket.empty()) continue;
    training::CaseSpec spec;
    std::string id;
    if (known.given() && c.contains("spec") && training::case_from_json(c["spec"], &spec).empty())
      id = accepting_finding(known, bucket, spec);
    ++rows[{id, bucket}];
    ++by_bucket[bucket];
  }
  std::map<std::string, int> want;
  for (const auto& [b, n] : summary["buckets"].items()) want[b] = int_at(summary["buckets"], b.c_str(), name + ": summary.buckets");
  if (want != by_bucket) {
    std::string b;  // the first bucket that differs
    for (const auto& [k, n] : want) if (b.empty() && (!by_bucket.count(k) || by_bucket[k] != n)) b = k;
    for (const auto& [k, n] : by_bucket) if (b.empty() && !want.count(k)) b = k;
    throw UsageError(name + ": its cases give " + std::to_string(by_bucket[b]) + " failing cases in bucket " +
                     one_line(b, 80) + ", its summary.buckets " + std::to_string(want[b]));
  }
  for (const auto& [k, n] : rows) col->counts[k] += n;

  // The bucket's counterexample: the file written, else (known, flaky: not written) the name its
  // case has (reports::corpus_file_name, the name fuzz would write it under).
  const Json failures = summary.value("failures", Json::array());
  for (const Json& f : failures.is_array() ? failures : Json::array()) {
    if (!f.is_object()) continue;
    const std::string b = f.value("bucket", Json("")).is_string() ? f.value("bucket", "") : "";
    if (b.empty() || col->representative.count(b)) continue;
    const std::string written = f.value("corpus_file", Json("")).is_string() ? f.value("corpus_file", "") : "";
    if (!written.empty()) {
      col->representative[b] = std::filesystem::path(written).filename().string();
    } else if (f.contains("case") && f["case"].is_object() && f.value("property", Json()).is_string() &&
               f.value("disposition", Json()).is_string()) {
      col->representative[b] = reports::corpus_file_name(f["property"], f["disposition"], f["case"]) + "*";
    }
  }
}

// A cell's text in Markdown: | would end the cell, * could start emphasis.
std::string markdown_escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '|' || c == '*' ? std::string("\\") + c : std::string(1, c);
  return o;
}

// Prints rows of cells as a table: plain text (columns padded, two spaces apart) or Markdown.
void print_table(const std::vector<std::vector<std::string>>& rows, bool markdown) {
  if (markdown) {
    auto cell = [](const std::string& s) { return markdown_escape(s); };
    for (size_t r = 0; r < rows.size(); ++r) {
      std::string line = "|";
      for (const auto& c : rows[r]) line += " " + cell(c) + " |";
      std::printf("%s\n", line.c_str());
      if (r == 0) {
        line = "|";
        for (size_t i = 0; i < rows[r].size(); ++i) line += "---|";
        std::printf("%s\n", line.c_str());
      }
    }
    return;
  }
  std::vector<size_t> width(rows.empty() ? 0 : rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string join_paths(const std::vector<KnownFindings>& files) {
  std::string s;
  for (const auto& k : files) s += (s.empty() ? "" : ", ") + k.path;
  return s;
}

int compare(const CompareArgs& a) {
  // The first finding (files in the order given) that accepts a case names it: one file per
  // version may define the same id.
  std::vector<KnownFindings> files;
  for (const auto& p : a.known_findings) files.push_back(read_known_findings(p));
  std::set<std::string> seen;
  for (const auto& p : a.reports) {
    std::error_code ec;
    const auto canon = std::filesystem::weakly_canonical(p, ec).string();
    if (!seen.insert(ec ? p : canon).second)
      throw UsageError("compare: " + one_line(p, 120) + " given twice (its cases would count twice)");
  }
  std::vector<Column> cols;
  for (const auto& p : a.reports) add_report(p, files, &cols);
  std::stable_sort(cols.begin(), cols.end(), [](const Column& x, const Column& y) {
    return x.name != y.name ? x.name < y.name : natural_less(x.version, y.version);
  });

  std::vector<RowKey> keys;
  for (const auto& c : cols)
    for (const auto& [k, n] : c.counts)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  std::sort(keys.begin(), keys.end(), row_less);

  std::vector<std::vector<std::string>> t;
  std::vector<std::string> head = {"finding", "bucket"};
  for (const auto& c : cols) head.push_back(c.label());
  head.push_back("appears in / gone in");
  t.push_back(head);
  auto summary_row = [&](const std::string& what, auto value) {
    std::vector<std::string> r = {what, ""};
    for (const auto& c : cols) r.push_back(std::to_string(value(c)));
    r.push_back("");
    t.push_back(r);
  };
  summary_row("reports", [](const Column& c) { return c.files.size(); });
  summary_row("cases run", [](const Column& c) { return c.cases; });
  for (const auto& d : kDispositions)
    summary_row(d, [&](const Column& c) { return c.by_disposition.count(d) ? c.by_disposition.at(d) : 0; });
  for (const auto& k : keys) {
    const std::string property = k.second.substr(0, k.second.find('/'));
    std::vector<std::string> r = {k.first.empty() ? "-" : k.first, k.second};
    std::string changes;
    int before = -1;  // the count in the last column that could have shown it; -1: none yet
    for (size_t i = 0; i < cols.size(); ++i) {
      const Column& c = cols[i];
      if (i > 0 && c.name != cols[i - 1].name) before = -1;  // another system: no "appears" or "gone" across
      const int n = c.counts.count(k) ? c.counts.at(k) : 0;
      const bool judged = c.cases > 0 && (!c.has_properties || (c.judged.count(property) && c.judged.at(property) > 0));
      if (!judged) {  // absence here says nothing: no case ran, or none judged the bucket's property
        r.push_back(c.cases == 0 ? "not run" : "not judged");
        continue;
      }
      if (n > 0) {
        const auto f = c.representative.find(k.second);
        r.push_back(std::to_string(n) + (f == c.representative.end() ? "" : " " + f->second));
      } else {
        r.push_back(before > 0 ? "gone" : "-");
      }
      if (before == 0 && n > 0) changes += (changes.empty() ? "" : "; ") + ("appears in " + c.label());
      if (before > 0 && n == 0) changes += (changes.empty() ? "" : "; ") + ("gone in " + c.label());
      before = n;
    }
    r.push_back(changes);
    t.push_back(r);
  }

  std::printf("recap compare: %zu report%s, %zu column%s%s\n", a.reports.size(), a.reports.size() == 1 ? "" : "s",
              cols.size(), cols.size() == 1 ? "" : "s",
              files.empty() ? "" : (", known findings from " + join_paths(files)).c_str());
  if (a.markdown) std::printf("\n");
  print_table(t, a.markdown);
  if (a.markdown) std::printf("\n");
  const std::string legend =
      "Cells: failing cases, and the bucket's counterexample (* not written by its campaign, known or flaky: the "
      "name of its case's file); - none; gone: none where the previous column had some; not judged: no case judged "
      "the bucket's property.";
  std::printf("%s\n", a.markdown ? markdown_escape(legend).c_str() : legend.c_str());
  if (!files.empty()) {
    std::vector<std::string> absent;  // ids no column's cases were accepted by
    for (const auto& file : files)
      for (const auto& e : file.entries) {
        bool any = false;
        for (const auto& k : keys) any = any || k.first == e.id;
        if (!any && std::find(absent.begin(), absent.end(), e.id) == absent.end()) absent.push_back(e.id);
      }
    std::sort(absent.begin(), absent.end(), natural_less);
    std::string s;
    for (const auto& id : absent) s += (s.empty() ? "" : ", ") + id;
    if (!absent.empty()) std::printf("Known findings in no report: %s\n", s.c_str());
  }
  return kExitOk;
}

}  // namespace

void add_compare_command(CLI::App& app, Runner* runner) {
  auto [cmd, a] = add_command<CompareArgs>(app, runner, compare,
      "compare",
      "The findings of several reports (recap.report/1 of fuzz or gate) as a matrix: a row per finding (its known "
      "finding id and bucket), a column per system under test and version (reports of one version are merged), each "
      "cell the failing cases and the bucket's corpus file; where a finding appears or is gone is marked. Exit 0, "
      "2 bad usage or input.");
  cmd->add_option("reports", a->reports, "Reports (recap.report/1 JSON of recap fuzz or gate)")->required();
  cmd->add_option("--known-findings", a->known_findings,
                  "recap.known-findings/1 files (one per version, corpus/known-findings/*.json): a failing case is "
                  "named by the first finding, in the order given, whose buckets and configuration accept it; a "
                  "report is judged by the files of its own version (sut.version) alone when any is given");
  cmd->add_flag("--markdown", a->markdown, "Print the table as Markdown (the README's)");
}

}  // namespace recap::cli
