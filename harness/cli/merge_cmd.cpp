// recap merge: the reports of the shards of one campaign (`recap fuzz --shard i/n --report FILE`, run
// on different machines: a Slurm job array, a CI matrix) into the report one run of the campaign
// gives, and their counterexamples into one corpus. No second merger: each report is read back into
// the CampaignResult its run reported (reports::campaign_from_report) and merged as --jobs merges
// its workers (reports::merge_into, cases in case order, one counterexample per bucket from the
// lowest chunk), then written by the same reporters; so the merged report equals one `recap fuzz
// --jobs N` run's, timings and context aside (scripts/report-canon.py).
//
// Exit 0 the merged campaign held, 1 it has a failure (fuzz's rule), 2 the files are not the whole
// set of shards of one campaign (one line naming the file and the problem).
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "harness/base/json_read.h"
#include "harness/cli/campaign.h"
#include "harness/cli/cli.h"

namespace recap::cli {
namespace {

namespace fs = std::filesystem;

struct MergeFlags {
  std::vector<std::string> reports;
  std::string report, corpus_dir, junit;
  bool allow_partial = false;
};

struct Shard {
  std::string path;
  Json context;
  int index = 0, count = 1;
  std::string interrupted;  // summary.interrupted: the signal that cut the shard short
  CampaignResult result;
};

std::string name_of(const std::string& path) { return one_line(path, 80); }

Shard read_shard(const std::string& path) {
  Shard s;
  s.path = path;
  Json rep;
  JsonLimits lim;
  lim.max_bytes = size_t{1} << 30;  // a report holds every case's report: 1 GiB is 200,000 cases
  if (std::string err = read_json_file(path, &rep, lim); !err.empty()) throw UsageError(err);
  auto bad = [&](const std::string& why) { return UsageError(name_of(path) + ": " + why); };
  if (!rep.is_object() || rep.value("schema", Json()) != Json(reports::kReportSchema))
    throw bad("not a recap.report/1 (the --report of recap fuzz)");
  try {
    s.context = rep.value("context", Json());
    if (!s.context.is_object()) throw bad("its context is not an object");
    const std::string command = s.context.value("command", "");
    if (command != "fuzz") throw bad("a report of recap " + one_line(command, 20) + ", not of recap fuzz");
    if (!s.context.contains("flags"))
      throw bad("its context names no flags (a report of an older recap): run its shard again with this one");
    const std::string shard = s.context.value("shard", "");
    try {
      parse_shard(shard, &s.index, &s.count);
    } catch (const UsageError&) {
      throw bad("its shard is '" + one_line(shard, 30) + "', not i/n");
    }
    s.interrupted = rep.value("summary", Json::object()).value("interrupted", "");
    s.result = reports::campaign_from_report(rep);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {  // a field of the wrong type, missing chunk totals, ...
    throw bad(one_line(e.what(), 160));
  }
  return s;
}

std::string shard_text(const Shard& s) { return std::to_string(s.index) + "/" + std::to_string(s.count); }

// The shards are of one campaign: what decides its cases and verdicts is the same in each.
void check_same_campaign(const Shard& first, const Shard& s) {
  auto differs = [&](const std::string& what, const Json& mine, const Json& theirs) {
    if (mine == theirs) return;
    throw UsageError(name_of(s.path) + ": not a shard of the campaign of " + name_of(first.path) + ": its " + what +
                     " is " + one_line(mine.dump(), 50) + ", " + one_line(theirs.dump(), 50) + " there");
  };
  for (const char* key : {"recap_version", "git_commit", "backend", "seed", "cases_requested", "chunk_cases", "policy",
                          "properties"})
    differs(key, s.context.value(key, Json()), first.context.value(key, Json()));
  const Json mine = s.context.value("flags", Json()), theirs = first.context.value("flags", Json());
  if (mine.is_object() && theirs.is_object()) {  // flag by flag, to name the one that differs
    for (const auto& [k, v] : mine.items()) differs("flags." + k, v, theirs.value(k, Json()));
    for (const auto& [k, v] : theirs.items()) differs("flags." + k, mine.value(k, Json()), v);
  }
  differs("flags", mine, theirs);
  auto sut = [](const Json& c) {  // the system's device may differ from machine to machine
    Json u = c.value("sut", Json::object());
    return u.is_object() ? Json{{"name", u.value("name", Json())}, {"version", u.value("version", Json())}} : u;
  };
  differs("system under test", sut(s.context), sut(first.context));
  if (s.count != first.count)
    throw UsageError(name_of(s.path) + ": shard " + shard_text(s) + ", but " + name_of(first.path) + " is shard " +
                     shard_text(first) + ": the shard counts differ");
}

// Each chunk, case and counterexample of a shard is of a chunk that shard runs (chunk c is shard
// c mod n's), so no two shards hold the same cases.
void check_chunks(const Shard& s) {
  std::set<int> chunks;
  for (const auto& [c, t] : s.result.chunks) chunks.insert(c);
  chunks.insert(s.result.report_chunks.begin(), s.result.report_chunks.end());
  for (const auto& f : s.result.failures) chunks.insert(f.chunk);
  const int size = s.context.value("chunk_cases", 100);
  for (int c : chunks)
    if (c < 0 || c % s.count != s.index)
      throw UsageError(name_of(s.path) + ": it holds chunk " + std::to_string(c) + " (cases " +
                       std::to_string(int64_t{c} * size) + "-" + std::to_string((int64_t{c} + 1) * size - 1) +
                       "), which shard " + shard_text(s) + " does not run: its cases overlap another shard's");
}

// --known-findings: a shard judged each of its failing cases; a bucket is known in the campaign
// only when it is known in every shard that saw it. A shard that found its bucket known neither
// confirmed nor wrote its counterexample, and a shard that replaced an accepted counterexample by
// its own first new case (mark_known) may have chosen another case than one run would: recap merge
// cannot settle either without running the case, and refuses.
void check_known(const std::vector<Shard>& shards, const CampaignResult& merged) {
  if (merged.known_findings.empty()) return;
  for (const auto& f : merged.failures) {
    const Shard* own = nullptr;
    for (const auto& s : shards)
      if (f.chunk % s.count == s.index) own = &s;
    const auto j = merged.judged.find(f.bucket);
    const bool known = j != merged.judged.end() && j->second.new_cases == 0 && !j->second.accepted.empty();
    std::string other;  // another shard with new cases in the bucket
    for (const auto& s : shards) {
      auto k = s.result.judged.find(f.bucket);
      if (&s != own && k != s.result.judged.end() && k->second.new_cases > 0) other = shard_text(s);
    }
    const std::string where = own ? name_of(own->path) : "a shard";
    if (f.known && !known)
      throw UsageError(where + ": bucket " + one_line(f.bucket, 80) + " is known there but has new cases in shard " +
                       other + ": its counterexample was not confirmed or written; run the campaign on one machine");
    if (!f.known && f.reproduce.empty() && !other.empty())
      throw UsageError(where + ": bucket " + one_line(f.bucket, 80) + ": its counterexample is that shard's first new "
                       "case, and shard " + other + " has new cases too; run the campaign on one machine");
  }
}

// A corpus file a shard report names: where its run wrote it (relative to the working directory),
// else the same path relative to the report's folder (a CI artifact kept with its report).
std::string locate(const std::string& recorded, const std::string& report) {
  std::error_code ec;
  if (fs::exists(recorded, ec)) return recorded;
  const fs::path beside = fs::path(report).parent_path() / recorded;
  if (fs::path(recorded).is_relative() && fs::exists(beside, ec)) return beside.string();
  throw UsageError(name_of(report) + ": its corpus file " + one_line(recorded, 80) +
                   " is missing (looked in the working directory and beside the report)");
}

// Copies each counterexample's corpus file into dir, by file name (the name depends on the case
// alone); two different files of one name are an error.
void copy_corpus(CampaignResult& r, const std::vector<Shard>& shards, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError("--corpus-dir: cannot create '" + one_line(dir, 80) + "': " + ec.message());
  std::map<std::string, std::pair<std::string, std::string>> copied;  // name -> (source, bytes)
  for (auto& f : r.failures) {
    if (f.corpus_path.empty()) continue;  // known or flaky: not written
    const Shard* own = nullptr;
    for (const auto& s : shards)
      if (f.chunk % s.count == s.index) own = &s;
    const std::string src = locate(f.corpus_path, own ? own->path : "");
    std::string bytes;
    if (std::string err = read_bounded_file(src, size_t{1} << 24, &bytes); !err.empty()) throw UsageError(err);
    const std::string name = fs::path(src).filename().string();
    auto [it, fresh] = copied.emplace(name, std::make_pair(src, bytes));
    if (!fresh && it->second.second != bytes)
      throw UsageError("two different corpus files named " + one_line(name, 60) + ": " + one_line(it->second.first, 80) +
                       " and " + one_line(src, 80));
    const std::string dest = (fs::path(dir) / name).string();
    if (!fs::equivalent(src, dest, ec)) {  // a shard that wrote into dir itself: already there
      std::string err;
      if (!reports::write_text_file(dest, bytes, &err)) throw UsageError("--corpus-dir: " + err);
    }
    f.corpus_path = dest;
  }
}

// Distinct values of one context field, joined ("host-a, host-b").
std::string joined(const std::vector<Shard>& shards, const std::function<std::string(const Json&)>& get) {
  std::vector<std::string> seen;
  for (const auto& s : shards) {
    std::string v = get(s.context);
    if (std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(v);
  }
  std::string out;
  for (const auto& v : seen) out += (out.empty() ? "" : ", ") + v;
  return out;
}

// The context one run of the campaign would have (shard 0/1), with the shards' hosts and devices
// and the files it was merged from.
reports::RunContext merged_context(const std::vector<Shard>& shards) {
  const Json& c = shards.front().context;
  reports::RunContext m;
  m.command = "fuzz";
  m.recap_version = c.value("recap_version", "");
  m.git_commit = c.value("git_commit", "");
  m.backend = c.value("backend", "");
  m.seed = c.value("seed", uint64_t{0});
  m.policy = c.value("policy", Json()).is_string() ? c.at("policy").get<std::string>() : "";
  m.properties = c.value("properties", std::vector<std::string>{});
  m.cases_requested = c.value("cases_requested", 0);
  m.chunk_cases = c.value("chunk_cases", 100);
  m.flags = c.at("flags");
  m.shard = "0/1";
  m.jobs = 0;
  m.started_utc = c.value("started_utc", "");
  for (const auto& s : shards) {
    m.jobs += s.context.value("jobs", 1);
    m.isolate = m.isolate || s.context.value("isolate", false);
    m.started_utc = std::min(m.started_utc, s.context.value("started_utc", std::string()));
    m.merged_from.push_back(s.path);
  }
  m.device = joined(shards, [](const Json& x) { return x.value("device", ""); });
  m.host = joined(shards, [](const Json& x) { return x.value("host", ""); });
  if (c.contains("sut") && c.at("sut").is_object()) {
    m.sut_name = c.at("sut").value("name", "");
    m.sut_version = c.at("sut").value("version", "");
    m.sut_device = joined(shards, [](const Json& x) { return x.value("sut", Json::object()).value("device", ""); });
  }
  return m;
}

int merge(const MergeFlags& f) {
  check_output_file("--report", f.report);  // before reading anything
  check_output_file("--junit", f.junit);
  if (!f.corpus_dir.empty()) check_output_dir("--corpus-dir", f.corpus_dir);

  std::vector<Shard> shards;
  for (const auto& p : f.reports) shards.push_back(read_shard(p));
  std::stable_sort(shards.begin(), shards.end(), [](const Shard& a, const Shard& b) { return a.index < b.index; });
  std::map<int, const Shard*> by_index;
  for (const auto& s : shards) {
    check_same_campaign(shards.front(), s);
    if (auto [it, fresh] = by_index.emplace(s.index, &s); !fresh)
      throw UsageError(name_of(s.path) + ": shard " + shard_text(s) + " is given twice (also " +
                       name_of(it->second->path) + ")");
    check_chunks(s);
  }
  // Partial results: a shard cut short by a signal (Slurm's time limit sends SIGTERM), or none at
  // all. Refused unless --allow-partial; then the merged report says which (summary.interrupted), and
  // `recap fuzz --resume MERGED` with the campaign's flags runs what is missing.
  const int n = shards.front().count;
  std::string partial;
  for (int i = 0; i < n; ++i) {
    auto it = by_index.find(i);
    const std::string text = "shard " + std::to_string(i) + "/" + std::to_string(n);
    std::string what;
    if (it == by_index.end()) what = text + " is missing";
    else if (!it->second->interrupted.empty())
      what = text + " (" + name_of(it->second->path) + ") was interrupted (" + one_line(it->second->interrupted, 30) + ")";
    if (what.empty()) continue;
    if (!f.allow_partial) throw UsageError(what + ": its cases are not all in the reports; --allow-partial merges without them");
    partial += (partial.empty() ? "" : "; ") + what;
  }

  CampaignResult r;
  for (auto& s : shards) {
    CampaignResult part = s.result;  // s.result stays for check_known
    r.seconds = std::max(r.seconds, part.seconds);  // the shards ran side by side
    for (const auto& [b, j] : part.judged) {
      for (const auto& [id, k] : j.accepted) r.judged[b].accepted[id] += k;
      r.judged[b].new_cases += j.new_cases;
    }
    if (!part.known_findings.empty()) r.known_findings = part.known_findings;  // the same file: flags
    reports::merge_into(r, std::move(part));
  }
  reports::sort_reports_by_chunk(r);  // cases in case order, as one process lists them
  one_per_bucket(r);
  check_known(shards, r);
  const int unknown = count_unknown(r);
  if (!f.corpus_dir.empty()) copy_corpus(r, shards, f.corpus_dir);

  reports::Outcome out;
  out.title = "recap merge";
  out.context = merged_context(shards);
  out.campaign = &r;
  out.properties = checked_properties(out.context.properties, out.context.flags.contains("differential"),
                                      out.context.flags.contains("ranks"));
  out.exit_code = unknown > 0 || !r.crashes.empty() ? kExitFailed : kExitOk;
  out.interrupted = partial;
  report_outcome(out, f.report, f.junit);
  return out.exit_code;
}

}  // namespace

void add_merge_command(CLI::App& app, Runner* runner) {
  auto [cmd, f] = add_command<MergeFlags>(app, runner, merge,
      "merge",
      "Merge the reports of the shards of one campaign (recap fuzz --shard i/n --report FILE, each on its own "
      "machine) into the report one run gives, and their counterexamples into one corpus. Exit 0 the campaign "
      "held, 1 it has a failure, 2 the files are not every shard of one campaign.");
  cmd->add_option("reports", f->reports, "The shard reports (recap.report/1 of recap fuzz --shard i/n), every shard once")
      ->required();
  cmd->add_option("--report", f->report, "Write the merged JSON report here (schema recap.report/1)")->required();
  cmd->add_option("--corpus-dir", f->corpus_dir,
                  "Copy each counterexample's corpus file here, by file name (else the merged report names the "
                  "shards' files where they are)");
  cmd->add_option("--junit", f->junit, "Write JUnit XML here (one test case per property)");
  cmd->add_flag("--allow-partial", f->allow_partial,
                "Merge even when a shard was interrupted or is missing: the report says which (summary.interrupted) "
                "and recap fuzz --resume REPORT finishes the campaign");
}

}  // namespace recap::cli
