// The JSON form of a command's results (results.h): what a worker hands its parent, and what the
// report's summary holds.
#include "reports/results.h"

#include <algorithm>
#include <cstdio>

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

Json job_device_to_json(const JobDevice& d) {
  Json observed = nullptr;  // what the worker said, null when it died first
  if (d.observed)
    observed = {{"cuda_visible_devices", d.visible_seen_set ? Json(d.visible_seen) : Json(nullptr)},
                {"device", d.device},
                {"uuid", d.uuid.empty() ? Json(nullptr) : Json(d.uuid)},
                {"pci_bus_id", d.pci_bus_id.empty() ? Json(nullptr) : Json(d.pci_bus_id)}};
  return {{"job", d.job},        {"shard", d.shard},     {"requested", d.requested}, {"cuda_visible_devices_set", d.visible_set},
          {"observed", observed}, {"cases", d.cases},     {"seconds", d.seconds},
          {"cases_per_minute", d.seconds > 0 ? d.cases * 60.0 / d.seconds : 0.0}};
}

JobDevice job_device_from_json(const Json& j) {
  JobDevice d;
  d.job = j.value("job", 0);
  d.shard = j.value("shard", std::string());
  d.requested = j.value("requested", -1);
  d.visible_set = j.value("cuda_visible_devices_set", std::string());
  d.cases = j.value("cases", 0);
  d.seconds = j.value("seconds", 0.0);
  const Json o = j.value("observed", Json());
  if (o.is_object()) {
    d.observed = true;
    const Json v = o.value("cuda_visible_devices", Json());
    d.visible_seen_set = v.is_string();
    if (v.is_string()) d.visible_seen = v.get<std::string>();
    d.device = o.value("device", std::string());
    if (o.value("uuid", Json()).is_string()) d.uuid = o["uuid"].get<std::string>();
    if (o.value("pci_bus_id", Json()).is_string()) d.pci_bus_id = o["pci_bus_id"].get<std::string>();
  }
  return d;
}

Json gpus_json(const std::vector<int>& requested, const std::vector<JobDevice>& jobs, double seconds) {
  if (jobs.empty()) return nullptr;
  Json js = Json::array(), devices = Json::array(), unobserved = Json::array();
  std::vector<std::string> keys;  // devices in the order of their first job
  int cases = 0;
  for (const JobDevice& d : jobs) {
    js.push_back(job_device_to_json(d));
    cases += d.cases;
    if (!d.observed) {
      unobserved.push_back(d.job);
      continue;
    }
    // a device is what the worker used: its uuid, else its bus id, else (no GPU) what it was shown
    const std::string key = !d.uuid.empty()         ? d.uuid
                            : !d.pci_bus_id.empty() ? d.pci_bus_id
                                                    : d.device + " CUDA_VISIBLE_DEVICES=" +
                                                          (d.visible_seen_set ? d.visible_seen : "(unset)");
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      devices.push_back({{"key", key},
                         {"device", d.device},
                         {"uuid", d.uuid.empty() ? Json(nullptr) : Json(d.uuid)},
                         {"pci_bus_id", d.pci_bus_id.empty() ? Json(nullptr) : Json(d.pci_bus_id)},
                         {"gpu", !d.uuid.empty() || !d.pci_bus_id.empty()},
                         {"cuda_visible_devices", Json::array()},
                         {"jobs", Json::array()},
                         {"cases", 0},
                         {"seconds", 0.0}});
      it = keys.end() - 1;
    }
    Json& dev = devices[static_cast<size_t>(it - keys.begin())];
    const Json seen = d.visible_seen_set ? Json(d.visible_seen) : Json(nullptr);
    if (std::find(dev["cuda_visible_devices"].begin(), dev["cuda_visible_devices"].end(), seen) == dev["cuda_visible_devices"].end())
      dev["cuda_visible_devices"].push_back(seen);
    dev["jobs"].push_back(d.job);
    dev["cases"] = dev["cases"].get<int>() + d.cases;
    // its jobs ran side by side: the device's time is its slowest job's
    dev["seconds"] = std::max(dev["seconds"].get<double>(), d.seconds);
  }
  for (Json& dev : devices) {
    const double s = dev["seconds"].get<double>();
    dev["cases_per_minute"] = s > 0 ? dev["cases"].get<int>() * 60.0 / s : 0.0;
  }
  return {{"requested", requested}, {"jobs", js},       {"devices", devices},
          {"unobserved_jobs", unobserved}, {"cases", cases}, {"seconds", seconds},
          {"cases_per_minute", seconds > 0 ? cases * 60.0 / seconds : 0.0}};
}

std::vector<std::string> gpu_lines(const Json& gpus) {
  std::vector<std::string> lines;
  if (!gpus.is_object()) return lines;
  auto jobs_text = [](const Json& a) {
    std::string t = a.size() == 1 ? "job " : "jobs ";
    for (size_t k = 0; k < a.size(); ++k) t += (k ? ", " : "") + std::to_string(a[k].get<int>());
    return t;
  };
  auto n_cases = [](const Json& n) { return std::to_string(n.get<int>()) + (n.get<int>() == 1 ? " case" : " cases"); };
  char rate[64];
  for (const Json& dev : gpus["devices"]) {
    std::string seen;
    for (const Json& v : dev["cuda_visible_devices"])
      seen += (seen.empty() ? "" : " and ") + (v.is_string() ? v.get<std::string>() : std::string("(unset)"));
    std::snprintf(rate, sizeof rate, "%.1f", dev["cases_per_minute"].get<double>());
    std::string what = dev["gpu"].get<bool>()
                           ? dev["key"].get<std::string>() + " (" + dev["device"].get<std::string>() + ", CUDA_VISIBLE_DEVICES=" + seen + ")"
                           : "none: " + dev["device"].get<std::string>() + " (CUDA_VISIBLE_DEVICES=" + seen + ", the worker used no GPU)";
    lines.push_back("gpu " + what + ": " + jobs_text(dev["jobs"]) + ", " + n_cases(dev["cases"]) + ", " + rate + " cases/min");
  }
  for (const Json& j : gpus["jobs"]) {  // a worker that saw another device than it was given: said, not hidden
    const Json& seen = j["observed"].is_object() ? j["observed"]["cuda_visible_devices"] : Json();
    if (j["observed"].is_object() && seen != j["cuda_visible_devices_set"])
      lines.push_back("gpu mismatch: job " + std::to_string(j["job"].get<int>()) + " was given CUDA_VISIBLE_DEVICES=" +
                      j["cuda_visible_devices_set"].get<std::string>() + ", its worker saw " +
                      (seen.is_string() ? seen.get<std::string>() : std::string("it unset")));
  }
  for (const Json& j : gpus["jobs"])
    if (j["observed"].is_null())
      lines.push_back("gpu unknown: job " + std::to_string(j["job"].get<int>()) + " (given GPU " +
                      std::to_string(j["requested"].get<int>()) +
                      ") did not say which device it used (it ended first, or its worker's hello has no visible_device), " +
                      n_cases(j["cases"]));
  std::snprintf(rate, sizeof rate, "%.1f", gpus["cases_per_minute"].get<double>());
  lines.push_back("gpus total: " + n_cases(gpus["cases"]) + ", " + rate + " cases/min");
  return lines;
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
  if (!r.job_devices.empty()) {  // --gpus: a job hands its parent what it observed of its device
    Json d = Json::array();
    for (const auto& x : r.job_devices) d.push_back(job_device_to_json(x));
    j["job_devices"] = d;
  }
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
  for (const auto& d : j.value("job_devices", Json::array())) r.job_devices.push_back(job_device_from_json(d));
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
  for (auto& d : from.job_devices) into.job_devices.push_back(std::move(d));
  if (into.gpus.empty()) into.gpus = std::move(from.gpus);
}

}  // namespace recap::reports
