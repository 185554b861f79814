#include "reports/report.h"
#include "reports/results.h"

#include "harness/base/hash.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

namespace recap::reports {

Json context_to_json(const RunContext& c) {
  Json j = {{"command", c.command},   {"recap_version", c.recap_version},
            {"git_commit", c.git_commit}, {"backend", c.backend},
            {"device", c.device},     {"seed", c.seed},
            {"policy", c.policy.empty() ? Json(nullptr) : Json(c.policy)},
            {"properties", c.properties}, {"cases_requested", c.cases_requested}};
  if (c.chunk_cases > 0) j["chunk_cases"] = c.chunk_cases;
  j.update(Json{{"jobs", c.jobs}, {"shard", c.shard}, {"started_utc", c.started_utc}, {"host", c.host}});
  if (!c.sut_name.empty()) j["sut"] = {{"name", c.sut_name}, {"version", c.sut_version}, {"device", c.sut_device}};
  if (!c.flags.is_null()) j["flags"] = c.flags;
  if (!c.merged_from.empty()) j["merged_from"] = c.merged_from;
  if (!c.gpus.empty()) j["gpus"] = c.gpus;
  if (!c.jobs_auto.empty()) j["jobs_auto"] = c.jobs_auto;  // --gpus: the ordinals asked for (the report's "gpus": what ran where)
  return j;
}

namespace {
std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}
// A commit hash: 40 hex digits, or an abbreviation of at least 7 where a person names it.
bool is_commit_hash(const std::string& s, size_t min_size = 40) {
  if (s.size() < min_size || s.size() > 40) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}
}  // namespace

std::string git_commit() {
  // Named by whoever runs recap on a copy of the tree whose .git is not the tree's (the GPU
  // machine's copy carries an older HEAD beside the current files).
  if (const char* e = std::getenv("RECAP_GIT_COMMIT"); e && is_commit_hash(e, 7)) return e;
#ifdef RECAP_SOURCE_DIR
  std::string c = run_capture("git -C '" RECAP_SOURCE_DIR "' rev-parse HEAD 2>/dev/null");
  if (is_commit_hash(c)) return c;
#endif
  std::string w = run_capture("git rev-parse HEAD 2>/dev/null");
  if (is_commit_hash(w)) return w;
#ifdef RECAP_GIT_COMMIT
  return RECAP_GIT_COMMIT;
#else
  return "";
#endif
}

std::string host_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string content_hash_hex(const std::string& s) { return hex64(fnv1a64(s)); }

std::string canonical_case_text(const Json& case_json) {
  Json c = case_json;
  if (c.is_object()) {
    for (const char* k : {"name", "description", "expected", "sut"}) c.erase(k);
    for (auto it = c.begin(); it != c.end();) {
      if (!it.key().empty() && it.key()[0] == '_') it = c.erase(it);
      else ++it;
    }
  }
  return c.dump();
}

namespace {
std::string slug(const std::string& s) {
  std::string o;
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    o += (std::isalnum(c) || c == '-') ? static_cast<char>(std::tolower(c)) : '-';
  }
  return o.empty() ? "case" : o;
}
}  // namespace

std::string corpus_file_name(const std::string& property, const std::string& disposition, const Json& case_json) {
  return slug(property) + "-" + slug(disposition) + "-" + content_hash_hex(canonical_case_text(case_json)).substr(0, 12) +
         ".json";
}

namespace {
// Writes all of text to `path` (created or truncated); false with errno set on any failure,
// closing included (a full disk shows there).
bool write_all(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fflush(f) == 0) && ok;
  int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok && saved) errno = saved;
  return ok;
}
}  // namespace

bool write_text_file(const std::string& path, const std::string& text, std::string* error) {
  auto fail = [&] {
    if (error) *error = "cannot write '" + path + "': " + std::strerror(errno);
    return false;
  };
  // Something that is not a regular file (a device, a fifo) is written in place: renaming a
  // temporary over it would replace, say, /dev/null with a regular file.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) {
      errno = EISDIR;
      return fail();
    }
    return write_all(path, text) || fail();
  }
  // A regular file: write a temporary beside it, then rename, so a reader (another shard) never
  // sees half a file; the temporary is removed when anything fails.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  if (!write_all(tmp, text) || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    std::remove(tmp.c_str());
    errno = saved;
    return fail();
  }
  return true;
}

std::string write_corpus_entry(const std::string& dir, const FailureRecord& e, const CorpusContext& context,
                               std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    if (error) *error = "cannot create corpus directory '" + dir + "': " + ec.message();
    return "";
  }
  std::string file = corpus_file_name(e.property, e.disposition, e.case_json);
  std::string path = (std::filesystem::path(dir) / file).string();
  Json c = Json::object();
  c["schema"] = e.case_json.value("schema", "recap.case/1");
  c["name"] = file.substr(0, file.size() - 5);
  c["description"] = (context.found_by.empty() ? "Found by recap fuzz (seed " + std::to_string(e.seed) + ", " +
                                                      std::to_string(e.shrinks) + " shrinks)"
                                                : "Found by " + context.found_by) +
                     ": " + e.reason;
  for (auto it = e.case_json.begin(); it != e.case_json.end(); ++it) {
    if (it.key() == "schema" || it.key() == "name" || it.key() == "description" || it.key() == "expected") continue;
    c[it.key()] = it.value();
  }
  Json exp = Json::object();
  exp["disposition"] = e.disposition;
  exp["property"] = e.property;
  if (!e.error.empty()) exp["error"] = e.error;
  if (!e.api.empty()) exp["api"] = e.api;
  if (context.require_memory_savings) exp["require_memory_savings"] = true;
  if (!context.differential.empty()) exp["differential"] = context.differential;
  c["expected"] = exp;
  if (!context.sut_name.empty()) c["sut"] = {{"name", context.sut_name}, {"version", context.sut_version}};
  Json found = Json::object();
  found["seed"] = e.seed;
  found["reproduce"] = e.reproduce;
  found["shrinks"] = e.shrinks;
  found["reason"] = e.reason;
  if (!e.diagnosis.empty()) found["diagnosis"] = e.diagnosis;
  c["_found"] = found;
  if (!write_text_file(path, c.dump(2) + "\n", error)) return "";
  return path;
}

// ---- coverage ---------------------------------------------------------------------------------

const std::vector<CoverageRequirement>& default_coverage(bool policy_fixed) {
  // Shares are of all cases. The generator draws executors and policies uniformly and flags with
  // probability about one half, so each requirement sits at about half of the expected share: a
  // campaign under it has lost a region, it is not noise (300 cases: binomial sd about 2.7%).
  static const std::vector<CoverageRequirement> common = {
      {"checkpoint+capture+dropout", 0.10,
       "recompute inside a captured region with random draws: where every RNG bug class lives"},
      {"executor=per-layer", 0.15, "per-layer graphs (TransformerEngine/Megatron make_graphed_callables)"},
      {"executor=full-iteration", 0.15, "one graph of a whole step"},
      {"executor=eager", 0.05, "the eager reference path itself"},
      // issue 23: where graph-pool-leak, recompute-saves-nothing and without-output-not-rebound live
      {"graphs replayed twice or more", 0.25, "a graph pool judged from one replay of the same graphs to the next (leaks)"},
      {"checkpoint inside graphs", 0.30, "a checkpoint captured into a graph: what it keeps is held to the memory model"},
      {"without-output rebinding", 0.02, "a without-output checkpoint's discarded output rebound for its consumer"},
  };
  static std::vector<CoverageRequirement> with_policies = [] {
    std::vector<CoverageRequirement> v = common;
    v.push_back({"policy=naive", 0.10, "eager-mode checkpointing under capture: the failure recap exists to find"});
    v.push_back({"policy=skip", 0.10, "the bypass that silently loses the memory saving"});
    v.push_back({"policy=graph-safe", 0.10, "the policy that must hold everywhere"});
    return v;
  }();
  return policy_fixed ? common : with_policies;
}

std::vector<std::string> check_coverage(const std::map<std::string, int>& classification, int cases,
                                        const std::vector<CoverageRequirement>& reqs) {
  std::vector<std::string> out;
  if (cases <= 0) return out;
  for (const auto& r : reqs) {
    auto it = classification.find(r.label);
    int n = it == classification.end() ? 0 : it->second;
    double share = static_cast<double>(n) / cases;
    if (share + 1e-12 < r.min_share) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "coverage: %s in %.1f%% of %d cases (%d), needs at least %.0f%%", r.label.c_str(),
                    100.0 * share, cases, n, 100.0 * r.min_share);
      out.push_back(buf);
    }
  }
  return out;
}

// ---- JUnit ------------------------------------------------------------------------------------

std::string xml_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      case '\n': o += "&#10;"; break;
      case '\t': o += "&#9;"; break;
      case '\r': o += "&#13;"; break;
      default:
        if (c < 0x20) o += ' ';  // not allowed in XML 1.0
        else o += static_cast<char>(c);
    }
  }
  return o;
}

namespace {
std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s < 0 || !std::isfinite(s) ? 0.0 : s);
  return buf;
}
std::string text_escape(const std::string& s) {  // element content: keep newlines
  std::string o;
  for (unsigned char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c < 0x20 && c != '\n' && c != '\t') o += ' ';
    else o += static_cast<char>(c);
  }
  return o;
}
}  // namespace

std::string junit_xml(const std::vector<JUnitSuite>& suites) {
  int tests = 0, failures = 0, errors = 0;  // <testsuites> has no skipped count (the JUnit XSD); suites do
  double time = 0;
  for (const auto& s : suites)
    for (const auto& c : s.cases) {
      ++tests;
      failures += c.failure_kind == "failure";
      errors += c.failure_kind == "error";
      time += c.seconds;
    }
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites name=\"recap\" tests=\"" + std::to_string(tests) + "\" failures=\"" + std::to_string(failures) +
       "\" errors=\"" + std::to_string(errors) + "\" time=\"" + secs(time) + "\">\n";
  int id = 0;
  for (const auto& s : suites) {
    int sf = 0, se = 0, ss = 0;
    double st = 0;
    for (const auto& c : s.cases) {
      sf += c.failure_kind == "failure";
      se += c.failure_kind == "error";
      ss += c.skipped;
      st += c.seconds;
    }
    x += "  <testsuite name=\"" + xml_escape(s.name) + "\" package=\"recap\" id=\"" + std::to_string(id++) +
         "\" tests=\"" + std::to_string(s.cases.size()) + "\" failures=\"" + std::to_string(sf) + "\" errors=\"" +
         std::to_string(se) + "\" skipped=\"" + std::to_string(ss) + "\" time=\"" + secs(st) + "\" timestamp=\"" +
         xml_escape(s.timestamp) + "\" hostname=\"" + xml_escape(s.hostname.empty() ? "localhost" : s.hostname) +
         "\">\n";
    x += "    <properties>\n";
    for (const auto& [k, v] : s.properties)
      x += "      <property name=\"" + xml_escape(k) + "\" value=\"" + xml_escape(v) + "\"/>\n";
    x += "    </properties>\n";
    for (const auto& c : s.cases) {
      x += "    <testcase name=\"" + xml_escape(c.name) + "\" classname=\"" + xml_escape(c.classname) + "\" time=\"" +
           secs(c.seconds) + "\"";
      if (!c.skipped && c.failure_kind.empty()) {
        x += "/>\n";
        continue;
      }
      x += ">\n";
      if (c.skipped) x += "      <skipped message=\"" + xml_escape(c.skip_message) + "\"/>\n";
      if (!c.failure_kind.empty())
        x += "      <" + c.failure_kind + " message=\"" + xml_escape(c.message) + "\" type=\"" +
             xml_escape(c.failure_type) + "\">" + text_escape(c.text) + "</" + c.failure_kind + ">\n";
      x += "    </testcase>\n";
    }
    x += "    <system-out/>\n    <system-err/>\n";
    x += "  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return x;
}

}  // namespace recap::reports
