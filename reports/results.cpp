// The JSON form of a command's results (results.h): what a worker hands its parent, and what the
// report's summary holds.
#include "reports/results.h"

#include <algorithm>

namespace recap::reports {

std::string replay_command(const std::string& path) { return "recap replay " + path; }

int judged_cases(const CampaignResult& r) {
  auto it = r.by_disposition.find("skipped");
  return r.cases - (it == r.by_disposition.end() ? 0 : it->second);
}

Json property_counts_json(const CampaignResult& r) {
  std::map<std::string, std::map<std::string, int>> sum;
  for (const auto& [c, t] : r.chunks)
    for (const auto& [p, by] : t.by_property)
      for (const auto& [d, n] : by) sum[p][d] += n;
  Json j = Json::object();
  for (const auto& [p, by] : sum) {
    Json q = {{"judged", 0}, {"skipped", 0}};
    for (const auto& [d, n] : by) {
      q[d] = n;
      if (d == "passed" || d == "failed" || d == "incorrect" || d == "crashed") q["judged"] = q["judged"].get<int>() + n;
    }
    j[p] = q;
  }
  return j;
}

Json failure_to_json(const FailureRecord& f) {
  Json j = {{"property", f.property}, {"disposition", f.disposition}, {"error", f.error},
            {"api", f.api},           {"reason", f.reason},           {"reproduce", f.reproduce},
            {"seed", f.seed},         {"shrinks", f.shrinks},         {"corpus_file", f.corpus_path},
            {"bucket", f.bucket},     {"chunk", f.chunk},             {"known", f.known}};
  if (!f.flaky.empty()) j["flaky"] = f.flaky;
  if (!f.diagnosis.empty()) j["diagnosis"] = f.diagnosis;
  if (!f.corpus_path.empty()) j["replay_command"] = replay_command(f.corpus_path);
  j["case"] = f.case_json;
  j["report"] = f.report;
  return j;
}

FailureRecord failure_from_json(const Json& j) {
  FailureRecord f;
  f.property = j.value("property", "");
  f.disposition = j.value("disposition", "");
  f.error = j.value("error", "");
  f.api = j.value("api", "");
  f.reason = j.value("reason", "");
  f.reproduce = j.value("reproduce", "");
  f.seed = j.value("seed", uint64_t{0});
  f.shrinks = j.value("shrinks", 0);
  f.corpus_path = j.value("corpus_file", "");
  f.bucket = j.value("bucket", "");
  f.chunk = j.value("chunk", 0);
  f.known = j.value("known", false);
  f.flaky = j.value("flaky", "");
  f.diagnosis = j.value("diagnosis", "");
  f.case_json = j.value("case", Json());
  f.report = j.value("report", Json());
  return f;
}


namespace {
void add_tally(FindingTally* into, const FindingTally& t) {
  into->min_bytes = into->cases == 0 ? t.min_bytes : std::min(into->min_bytes, t.min_bytes);
  into->max_bytes = into->cases == 0 ? t.max_bytes : std::max(into->max_bytes, t.max_bytes);
  into->cases += t.cases;
}
// A tally as [cases, min bytes, max bytes], by finding.
Json tallies_to_json(const std::map<std::string, FindingTally>& tallies) {
  Json t = Json::object();
  for (const auto& [k, v] : tallies) t[k] = {v.cases, v.min_bytes, v.max_bytes};
  return t;
}
std::map<std::string, FindingTally> tallies_from_json(const Json& j) {
  std::map<std::string, FindingTally> t;
  for (const auto& [k, v] : j.items()) t[k] = {v.at(0).get<int>(), v.at(1).get<int64_t>(), v.at(2).get<int64_t>()};
  return t;
}
}  // namespace

void tally_finding(std::map<std::string, FindingTally>* tallies, const std::string& key, int64_t bytes) {
  add_tally(&(*tallies)[key], {1, bytes, bytes});
}

std::vector<std::string> finding_lines(const std::map<std::string, FindingTally>& tallies) {
  std::vector<std::string> lines;
  for (const auto& [key, t] : tallies) {
    std::string line = key + ": " + std::to_string(t.cases) + (t.cases == 1 ? " case" : " cases");
    if (t.max_bytes > 0) line += ", " + std::to_string(t.min_bytes) + " to " + std::to_string(t.max_bytes) + " bytes";
    lines.push_back(line);
  }
  return lines;
}

Json chunk_totals_to_json(int chunk, const ChunkTotals& t) {
  return {{"chunk", chunk}, {"cases", t.cases}, {"complete", t.complete}, {"by_disposition", t.by_disposition},
          {"classification", t.classification}, {"buckets", t.buckets}, {"finding_tallies", tallies_to_json(t.finding_tallies)},
          {"by_property", t.by_property}};
}

std::pair<int, ChunkTotals> chunk_totals_from_json(const Json& j) {
  ChunkTotals t;
  try {
    t.cases = j.at("cases").get<int>();
    t.complete = j.at("complete").get<bool>();
    t.by_disposition = j.at("by_disposition").get<std::map<std::string, int>>();
    t.classification = j.at("classification").get<std::map<std::string, int>>();
    t.buckets = j.at("buckets").get<std::map<std::string, int>>();
    // Absent from reports written before it: their chunks count no property.
    t.by_property = j.value("by_property", std::map<std::string, std::map<std::string, int>>{});
    t.finding_tallies = tallies_from_json(j.at("finding_tallies"));
    return {j.at("chunk").get<int>(), t};
  } catch (const Json::exception& e) {
    throw std::runtime_error(std::string("a chunk's totals: ") + e.what());
  }
}

Json campaign_to_json(const CampaignResult& r) {
  Json j = {{"cases", r.cases},
            {"by_disposition", r.by_disposition},
            {"classification", r.classification},
            {"findings", r.findings},
            {"buckets", r.buckets},
            {"finding_tallies", tallies_to_json(r.finding_tallies)},
            {"report_chunks", r.report_chunks},
            {"seconds", r.seconds},
            {"crashes", r.crashes}};
  Json ch = Json::array();
  for (const auto& [c, t] : r.chunks) ch.push_back(chunk_totals_to_json(c, t));
  j["chunks"] = ch;
  Json f = Json::array();
  for (const auto& x : r.failures) f.push_back(failure_to_json(x));
  j["failures"] = f;
  j["reports"] = r.reports;
  return j;
}

CampaignResult campaign_from_json(const Json& j) {
  CampaignResult r;
  r.cases = j.value("cases", 0);
  r.by_disposition = j.value("by_disposition", std::map<std::string, int>{});
  r.classification = j.value("classification", std::map<std::string, int>{});
  r.findings = j.value("findings", std::vector<std::string>{});
  r.buckets = j.value("buckets", std::map<std::string, int>{});
  r.finding_tallies = tallies_from_json(j.value("finding_tallies", Json::object()));
  r.report_chunks = j.value("report_chunks", std::vector<int>{});
  r.seconds = j.value("seconds", 0.0);
  r.crashes = j.value("crashes", std::vector<std::string>{});
  for (const auto& c : j.value("chunks", Json::array())) r.chunks.insert(chunk_totals_from_json(c));
  for (const auto& f : j.value("failures", Json::array())) r.failures.push_back(failure_from_json(f));
  for (const auto& c : j.value("reports", Json::array())) r.reports.push_back(c);
  return r;
}

CampaignResult campaign_from_report(const Json& report) {
  const Json summary = report.value("summary", Json::object());
  if (!summary.is_object() || !summary.contains("chunks") || !summary.contains("report_chunks"))
    throw std::runtime_error("no chunk totals (a report of recap fuzz from before --resume, or of another command)");
  CampaignResult r;
  try {
    Json parts = summary;  // campaign_from_json's field names, as the summary has them
    parts["reports"] = report.value("cases", Json::array());
    r = campaign_from_json(parts);
    // A worker that died adds cases to the summary's counts that no chunk holds, and no finding
    // tally: the tallies are the chunks' alone, as in the campaign that wrote the report.
    r.finding_tallies.clear();
    for (const auto& [c, t] : r.chunks)
      for (const auto& [k, v] : t.finding_tallies) add_tally(&r.finding_tallies[k], v);
    if (summary.contains("known_findings")) {
      const Json& k = summary.at("known_findings");
      r.known_findings = k.at("file").get<std::string>();
      for (const auto& [b, j] : k.at("buckets").items()) {
        r.judged[b].accepted = j.at("accepted").get<std::map<std::string, int>>();
        r.judged[b].new_cases = j.at("new").get<int>();
      }
    }
  } catch (const Json::exception& e) {
    throw std::runtime_error(e.what());
  }
  if (r.report_chunks.size() != r.reports.size()) throw std::runtime_error("report_chunks does not match its cases");
  return r;
}

void sort_reports_by_chunk(CampaignResult& r) {
  if (r.report_chunks.size() != r.reports.size()) return;
  std::vector<size_t> idx(r.reports.size());
  for (size_t k = 0; k < idx.size(); ++k) idx[k] = k;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return r.report_chunks[a] < r.report_chunks[b]; });
  std::vector<Json> reports;
  std::vector<int> chunks;
  for (size_t k : idx) {
    reports.push_back(std::move(r.reports[k]));
    chunks.push_back(r.report_chunks[k]);
  }
  r.reports = std::move(reports);
  r.report_chunks = std::move(chunks);
}

void sum_chunks(CampaignResult& r) {
  r.cases = 0;
  r.by_disposition.clear();
  r.classification.clear();
  r.buckets.clear();
  r.finding_tallies.clear();
  for (const auto& [c, t] : r.chunks) {
    r.cases += t.cases;
    for (const auto& [k, v] : t.by_disposition) r.by_disposition[k] += v;
    for (const auto& [k, v] : t.classification) r.classification[k] += v;
    for (const auto& [k, v] : t.buckets) r.buckets[k] += v;
    for (const auto& [k, v] : t.finding_tallies) add_tally(&r.finding_tallies[k], v);
  }
  r.findings = finding_lines(r.finding_tallies);
}

void merge_into(CampaignResult& into, CampaignResult&& from) {
  into.cases += from.cases;
  for (auto& [k, v] : from.by_disposition) into.by_disposition[k] += v;
  for (auto& [k, v] : from.classification) into.classification[k] += v;
  for (auto& [k, t] : from.finding_tallies) add_tally(&into.finding_tallies[k], t);
  into.findings = finding_lines(into.finding_tallies);
  for (auto& [k, v] : from.buckets) into.buckets[k] += v;
  for (int c : from.report_chunks) into.report_chunks.push_back(c);
  for (auto& c : from.reports) into.reports.push_back(std::move(c));
  for (auto& f : from.failures) into.failures.push_back(std::move(f));
  for (auto& c : from.crashes) into.crashes.push_back(std::move(c));
  for (auto& [c, t] : from.chunks) into.chunks[c] = std::move(t);
}

}  // namespace recap::reports
