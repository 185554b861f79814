#include "reports/render.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "harness/base/json_read.h"
#include "reports/report.h"

namespace recap::reports {

std::string load_report(const std::string& path, LoadedReport* out) {
  Json j;
  // A campaign report keeps every case's spec and checks: a few MB for 2,000 cases.
  JsonLimits lim;
  lim.max_bytes = size_t{256} << 20;
  if (std::string err = read_json_file(path, &j, lim); !err.empty()) return err;
  const std::string name = one_line(path, 120);
  const std::string known = "recap report reads " + std::string(kReportSchema) + " and " + kTradeoffSchema;
  if (!j.is_object() || !j.contains("schema")) return name + ": no \"schema\" field (" + known + ")";
  if (!j.at("schema").is_string()) return name + ": \"schema\" must be a string (" + known + ")";
  const std::string schema = j.at("schema").get<std::string>();
  out->file = path;
  out->schema = schema;
  if (schema == kTradeoffSchema) {
    if (std::string err = read_tradeoff(j, &out->tradeoff); !err.empty()) return name + ": " + err;
  } else if (schema == kReportSchema) {
    if (std::string err = campaign_view(j, &out->campaign); !err.empty()) return name + ": " + err;
  } else {
    return name + ": unknown schema '" + one_line(schema, 60) + "' (" + known + ")";
  }
  out->json = std::move(j);
  return "";
}

namespace {

// Lenient getters: a campaign report comes from recap, but a hand-edited one must not crash the
// renderer; a field of another type reads as absent.
std::string str(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}
int64_t integer(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_number_integer() ? j.at(key).get<int64_t>() : 0;
}
double number(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : 0.0;
}
const Json& member(const Json& j, const char* key) {
  static const Json null;
  return j.is_object() && j.contains(key) ? j.at(key) : null;
}
std::map<std::string, int> counts(const Json& j) {
  std::map<std::string, int> m;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.value().is_number_integer()) m[it.key()] = static_cast<int>(it.value().get<int64_t>());
  return m;
}
std::string sut_label(const std::string& name, const std::string& version) {
  return version.empty() ? name : name + " " + version;
}

}  // namespace

void label_reports(std::vector<LoadedReport>* reports) {
  std::map<std::string, int> seen;
  for (auto& r : *reports) {
    std::string sut;
    if (r.schema == kTradeoffSchema) {
      sut = sut_label(r.tradeoff.context.sut_name, r.tradeoff.context.sut_version);
    } else {
      const Json& c = member(r.json, "context");
      const Json& s = member(c, "sut");
      sut = str(c, "command") + " on " + (s.is_object() ? sut_label(str(s, "name"), str(s, "version")) : "recap");
    }
    r.label = sut + " (" + std::filesystem::path(r.file).filename().string() + ")";
    if (int n = ++seen[r.label]; n > 1) r.label += " #" + std::to_string(n);
  }
}

std::string campaign_view(const Json& report, CampaignView* out) {
  const Json& c = member(report, "context");
  const Json& s = member(report, "summary");
  if (!c.is_object()) return "context: must be an object";
  if (!s.is_object()) return "summary: must be an object";
  CampaignView v;
  v.command = str(c, "command");
  v.recap_version = str(c, "recap_version");
  v.git_commit = str(c, "git_commit");
  v.backend = str(c, "backend");
  v.device = str(c, "device");
  if (member(c, "seed").is_number_unsigned() || member(c, "seed").is_number_integer())
    v.seed = std::to_string(member(c, "seed").get<uint64_t>());
  v.policy = member(c, "policy").is_string() ? str(c, "policy") : "drawn";
  v.shard = str(c, "shard");
  v.started_utc = str(c, "started_utc");
  v.host = str(c, "host");
  v.cases_requested = static_cast<int>(integer(c, "cases_requested"));
  v.jobs = static_cast<int>(integer(c, "jobs"));
  const Json& sut = member(c, "sut");
  v.sut_name = sut.is_object() ? str(sut, "name") : "recap";
  v.sut_version = str(sut, "version");
  v.sut_device = str(sut, "device");

  v.cases = static_cast<int>(integer(s, "cases"));
  v.judged_cases = static_cast<int>(integer(s, "judged_cases"));
  v.exit_code = static_cast<int>(integer(s, "exit_code"));
  v.seconds = number(s, "seconds");
  v.cases_per_minute = number(s, "cases_per_minute");
  v.interrupted = str(s, "interrupted");
  v.by_disposition = counts(member(s, "by_disposition"));
  for (const char* key : {"findings", "crashes"}) {
    const Json& a = member(s, key);
    if (a.is_array())
      for (const auto& x : a)
        if (x.is_string()) (std::string(key) == "findings" ? v.findings : v.crashes).push_back(x.get<std::string>());
  }

  // buckets: the counts, what --known-findings said of each, and its counterexample
  const Json& kf = member(s, "known_findings");
  v.known_findings_file = str(kf, "file");
  const Json& kb = member(kf, "buckets");
  const Json& failures = member(s, "failures");
  for (const auto& [bucket, n] : counts(member(s, "buckets"))) {
    BucketRow b;
    b.bucket = bucket;
    b.cases = n;
    if (const Json& k = member(kb, bucket.c_str()); k.is_object()) {
      b.known = member(k, "known").is_boolean() && k.at("known").get<bool>();
      b.new_cases = static_cast<int>(integer(k, "new"));
      for (const auto& [id, m] : counts(member(k, "accepted")))
        b.accepted += (b.accepted.empty() ? "" : ", ") + id + " " + std::to_string(m);
    }
    if (failures.is_array())
      for (const auto& f : failures)
        if (str(f, "bucket") == bucket) {
          b.corpus_file = str(f, "corpus_file");
          b.replay_command = str(f, "replay_command");
          b.reproduce = str(f, "reproduce");
          b.reason = str(f, "reason");
          b.diagnosis = str(f, "diagnosis");
          b.flaky = str(f, "flaky");
          break;
        }
    v.buckets.push_back(b);
  }

  // properties: judged and skipped, and why they were skipped (from the cases)
  std::map<std::string, std::map<std::string, int>> reasons;
  if (const Json& cases = member(report, "cases"); cases.is_array())
    for (const auto& k : cases)
      if (const Json& checks = member(k, "checks"); checks.is_array())
        for (const auto& ch : checks)
          if (str(ch, "disposition") == "skipped") ++reasons[str(ch, "property")][str(ch, "reason")];
  const Json& props = member(s, "properties");
  if (props.is_object())
    for (auto it = props.begin(); it != props.end(); ++it) {
      PropertyRow p;
      p.property = it.key();
      p.by_disposition = counts(it.value());
      p.judged = p.by_disposition.count("judged") ? p.by_disposition["judged"] : 0;
      p.skipped = p.by_disposition.count("skipped") ? p.by_disposition["skipped"] : 0;
      p.by_disposition.erase("judged");
      p.by_disposition.erase("skipped");
      std::vector<std::pair<std::string, int>> r(reasons[p.property].begin(), reasons[p.property].end());
      std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      if (r.size() > 3) r.resize(3);
      p.skip_reasons = r;
      v.properties.push_back(p);
    }

  if (const Json& cov = member(s, "coverage"); cov.is_object()) {
    v.has_coverage = true;
    v.coverage_checked = member(cov, "checked").is_boolean() && cov.at("checked").get<bool>();
    v.coverage_ok = !member(cov, "ok").is_boolean() || cov.at("ok").get<bool>();
    if (const Json& req = member(cov, "requirements"); req.is_array())
      for (const auto& q : req)
        v.coverage.push_back({str(q, "label"), str(q, "why"), number(q, "min_share"), number(q, "share"),
                              static_cast<int>(integer(q, "count")),
                              !member(q, "met").is_boolean() || q.at("met").get<bool>()});
    if (const Json& sf = member(cov, "shortfalls"); sf.is_array())
      for (const auto& x : sf)
        if (x.is_string()) v.shortfalls.push_back(x.get<std::string>());
  }

  if (const Json& rp = member(report, "replays"); rp.is_array())
    for (const auto& r : rp) {
      ReplayRow row;
      row.file = str(r, "file");
      row.disposition = str(r, "disposition");
      const Json& e = member(r, "expected");
      row.expected = e.is_object() ? str(e, "disposition") + (str(e, "property").empty() ? "" : " (" + str(e, "property") + ")")
                                   : str(r, "expected");
      row.as_expected = !member(r, "as_expected").is_boolean() || r.at("as_expected").get<bool>();
      row.mismatch = str(r, "mismatch");
      row.replay_command = str(r, "replay_command");
      v.replays.push_back(row);
    }
  *out = std::move(v);
  return "";
}

std::vector<Comparison> compare_tradeoffs(const std::vector<LoadedReport>& reports) {
  std::vector<std::string> sizes;  // in the order first seen
  for (const auto& r : reports)
    if (r.schema == kTradeoffSchema)
      for (const auto& s : r.tradeoff.sizes)
        if (std::find(sizes.begin(), sizes.end(), s.name) == sizes.end()) sizes.push_back(s.name);
  std::vector<Comparison> out;
  for (const auto& name : sizes) {
    Comparison c;
    c.size = name;
    std::vector<const TradeoffSize*> in;
    for (size_t i = 0; i < reports.size(); ++i)
      if (reports[i].schema == kTradeoffSchema)
        for (const auto& s : reports[i].tradeoff.sizes)
          if (s.name == name) {
            c.reports.push_back(i);
            in.push_back(&s);
          }
    if (c.reports.size() < 2) continue;  // nothing to compare it with
    for (const TradeoffSize* s : in)
      for (const auto& conf : s->configurations)
        if (std::none_of(c.rows.begin(), c.rows.end(), [&](const auto& r) { return r.configuration == conf.name; }))
          c.rows.push_back({conf.name, {}});
    for (auto& row : c.rows)
      for (const TradeoffSize* s : in) {
        const Configuration* found = nullptr;
        for (const auto& conf : s->configurations)
          if (conf.name == row.configuration) found = &conf;
        row.in.push_back(found);
      }
    out.push_back(std::move(c));
  }
  return out;
}

ByteUnit byte_unit(const std::vector<std::optional<int64_t>>& values) {
  int64_t max = 0;
  for (const auto& v : values)
    if (v) max = std::max(max, *v);
  if (max >= (int64_t{1} << 30)) return {"GiB", double(int64_t{1} << 30), 2};
  if (max >= (int64_t{1} << 20)) return {"MiB", double(int64_t{1} << 20), 1};
  if (max >= (int64_t{1} << 10)) return {"KiB", 1024.0, 1};
  return {"B", 1.0, 0};
}

ComparisonUnits comparison_units(const Comparison& c) {
  std::vector<std::optional<int64_t>> alloc, act;
  for (const auto& row : c.rows)
    for (const Configuration* x : row.in)
      if (x) {
        alloc.push_back(x->memory.peak_allocated);
        act.push_back(x->memory.activations_in_graphs);
      }
  return {byte_unit(alloc), byte_unit(act)};
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::string fixed(double v, int decimals) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::string bytes_in(int64_t b, const ByteUnit& u) {
  return u.decimals == 0 ? with_commas(b) : fixed(double(b) / u.bytes, u.decimals);
}

std::string percent(double fraction, int decimals) {
  return (fraction > 0 ? "+" : "") + fixed(fraction * 100, decimals) + "%";
}

std::string finding_text(const TradeoffFinding& f) {
  std::string s = f.id.empty() ? f.bucket : f.id + " " + f.bucket;
  if (!f.corpus_file.empty()) s += " (" + f.corpus_file + ")";
  return s;
}

std::string choice_text(const Configuration& c) {
  std::string s;
  for (const auto& [k, v] : c.choice) s += (s.empty() ? "" : ", ") + k + "=" + v;
  return s;
}

std::string flops_text(double flops) {
  return flops >= 1e12 ? fixed(flops / 1e12, 2) + " TFLOP" : fixed(flops / 1e9, 2) + " GFLOP";
}

std::string size_text(const TradeoffSize& s) {
  std::string t = std::to_string(s.layers) + " layer" + (s.layers == 1 ? "" : "s") + ", hidden " +
                  std::to_string(s.hidden) + ", " + std::to_string(s.heads) + " head" + (s.heads == 1 ? "" : "s");
  if (s.ffn_hidden) t += ", ffn " + std::to_string(s.ffn_hidden);
  t += ", seq " + std::to_string(s.seq) + ", micro-batch " + std::to_string(s.micro_batch) + ", " +
       std::to_string(s.microbatches) + " microbatch" + (s.microbatches == 1 ? "" : "es") + ", " + s.dtype;
  return t;
}

std::vector<std::string> judged_size_notes(const TradeoffSize& s) {
  std::vector<std::string> keys;  // in the order of the configurations
  std::vector<int> counts;
  for (const auto& c : s.configurations) {
    if (!c.judged_size) continue;
    const JudgedSize& j = *c.judged_size;
    const std::string key = "hidden " + std::to_string(j.hidden) + ", " + std::to_string(j.heads) + " head" +
                            (j.heads == 1 ? "" : "s") + ", ffn " + std::to_string(j.ffn_hidden) + ", " +
                            std::to_string(j.tokens) + " tokens, not at this size (" + j.reason + ")";
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      counts.push_back(1);
    } else {
      ++counts[static_cast<size_t>(it - keys.begin())];
    }
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < keys.size(); ++i)
    out.push_back(std::to_string(counts[i]) + " of " + std::to_string(s.configurations.size()) + " configuration" +
                  (s.configurations.size() == 1 ? "" : "s") + " judged at " + keys[i] +
                  "; their verdicts are that size's, their step times and memory this size's");
  return out;
}

}  // namespace recap::reports
