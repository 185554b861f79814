// The flags fuzz and gate share, and what they resolve to: the campaign's options and the report's
// run context.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include <sched.h>
#include <sys/wait.h>

#include "harness/cli/campaign.h"
#include "harness/cli/gpus.h"
#include "harness/runtime/faults.h"
#include "harness/cli/cli.h"
#include "harness/cli/progress.h"
#include "harness/cli/signals.h"

namespace recap::cli {

namespace {

constexpr int kCannotRun = -2;  // popen failed
// Runs `cmd` through the shell into *out: its exit status, -1 when it did not exit (a signal), or
// kCannotRun.
int run_command(const char* cmd, std::string* out) {
  out->clear();
  FILE* p = popen(cmd, "r");
  if (p == nullptr) return kCannotRun;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) *out += buf;
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// --gpus in the parent: refused where nothing would be spread or the pinning would be overridden,
// checked against the devices this process sees where that count can be known. Sets o->gpus and
// the CUDA_VISIBLE_DEVICES value of each ordinal's jobs.
void resolve_gpus(const FuzzFlags& f, CampaignOptions* o) {
  if (!f.gpus_given) return;
  const bool recap_runtime = f.sut.sut == "recap" || f.sut.sut == "recap-worker";
  if (recap_runtime && o->backend == "sim")
    throw UsageError("--gpus: recap's runtime on --backend sim uses no GPU; nothing to spread (--backend cuda)");
  if (f.sut.ranks > 0)
    throw UsageError("--gpus: spreads one-GPU jobs; a rank group (--ranks) is not one (not built)");
  for (const auto& kv : f.sut.worker_env)
    if (kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0)
      throw UsageError("--gpus sets each worker's CUDA_VISIBLE_DEVICES; --worker-env " + kv + " would override it");
  const char* parent = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string why;
  int count = -1;
  if (o->backend == "cuda") {
    count = device::cuda_device_count(&why);  // honours this process's CUDA_VISIBLE_DEVICES
  } else {
    // A framework on the CPU backend: recap has no CUDA of its own to ask, nvidia-smi may know
    std::string text;
    const int rc = run_command("nvidia-smi -L 2>/dev/null", &text);
    if (rc == 0) {
      count = visible_count(count_nvidia_smi_lines(text), parent);
      why = "nvidia-smi -L lists " + std::to_string(count_nvidia_smi_lines(text)) +
            (parent ? ", CUDA_VISIBLE_DEVICES='" + std::string(parent) + "'" : std::string());
    } else {
      why = rc == kCannotRun ? "cannot run nvidia-smi"
            : rc == 127      ? "nvidia-smi not found, and recap's backend is not cuda"
                             : "nvidia-smi -L failed, and recap's backend is not cuda";
    }
  }
  if (std::string e = parse_gpus(f.gpus, count, why, &o->gpus); !e.empty()) throw UsageError(e);
  for (int g : o->gpus) o->gpu_visible.push_back(visible_value(g, parent));
}

// A --gpus job: what it sees of its device, from its system under test's hello (recap's runtime in
// this process answers the same way), not what its parent asked for.
reports::JobDevice observed_device(const sut::SutInfo& info) {
  reports::JobDevice d;
  d.observed = info.visible_said;
  d.device = info.device;
  d.visible_seen_set = info.cuda_visible_devices.has_value();
  d.visible_seen = info.cuda_visible_devices.value_or("");
  d.uuid = info.uuid;
  d.pci_bus_id = info.pci_bus_id;
  return d;
}

// --jobs auto in the parent: the CPU cores this process may run on and, when the system under test
// runs on GPUs (recap's runtime on cuda; a framework whose hello names a GPU), the free memory of
// the GPUs its jobs use (--gpus, else the first this process sees) at an estimate per worker.
int resolve_auto_jobs(const CampaignOptions& o, const SystemUnderTest& s, std::string* why) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores =
      sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(std::thread::hardware_concurrency());
  const bool recap_runtime = s.kind == "recap" || s.kind == "recap-worker";
  const bool on_gpu = recap_runtime ? o.backend == "cuda" : !s.info.device.empty() && s.info.device != "cpu";
  const long long per_job = recap_runtime ? 2048 : s.kind == "megatron" ? 8192 : 4096;  // MiB, estimates
  std::vector<long long> free;
  std::string note;
  if (on_gpu) {
    std::string text;
    const bool ran = run_command("nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null", &text) == 0;
    const std::vector<long long> physical = ran ? parse_free_mib(text) : std::vector<long long>{};
    const std::vector<int> used = o.gpus.empty() ? std::vector<int>{0} : o.gpus;
    if (physical.empty()) note = "; GPU memory unknown (nvidia-smi gave no free memory): cores alone";
    else if (std::string e = free_mib_of(used, std::getenv("CUDA_VISIBLE_DEVICES"), physical, &free); !e.empty())
      note = "; GPU memory unknown (" + e + "): cores alone";
  }
  const int jobs = auto_jobs(cores, free, per_job, why);
  *why += note;
  std::fprintf(stderr, "recap: --jobs auto: %s\n", why->c_str());
  return jobs;
}

}  // namespace

void add_fuzz_flags(CLI::App* cmd, FuzzFlags* f) {
  add_backend_option(*cmd, &f->backend);
  add_property_option(*cmd, &f->properties);
  add_sut_options(*cmd, &f->sut);
  add_profile_flag(*cmd, &f->profile);
  add_differential_option(*cmd, &f->differential);
  cmd->add_option("--cases", f->cases, "Cases to generate (all shards and jobs together)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--time-budget", f->time_budget, "Stop starting new cases after this many seconds (0: no limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->check(CLI::Validator(
          [](std::string& s) { return std::isfinite(std::strtod(s.c_str(), nullptr)) ? "" : "must be a finite number, got '" + s + "'"; },
          "FINITE"));  // NaN passes a range check
  cmd->add_option("--seed", f->seed, "Campaign seed (an unsigned integer); random when absent, and then printed")
      ->check(CLI::Validator(
          [](std::string& s) {  // digits only: stoull would take " 5" and "" would mean a random seed
            bool ok = !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
            return ok ? std::string() : "must be an unsigned integer, got '" + s + "'";
          },
          "UINT"));
  cmd->add_option("--policy", f->policy, "Checkpoint policy of every case: naive, skip or graph-safe (drawn when absent)")
      ->check(CLI::IsMember({"naive", "skip", "graph-safe"}));
  cmd->add_option_function<std::string>(
         "--jobs",
         [f](const std::string& v) {
           f->jobs_auto = v == "auto";
           if (!f->jobs_auto) f->jobs = std::stoi(v);
         },
         "Worker processes on this machine (each takes the next unclaimed chunk of cases when it is free; a crash "
         "costs one worker and its chunk): 1-256, or auto: one per CPU core this process may use, and on GPUs no "
         "more than their free memory holds (nvidia-smi) at an estimate per worker (recap's runtime 2 GiB, torch "
         "4 GiB, megatron 8 GiB); the choice and why are printed and kept in the report")
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        bool digits = !v.empty() && v.size() <= 3 && v.find_first_not_of("0123456789") == std::string::npos;
        return digits && std::stoi(v) >= 1 && std::stoi(v) <= 256 ? "" : "must be 1-256 or auto, got '" + v + "'";
      });
  cmd->add_flag("--isolate", f->isolate, "Run in a worker process even with one job (crash isolation)");
  cmd->add_option("--shard", f->shard,
                  "Run shard i of n (i/n, 0-based); GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS when absent");
  cmd->add_option("--report", f->report, "Write the JSON report here (schema recap.report/1)");
  cmd->add_option("--corpus-dir", f->corpus_dir, "Where shrunk counterexamples are written")->capture_default_str();
  cmd->add_flag("--require-memory-savings", f->require_memory_savings,
                "Recompute that saves no activation memory inside graphs (the skip policy) is a failure, not a finding");
  cmd->add_option("--junit", f->junit, "Write JUnit XML here (one test case per property)");
  cmd->add_flag("--no-checkpoint", f->no_checkpoint, "Draw every layer unchecked (campaigns that judge graphs alone)");
  cmd->add_flag("--no-dropout", f->no_dropout, "Draw every layer without dropout");
  cmd->add_option("--fault", f->faults,
                  "Turn on a fault point (repeatable): a named broken mechanism of recap's runtime, written into "
                  "every case and its corpus file (docs/faults.md; recap mutants runs one campaign per fault)");
  cmd->add_option("--shrink-limit", f->shrink_limit,
                  "Evaluations one shrink may spend (0: no limit); the smallest failing case found by then is kept")
      ->check(CLI::Range(0, 100000000));
  cmd->add_option("--chunk-cases", f->chunk_cases,
                  "Cases per chunk (one RapidCheck run; chunks are dealt to the --jobs): smaller chunks keep more "
                  "workers busy in a short campaign. Part of what decides the cases (recorded in the report)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_flag("--keep-going", f->keep_going,
                "Run every case (the default): each distinct failure (property, disposition, CUDA error) is shrunk "
                "once per chunk (--chunk-cases), later ones are counted in its bucket");
  cmd->add_flag("--stop-on-first{false}", f->keep_going,
                "Stop each shard at its first counterexample (the behaviour before buckets)");
  cmd->add_option("--known-findings", f->known_findings,
                  "A recap.known-findings/1 JSON file: each known finding's buckets and the case configuration that "
                  "defines it (corpus/known-findings/*.json). A failing case is accepted only when its bucket "
                  "and its own configuration match one finding; a bucket whose every failing case was accepted is known "
                  "(reported, not written, not a failure), any other failure is new")
      ->check(CLI::ExistingFile);
  cmd->add_option("--resume", f->resume,
                  "The report (--report) of an interrupted run of this campaign, given the same flags: its complete "
                  "chunks are kept, the rest run, and the final report is the uninterrupted run's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--dims", f->dims,
                  "Tensor sizes drawn: small (hidden 8-64, tokens 4-64), large (hidden 64-1024, tokens 64-512) or "
                  "auto (large for recap's runtime on cuda, small otherwise: a framework runs each case and its "
                  "twins in its own process, and small cases reach the same mechanisms)")
      ->check(CLI::IsMember({"small", "large", "auto"}))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
      "--gpus",
      [f](const std::string& v) {
        f->gpus = v;
        f->gpus_given = true;
      },
      "Spread the --jobs processes over these GPUs of this host, one GPU each, round-robin (job j gets "
      "LIST[j mod n]): device ordinals (0,1,2,3) or all. Each job process runs with CUDA_VISIBLE_DEVICES set to "
      "its GPU, and so does the framework worker it starts; the report's gpus section says which device each "
      "job's worker observed and how many cases each GPU ran. Implies worker processes (as --isolate)");
  cmd->add_option("--job-gpu", f->job_gpu, "internal: a --gpus job, given this ordinal")->group("");
  cmd->add_option("--worker-out", f->worker_out, "internal: run as a worker, write the result here")->group("");
  cmd->add_option("--job", f->job, "internal: a worker's job number")->group("");
  cmd->add_option("--claim-dir", f->claim_dir, "internal: a worker claims its chunks here")->group("");
  cmd->add_option("--skip-chunks", f->skip_chunks, "internal: a resumed campaign's worker skips these chunks")
      ->delimiter(',')
      ->group("");
}

CampaignOptions campaign_options(const FuzzFlags& f, bool* seed_random, std::string* device_name) {
  check_output_file("--report", f.report);  // before the device, the system under test, any case
  check_output_file("--junit", f.junit);
  if (f.worker_out.empty()) check_output_dir("--corpus-dir", f.corpus_dir);
  CampaignOptions o;
  set_known_findings(o, f.known_findings);  // a bad file stops us before any worker starts
  {
    auto dev = open_device(f.backend);
    o.backend = dev->backend() == device::Backend::Sim ? "sim" : "cuda";
    *device_name = dev->name();
    o.fuzz.gen.backend = dev->backend();
    o.fuzz.oracle.backend = dev->backend() == device::Backend::Sim ? device::BackendChoice::Sim : device::BackendChoice::Cuda;
  }
  if (f.worker_out.empty()) resolve_gpus(f, &o);  // before any worker starts: bad --gpus is exit 2 at once
  o.job_gpu = f.worker_out.empty() ? -1 : f.job_gpu;
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
  o.fuzz.gen.no_checkpoint = f.no_checkpoint;
  o.fuzz.gen.no_dropout = f.no_dropout;
  {
    uint64_t mask = 0;
    if (std::string e = runtime::fault_mask_of(f.faults, &mask); !e.empty()) throw UsageError("--fault: " + e);
    if (!f.faults.empty() && f.sut.sut != "recap" && f.sut.sut != "recap-worker")
      throw UsageError("--fault: fault points are recap's own runtime's; --sut " + f.sut.sut + " has none");
    if (std::string k = runtime::process_killing_fault(f.faults); !k.empty() && f.sut.sut == "recap")
      throw UsageError("--fault " + k + " kills the process that runs the case: use --sut recap-worker");
    o.fuzz.gen.faults = f.faults;
  }
  o.fuzz.shrink_limit = f.shrink_limit;
  o.fuzz.chunk_cases = f.chunk_cases;
  o.fuzz.keep_going = f.keep_going;
  o.fuzz.stop = stop_flag();
  o.fuzz.oracle.properties = f.properties;
  o.fuzz.oracle.profile = f.profile;
  o.fuzz.oracle.differential = resolve_differential(f.differential, f.sut.sut, f.properties);
  for (const auto& p : f.properties)  // judged only where a rank group runs: without one it would judge nothing
    if (properties::ranks_property(p) && f.sut.ranks == 0)
      throw UsageError("--property " + p + ": a cross-rank property needs a rank group (--sut torch --ranks N)");
  o.sut = f.sut;
  // Started and greeted before any case: a system that cannot start is bad usage (exit 2). A parent
  // of worker processes only spawns and merges (each worker process makes its own system under
  // test), but greets one too, for that check and the report's context.
  SystemUnderTest s = make_sut(f.sut, f.sut.sut, o.backend);
  o.sut_kind = s.kind;
  o.sut_info = s.info;
  o.fuzz.gen.caps = s.caps;
  {
    const bool recap_runtime = s.kind == "recap" || s.kind == "recap-worker";
    const bool large = f.dims == "large" || (f.dims == "auto" && recap_runtime && o.backend == "cuda");
    o.fuzz.gen.backend = large ? device::Backend::Cuda : device::Backend::Sim;  // the dims of that backend
  }
  if (!f.policy.empty() && std::find(s.caps.all.policy.begin(), s.caps.all.policy.end(), *o.fuzz.gen.policy) == s.caps.all.policy.end()) {
    std::string runs;
    for (auto p : s.caps.all.policy) runs += (runs.empty() ? "" : ", ") + training::policy_name(p);
    throw UsageError("--policy " + f.policy + ": --sut " + f.sut.sut + " does not run it (its policies: " + runs + ")");
  }
  o.jobs = f.jobs;
  if (f.jobs_auto) o.jobs = f.worker_out.empty() ? resolve_auto_jobs(o, s, &o.jobs_auto) : 1;  // a worker is one job
  if (!(f.worker_out.empty() && (o.jobs > 1 || f.isolate || !o.gpus.empty()))) o.fuzz.oracle.sut = s.sut;
  if (o.job_gpu >= 0) o.observed = observed_device(s.info);
  o.isolate = f.isolate;
  o.worker_out = f.worker_out;
  o.job = f.worker_out.empty() ? 0 : f.job;
  o.claim_dir = f.worker_out.empty() ? "" : f.claim_dir;
  o.fuzz.skip_chunks.insert(f.skip_chunks.begin(), f.skip_chunks.end());
  o.progress = f.worker_out.empty() && (isatty(STDERR_FILENO) || progress_as_lines());
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
  c.chunk_cases = o.fuzz.chunk_cases;
  c.jobs = o.jobs;
  c.jobs_auto = o.jobs_auto;
  c.shard = std::to_string(o.fuzz.shard_index) + "/" + std::to_string(o.fuzz.shard_count);
  c.shard_count = o.fuzz.shard_count;
  c.isolate = o.isolate;
  c.started_utc = reports::utc_now_iso8601();
  c.host = reports::host_name();
  c.sut_name = o.sut_kind;
  c.sut_version = o.sut_info.version;
  c.sut_device = o.sut_info.device;
  // what else decides the cases and their verdicts (recap merge refuses shards that differ in them)
  c.flags = {{"require_memory_savings", o.fuzz.oracle.require_memory_savings},
             {"no_checkpoint", o.fuzz.gen.no_checkpoint},
             {"no_dropout", o.fuzz.gen.no_dropout},
             {"faults", o.fuzz.gen.faults},
             {"dims", o.fuzz.gen.backend == device::Backend::Cuda ? "large" : "small"},
             {"shrink_limit", o.fuzz.shrink_limit},
             {"stop_on_first", !o.fuzz.keep_going},
             {"time_budget", o.fuzz.time_budget_s},
             {"known_findings", o.known->path}};
  // only when asked: the flags of a campaign without it stay as they were (recap merge compares them)
  if (o.fuzz.oracle.differential)
    c.flags["differential"] = *o.fuzz.oracle.differential == device::BackendChoice::Cuda ? "cuda" : "sim";
  if (o.sut.ranks > 0) c.flags["ranks"] = o.sut.ranks;  // a rank group's campaign (issue 22)
  c.gpus = o.gpus;  // not a flag: where the jobs ran decides no case or verdict
  return c;
}

std::vector<std::string> checked_properties(const std::vector<std::string>& selected, bool differential, bool ranks) {
  if (!selected.empty()) return selected;
  std::vector<std::string> all;
  for (const auto& p : properties::property_names())
    if ((differential || !properties::opt_in_property(p)) && (ranks || !properties::ranks_property(p))) all.push_back(p);
  return all;
}

void report_outcome(const reports::Outcome& o, const std::string& report_path, const std::string& junit_path) {
  std::vector<std::unique_ptr<reports::Reporter>> reporters;
  reporters.push_back(std::make_unique<reports::ConsoleReporter>());
  if (!report_path.empty()) reporters.push_back(std::make_unique<reports::JsonReporter>(report_path));
  if (!junit_path.empty()) reporters.push_back(std::make_unique<reports::JUnitReporter>(junit_path));
  for (auto& r : reporters) r->report(o);
}

}  // namespace recap::cli
