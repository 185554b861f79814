#include "harness/cli/campaign.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/cli/cli.h"
#include "harness/training/executor.h"

extern char** environ;

namespace recap::cli {

using properties::CaseReport;
using properties::disposition_name;

// ---- shards -----------------------------------------------------------------------------------

void parse_shard(const std::string& text, int* index, int* count) {
  auto bad = [&] { throw UsageError("--shard must be i/n with 0 <= i < n, got '" + text + "'"); };
  size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 >= text.size()) bad();
  try {
    size_t p1 = 0, p2 = 0;
    long i = std::stol(text.substr(0, slash), &p1);
    long n = std::stol(text.substr(slash + 1), &p2);
    if (p1 != slash || p2 != text.size() - slash - 1 || n < 1 || n > 1000000 || i < 0 || i >= n) bad();
    *index = static_cast<int>(i);
    *count = static_cast<int>(n);
  } catch (const std::logic_error&) {
    bad();
  }
}

void resolve_shard(const std::string& flag, int* index, int* count) {
  *index = 0;
  *count = 1;
  if (!flag.empty()) {
    parse_shard(flag, index, count);
    return;
  }
  const char* i = std::getenv("GTEST_SHARD_INDEX");
  const char* n = std::getenv("GTEST_TOTAL_SHARDS");
  if (i && n && *i && *n) {
    try {
      parse_shard(std::string(i) + "/" + n, index, count);
    } catch (const UsageError&) {
      throw UsageError(std::string("GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS must be i and n with 0 <= i < n, got ") + i +
                       " and " + n);
    }
    if (const char* status = std::getenv("GTEST_SHARD_STATUS_FILE")) std::ofstream{status};
  }
}

// ---- campaign JSON (worker <-> parent) ------------------------------------------------------------

namespace {

Json failure_to_json(const FailureRecord& f) {
  Json j = Json::object();
  j["property"] = f.property;
  j["disposition"] = f.disposition;
  j["error"] = f.error;
  j["api"] = f.api;
  j["reason"] = f.reason;
  j["reproduce"] = f.reproduce;
  j["seed"] = f.seed;
  j["shrinks"] = f.shrinks;
  j["corpus_file"] = f.corpus_path;
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
  f.case_json = j.value("case", Json());
  f.report = j.value("report", Json());
  return f;
}

}  // namespace

Json campaign_to_json(const CampaignResult& r) {
  Json j = Json::object();
  j["cases"] = r.cases;
  j["by_disposition"] = r.by_disposition;
  j["classification"] = r.classification;
  j["findings"] = r.findings;
  j["seconds"] = r.seconds;
  j["crashes"] = r.crashes;
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
  r.seconds = j.value("seconds", 0.0);
  r.crashes = j.value("crashes", std::vector<std::string>{});
  for (const auto& f : j.value("failures", Json::array())) r.failures.push_back(failure_from_json(f));
  for (const auto& c : j.value("reports", Json::array())) r.reports.push_back(c);
  return r;
}

namespace {

void merge_into(CampaignResult& into, CampaignResult&& from) {
  into.cases += from.cases;
  for (auto& [k, v] : from.by_disposition) into.by_disposition[k] += v;
  for (auto& [k, v] : from.classification) into.classification[k] += v;
  for (auto& f : from.findings) into.findings.push_back(f);
  for (auto& c : from.reports) into.reports.push_back(std::move(c));
  for (auto& f : from.failures) into.failures.push_back(std::move(f));
  for (auto& c : from.crashes) into.crashes.push_back(std::move(c));
}

// The check a counterexample failed on: its property's check, else the first that did not pass.
const properties::CheckResult* failing_check(const CaseReport& r, const std::string& property) {
  for (const auto& c : r.checks)
    if (c.property == property) return &c;
  for (const auto& c : r.checks)
    if (c.disposition != properties::Disposition::Passed && c.disposition != properties::Disposition::Skipped) return &c;
  return nullptr;
}

CampaignResult from_stats(const properties::FuzzStats& s) {
  CampaignResult r;
  r.cases = s.cases;
  r.by_disposition = s.by_disposition;
  r.classification = s.classification;
  r.findings = s.findings;
  r.seconds = s.seconds;
  for (const auto& c : s.reports) r.reports.push_back(properties::case_report_to_json(c));
  for (const auto& cx : s.failures) {
    FailureRecord f;
    f.case_json = training::case_to_json(cx.spec);
    f.report = properties::case_report_to_json(cx.report);
    f.property = cx.property;
    f.disposition = disposition_name(cx.report.disposition);
    if (const auto* c = failing_check(cx.report, cx.property)) {
      f.error = c->cuda_error;
      f.api = c->api;
      if (f.property.empty()) f.property = c->property;
    }
    f.reason = cx.report.first_failure();
    f.reproduce = cx.reproduce;
    f.seed = cx.seed;
    f.shrinks = cx.shrinks;
    r.failures.push_back(std::move(f));
  }
  return r;
}

// Fault injection for the isolation tests: RECAP_FAULT_ABORT="SHARD:N" makes the process running
// shard SHARD abort after its N-th case. Read once; nothing happens when it is unset.
struct Fault {
  int shard = -1;
  int after = -1;
};
Fault fault_from_env() {
  Fault f;
  if (const char* e = std::getenv("RECAP_FAULT_ABORT")) std::sscanf(e, "%d:%d", &f.shard, &f.after);
  return f;
}

// How many of `cases` shard i of n runs: fuzz() deals chunks of 100 cases, chunk c to shard c % n.
int shard_cases(int cases, int i, int n) {
  int total = 0;
  for (int c = 0; c * 100 < cases; ++c)
    if (c % n == i) total += std::min(100, cases - c * 100);
  return total;
}

std::string fmt_time(double s) {
  char buf[32];
  if (s < 0) return "-";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

void progress_line(int done, int total, int failures, double elapsed, double left) {
  double rate = elapsed > 0 ? done / elapsed : 0.0;
  std::fprintf(stderr, "\r  %d/%d cases, %.1f cases/s, %d failure%s, %s left   ", done, total, rate, failures,
               failures == 1 ? "" : "s", fmt_time(left).c_str());
  std::fflush(stderr);
}

CampaignResult run_in_process(const CampaignOptions& o) {
  static const Fault fault = fault_from_env();
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  std::ofstream progress_file;
  if (!o.worker_out.empty()) progress_file.open(o.worker_out + ".progress");
  int total = shard_cases(o.fuzz.cases, o.fuzz.shard_index, std::max(1, o.fuzz.shard_count));
  auto cb = [&](const properties::Progress& p) {
    if (fault.after >= 0 && fault.shard == o.fuzz.shard_index && p.done == fault.after) {
      std::fprintf(stderr, "recap: RECAP_FAULT_ABORT: aborting shard %d after case %d\n", fault.shard, p.done);
      std::abort();
    }
    if (progress_file.is_open()) {
      progress_file.seekp(0);
      progress_file << p.done << ' ' << p.failures << "        " << std::flush;
    }
    if (o.progress) {
      auto now = std::chrono::steady_clock::now();
      if (now - last > std::chrono::milliseconds(100) || p.done == total) {
        last = now;
        progress_line(p.done, total, p.failures, p.elapsed_s, p.time_left_s);
      }
    }
  };
  properties::FuzzStats s = properties::fuzz(o.fuzz, cb);
  if (o.progress) std::fprintf(stderr, "\r%*s\r", 78, "");
  return from_stats(s);
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw UsageError("cannot find the recap executable (/proc/self/exe): " + ec.message());
  return p.string();
}

std::string signal_text(int sig) {
  const char* d = strsignal(sig);
  return "signal " + std::to_string(sig) + (d ? std::string(" (") + d + ")" : "");
}

struct Worker {
  pid_t pid = -1;
  int shard = 0, count = 1;
  std::string out;
  bool done = false;
};

int read_progress(const std::string& out, int* failures) {
  std::ifstream in(out + ".progress");
  int d = 0, f = 0;
  in >> d >> f;
  if (failures) *failures = f;
  return d;
}

CampaignResult run_workers(const CampaignOptions& o) {
  int jobs = std::max(1, o.jobs);
  // Sub-shards of this process's shard: fuzz() deals chunk c to shard c mod n, so shard i of n
  // split in `jobs` is shards i + n*j of n*jobs.
  int n = o.fuzz.shard_count, i = o.fuzz.shard_index;
  std::string exe = self_exe();
  char tmpl[] = "/tmp/recap-fuzz-XXXXXX";
  if (!mkdtemp(tmpl)) throw UsageError(std::string("cannot create a temporary directory: ") + std::strerror(errno));
  std::string dir = tmpl;
  auto t0 = std::chrono::steady_clock::now();

  std::vector<Worker> workers;
  for (int j = 0; j < jobs; ++j) {
    Worker w;
    w.shard = i + n * j;
    w.count = n * jobs;
    w.out = dir + "/shard-" + std::to_string(w.shard) + ".json";
    std::vector<std::string> args = {exe, "fuzz", "--backend", o.backend, "--cases", std::to_string(o.fuzz.cases),
                                     "--seed", std::to_string(o.fuzz.seed), "--shard",
                                     std::to_string(w.shard) + "/" + std::to_string(w.count), "--worker-out", w.out};
    if (o.fuzz.time_budget_s > 0) {
      args.push_back("--time-budget");
      args.push_back(std::to_string(o.fuzz.time_budget_s));
    }
    if (!o.policy.empty()) {
      args.push_back("--policy");
      args.push_back(o.policy);
    }
    if (o.fuzz.oracle.require_memory_savings) args.push_back("--require-memory-savings");
    for (const auto& p : o.fuzz.oracle.properties) {
      args.push_back("--property");
      args.push_back(p);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&w.pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw UsageError("cannot start a worker process (" + exe + "): " + std::strerror(rc));
    workers.push_back(w);
  }

  CampaignResult all;
  size_t running = workers.size();
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  while (running > 0) {
    for (auto& w : workers) {
      if (w.done) continue;
      int status = 0;
      pid_t r = waitpid(w.pid, &status, WNOHANG);
      if (r == 0) continue;
      w.done = true;
      --running;
      std::string shard = std::to_string(w.shard) + "/" + std::to_string(w.count);
      bool clean = r == w.pid && WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1);
      CampaignResult part;
      bool loaded = false;
      if (clean) {
        std::ifstream in(w.out);
        try {
          part = campaign_from_json(Json::parse(in));
          loaded = true;
        } catch (const std::exception&) {
        }
      }
      if (!loaded) {
        int failures = 0;
        int done = read_progress(w.out, &failures);
        std::string how = r != w.pid            ? "was lost"
                          : WIFSIGNALED(status) ? "died of " + signal_text(WTERMSIG(status))
                          : WIFEXITED(status)   ? "exited with code " + std::to_string(WEXITSTATUS(status))
                                                : "stopped";
        std::string line = "shard " + shard + " " + how + " after " + std::to_string(done) +
                           " of its cases (case " + std::to_string(done + 1) + " of the shard crashed); reproduce: recap fuzz --backend " +
                           o.backend + " --seed " + std::to_string(o.fuzz.seed) + " --cases " +
                           std::to_string(o.fuzz.cases) + (o.policy.empty() ? "" : " --policy " + o.policy) +
                           " --shard " + shard;
        part.crashes.push_back(line);
        part.cases = done + 1;
        part.by_disposition["crashed"] = 1;
        if (done > 0) part.by_disposition["unrecorded"] = done;  // ran before the crash; results lost
      }
      merge_into(all, std::move(part));
    }
    if (running == 0) break;
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.progress && std::chrono::steady_clock::now() - last > std::chrono::milliseconds(200)) {
      last = std::chrono::steady_clock::now();
      int done = 0, failures = 0;
      for (const auto& w : workers) {
        int f = 0;
        done += read_progress(w.out, &f);
        failures += f;
      }
      int total = shard_cases(o.fuzz.cases, i, n);
      progress_line(done, total, failures, el,
                    o.fuzz.time_budget_s > 0 ? std::max(0.0, o.fuzz.time_budget_s - el) : -1.0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (o.progress) std::fprintf(stderr, "\r%*s\r", 78, "");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  all.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return all;
}

}  // namespace

CampaignResult run_campaign(const CampaignOptions& o) {
  if (o.worker_out.empty() && (o.jobs > 1 || o.isolate)) return run_workers(o);
  auto t0 = std::chrono::steady_clock::now();
  CampaignResult r = run_in_process(o);
  if (r.seconds <= 0) r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string replay_command(const std::string& path) { return "recap replay " + path; }

void write_file_or_throw(const std::string& path, const std::string& text, const char* flag) {
  std::string err;
  if (!reports::write_text_file(path, text, &err)) throw UsageError(std::string(flag) + ": " + err);
}

void save_failures(CampaignResult& r, const std::string& corpus_dir, bool require_memory_savings) {
  for (auto& f : r.failures) {
    reports::CorpusEntry e;
    e.case_json = f.case_json;
    e.property = f.property;
    e.disposition = f.disposition;
    e.error = f.error;
    e.api = f.api;
    e.reason = f.reason;
    e.reproduce = f.reproduce;
    e.seed = f.seed;
    e.shrinks = f.shrinks;
    e.require_memory_savings = require_memory_savings && f.property == "memory";
    std::string err;
    f.corpus_path = reports::write_corpus_entry(corpus_dir, e, &err);
    if (f.corpus_path.empty()) throw UsageError("--corpus-dir: " + err);
  }
}

Json campaign_summary_json(const CampaignResult& r) {
  Json s = Json::object();
  s["cases"] = r.cases;
  s["by_disposition"] = r.by_disposition;
  s["classification"] = r.classification;
  s["findings"] = r.findings;
  Json f = Json::array();
  for (const auto& x : r.failures) {
    Json j = failure_to_json(x);
    j.erase("report");
    f.push_back(j);
  }
  s["failures"] = f;
  s["crashes"] = r.crashes;
  s["seconds"] = r.seconds;
  s["cases_per_minute"] = r.seconds > 0 ? r.cases * 60.0 / r.seconds : 0.0;
  return s;
}

void print_summary(const char* what, const CampaignResult& r, const CampaignOptions& o) {
  double cpm = r.seconds > 0 ? r.cases * 60.0 / r.seconds : 0.0;
  std::printf("%s: %d cases in %.1f s (%.0f cases/min), seed %" PRIu64 ", backend %s, policy %s", what, r.cases,
              r.seconds, cpm, o.fuzz.seed, o.backend.c_str(), o.policy.empty() ? "drawn" : o.policy.c_str());
  if (o.fuzz.shard_count > 1) std::printf(", shard %d/%d", o.fuzz.shard_index, o.fuzz.shard_count);
  if (o.jobs > 1 || o.isolate) std::printf(", %d job%s", o.jobs, o.jobs == 1 ? "" : "s");
  std::printf("\n  by disposition:");
  for (const auto& [k, v] : r.by_disposition) std::printf(" %s %d", k.c_str(), v);
  std::printf("\n  classification (cases under each label):\n");
  for (const auto& [k, v] : r.classification)
    std::printf("    %-34s %6d  %5.1f%%\n", k.c_str(), v, r.cases ? 100.0 * v / r.cases : 0.0);
  if (!r.findings.empty()) {
    std::printf("  findings (not failures):\n");
    for (const auto& f : r.findings) std::printf("    %s\n", f.c_str());
  }
  for (const auto& c : r.crashes) std::printf("  crashed: %s\n", c.c_str());
  if (r.failures.empty() && r.crashes.empty()) {
    std::printf("  no failure\n");
  } else {
    std::printf("  %zu counterexample%s:\n", r.failures.size(), r.failures.size() == 1 ? "" : "s");
    for (const auto& f : r.failures) {
      std::printf("    %s %s: %s (%d shrinks)\n", f.property.c_str(), f.disposition.c_str(), f.reason.c_str(), f.shrinks);
      if (!f.corpus_path.empty()) std::printf("      written: %s\n      replay:  %s\n", f.corpus_path.c_str(),
                                              replay_command(f.corpus_path).c_str());
      if (!f.reproduce.empty()) std::printf("      reproduce: %s\n", f.reproduce.c_str());
    }
  }
  std::printf("  throughput: %.0f cases/min\n", cpm);
}

Json make_report(const reports::RunContext& ctx, const CampaignResult* campaign,
                  const std::vector<ReplayOutcome>* replays, const Json& extra_summary) {
  Json rep = Json::object();
  rep["schema"] = reports::kReportSchema;
  rep["context"] = reports::context_to_json(ctx);
  Json summary = campaign ? campaign_summary_json(*campaign) : Json::object();
  for (auto it = extra_summary.begin(); it != extra_summary.end(); ++it) summary[it.key()] = it.value();
  if (replays) {
    int ok = 0;
    for (const auto& r : *replays) ok += r.as_expected;
    summary["replays"] = {{"files", replays->size()}, {"as_expected", ok}};
  }
  rep["summary"] = summary;
  rep["cases"] = campaign ? Json(campaign->reports) : Json::array();
  if (replays) {
    Json a = Json::array();
    for (const auto& r : *replays) {
      Json j = Json::object();
      j["file"] = r.path;
      j["disposition"] = r.disposition;
      j["expected"] = r.expected;
      j["as_expected"] = r.as_expected;
      j["mismatch"] = r.mismatch;
      j["first_failure"] = r.first_failure;
      j["replay_command"] = replay_command(r.path);
      j["seconds"] = r.seconds;
      j["report"] = r.report;
      a.push_back(j);
    }
    rep["replays"] = a;
  }
  return explicit_nonfinite(rep);
}

}  // namespace recap::cli

namespace recap::cli {

void add_fuzz_flags(CLI::App* cmd, FuzzFlags* f) {
  add_backend_option(*cmd, &f->backend);
  add_property_option(*cmd, &f->properties);
  cmd->add_option("--cases", f->cases, "Cases to generate (all shards and jobs together)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--time-budget", f->time_budget, "Stop starting new cases after this many seconds (0: no limit)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--seed", f->seed, "Campaign seed (an unsigned integer); random when absent, and then printed");
  cmd->add_option("--policy", f->policy, "Checkpoint policy of every case: naive, skip or graph-safe (drawn when absent)")
      ->check(CLI::IsMember({"naive", "skip", "graph-safe"}));
  cmd->add_option("--jobs", f->jobs, "Worker processes on this machine (each runs a shard; a crash costs one worker)")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--isolate", f->isolate, "Run in a worker process even with one job (crash isolation)");
  cmd->add_option("--shard", f->shard,
                  "Run shard i of n (i/n, 0-based); GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS when absent");
  cmd->add_option("--report", f->report, "Write the JSON report here (schema recap.report/1)");
  cmd->add_option("--corpus-dir", f->corpus_dir, "Where shrunk counterexamples are written")->capture_default_str();
  cmd->add_flag("--require-memory-savings", f->require_memory_savings,
                "Recompute that saves no activation memory inside graphs (the skip policy) is a failure, not a finding");
  cmd->add_option("--junit", f->junit, "Write JUnit XML here (one test case per property)");
  cmd->add_option("--worker-out", f->worker_out, "internal: run as a worker, write the result here")->group("");
}

CampaignOptions campaign_options(const FuzzFlags& f, bool* seed_random, std::string* device_name) {
  CampaignOptions o;
  {
    auto dev = open_device(f.backend);
    o.backend = dev->backend() == device::Backend::Sim ? "sim" : "cuda";
    *device_name = dev->name();
    o.fuzz.gen.backend = dev->backend();
    o.fuzz.oracle.backend = dev->backend() == device::Backend::Sim ? device::BackendChoice::Sim : device::BackendChoice::Cuda;
  }
  *seed_random = f.seed.empty();
  if (f.seed.empty()) {
    std::random_device rd;
    o.fuzz.seed = (uint64_t(rd()) << 32 | rd()) % 1000000000000ull;
  } else {
    size_t pos = 0;
    bool ok = !f.seed.empty() && f.seed[0] != '-';
    try {
      if (ok) o.fuzz.seed = std::stoull(f.seed, &pos);
    } catch (const std::logic_error&) {
      ok = false;
    }
    if (!ok || pos != f.seed.size()) throw UsageError("--seed must be an unsigned integer, got '" + f.seed + "'");
  }
  o.fuzz.cases = f.cases;
  o.fuzz.time_budget_s = f.time_budget;
  resolve_shard(f.shard, &o.fuzz.shard_index, &o.fuzz.shard_count);
  o.policy = f.policy;
  if (!f.policy.empty()) {
    training::CheckpointPolicy p = training::CheckpointPolicy::GraphSafe;  // --policy was checked by CLI11
    training::policy_from_name(f.policy, &p);
    o.fuzz.gen.policy = p;
  }
  o.fuzz.oracle.require_memory_savings = f.require_memory_savings;
  o.fuzz.oracle.properties = f.properties;
  o.jobs = f.jobs;
  o.isolate = f.isolate;
  o.worker_out = f.worker_out;
  o.progress = f.worker_out.empty() && isatty(STDERR_FILENO);
  return o;
}

reports::RunContext run_context(const char* command, const CampaignOptions& o, const std::string& device_name) {
  reports::RunContext c;
  c.command = command;
  c.recap_version = "0.1.0";
  c.git_commit = reports::git_commit();
  c.backend = o.backend;
  c.device = device_name;
  c.seed = o.fuzz.seed;
  c.policy = o.policy;
  c.properties = o.fuzz.oracle.properties;
  c.cases_requested = o.fuzz.cases;
  c.jobs = o.jobs;
  c.shard = std::to_string(o.fuzz.shard_index) + "/" + std::to_string(o.fuzz.shard_count);
  c.started_utc = reports::utc_now_iso8601();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  c.host = host;
  return c;
}

reports::JUnitSuite properties_suite(const CampaignResult& r, const std::string& timestamp) {
  reports::JUnitSuite s;
  s.name = "recap.properties";
  s.timestamp = timestamp;
  for (const std::string& p : properties::property_names()) {
    reports::JUnitCase c;
    c.name = p;
    c.classname = "recap.properties";
    c.seconds = r.cases ? r.seconds / properties::property_names().size() : 0.0;
    for (const auto& f : r.failures) {
      if (f.property != p) continue;
      c.failure_kind = f.disposition == "crashed" ? "error" : "failure";
      c.failure_type = f.disposition;
      c.message = p + " " + f.disposition + ": " + f.reason +
                  (f.corpus_path.empty() ? "" : "; replay: " + replay_command(f.corpus_path));
      c.text += c.message + "\nseed " + std::to_string(f.seed) + ", " + std::to_string(f.shrinks) + " shrinks\n" +
                (f.reproduce.empty() ? "" : "reproduce: " + f.reproduce + "\n") + "case: " + f.case_json.dump() + "\n";
    }
    s.cases.push_back(c);
  }
  for (size_t i = 0; i < r.crashes.size(); ++i) {
    reports::JUnitCase c;
    c.name = "worker " + std::to_string(i);
    c.classname = "recap.crashes";
    c.failure_kind = "error";
    c.failure_type = "crashed";
    c.message = r.crashes[i];
    c.text = r.crashes[i];
    s.cases.push_back(c);
  }
  return s;
}

}  // namespace recap::cli
