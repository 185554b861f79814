// Worker processes (--jobs N, --isolate): recap itself, started with posix_spawn and read back as
// JSON (reports::campaign_to_json). The jobs share this process's shard and claim its chunks one at
// a time, the next unclaimed one whenever a job is free: a static deal (chunk c to job c mod N) left
// every job waiting for the one that drew the slowest chunks. A worker that dies (a signal, an abort,
// a sticky CUDA error that ends the process) is recorded as `crashed` with the chunk it was running
// and the command that reruns that chunk alone; the others go on and take the chunks it had not
// claimed. Each worker keeps a .progress file (cases done, failures) that the parent reads for its
// progress line and, after a crash, for how far the job got.
// --gpus: job j runs with CUDA_VISIBLE_DEVICES naming GPU LIST[j mod n] alone (gpus.h), and says
// what its system under test observed of its device in its result (reports::JobDevice).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness/cli/campaign.h"
#include "harness/cli/cli.h"
#include "harness/cli/gpus.h"
#include "harness/cli/progress.h"
#include "harness/cli/signals.h"

extern char** environ;

namespace recap::cli {

namespace {

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
  int job = 0;
  std::string out;
  bool done = false;
  int gpu = -1;  // --gpus: its ordinal
  double seconds = 0;  // from its start to its end, as this process saw it
};

int read_progress(const std::string& out, int* failures) {
  std::ifstream in(out + ".progress");
  int d = 0, f = 0;
  in >> d >> f;
  if (failures) *failures = f;
  return d;
}

}  // namespace

bool claim_chunk(const std::string& dir, int chunk, int job) {
  const std::string path = dir + "/" + std::to_string(chunk);
  int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    throw UsageError("cannot claim chunk " + std::to_string(chunk) + " (" + path + "): " + std::strerror(errno));
  }
  const std::string text = std::to_string(job) + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) throw UsageError("cannot write the claim " + path);
  return true;
}

std::vector<int> chunks_claimed_by(const std::string& dir, int job) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream in(e.path());
    int j = -1;
    if (in >> j && j == job) out.push_back(std::atoi(e.path().filename().c_str()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

CampaignResult run_workers(const CampaignOptions& o) {
  int jobs = std::max(1, o.jobs);
  int n = o.fuzz.shard_count, i = o.fuzz.shard_index;
  std::string exe = self_exe();
  std::error_code tec;  // $TMPDIR, else /tmp
  std::string tmpl = (std::filesystem::temp_directory_path(tec) / "recap-fuzz-XXXXXX").string();
  if (tec) tmpl = "/tmp/recap-fuzz-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw UsageError("cannot create a temporary directory " + tmpl + ": " + std::strerror(errno));
  std::string dir = tmpl;
  const std::string claims = dir + "/claims";
  if (!std::filesystem::create_directory(claims, tec))
    throw UsageError("cannot create " + claims + ": " + tec.message());
  auto t0 = std::chrono::steady_clock::now();

  std::vector<Worker> workers;
  for (int j = 0; j < jobs; ++j) {
    Worker w;
    w.job = j;
    w.out = dir + "/job-" + std::to_string(j) + ".json";
    if (!o.gpus.empty()) w.gpu = gpu_of_job(j, o.gpus);
    std::vector<std::string> args = {exe, "fuzz", "--backend", o.backend, "--cases", std::to_string(o.fuzz.cases),
                                     "--seed", std::to_string(o.fuzz.seed), "--shard",
                                     std::to_string(i) + "/" + std::to_string(n), "--worker-out", w.out,
                                     "--job", std::to_string(j), "--claim-dir", claims};
    if (o.fuzz.time_budget_s > 0) {
      args.push_back("--time-budget");
      args.push_back(std::to_string(o.fuzz.time_budget_s));
    }
    if (!o.policy.empty()) {
      args.push_back("--policy");
      args.push_back(o.policy);
    }
    if (o.fuzz.oracle.require_memory_savings) args.push_back("--require-memory-savings");
    if (o.fuzz.gen.no_checkpoint) args.push_back("--no-checkpoint");
    if (o.fuzz.gen.no_dropout) args.push_back("--no-dropout");
    for (const std::string& f : o.fuzz.gen.faults) {
      args.push_back("--fault");
      args.push_back(f);
    }
    if (!o.fuzz.keep_going) args.push_back("--stop-on-first");
    if (!o.fuzz.skip_chunks.empty()) {  // --resume: the chunks the resumed report has
      std::string list;
      for (int c : o.fuzz.skip_chunks) list += (list.empty() ? "" : ",") + std::to_string(c);
      args.push_back("--skip-chunks");
      args.push_back(list);
    }
    args.push_back("--dims");
    args.push_back(o.fuzz.gen.backend == device::Backend::Cuda ? "large" : "small");
    args.push_back("--chunk-cases");
    args.push_back(std::to_string(o.fuzz.chunk_cases));
    if (o.known->given()) {  // the workers shrink: they must not shrink into a known configuration
      args.push_back("--known-findings");
      args.push_back(o.known->path);
    }
    if (o.fuzz.shrink_limit > 0) {
      args.push_back("--shrink-limit");
      args.push_back(std::to_string(o.fuzz.shrink_limit));
    }
    if (o.sut.sut != "recap") {
      args.push_back("--sut");
      args.push_back(o.sut.sut);
    }
    if (o.sut.case_timeout >= 0) {
      args.push_back("--case-timeout");
      args.push_back(std::to_string(o.sut.case_timeout));
    }
    if (!o.sut.worker_python.empty()) {
      args.push_back("--worker-python");
      args.push_back(o.sut.worker_python);
    }
    if (o.sut.ranks > 0) {
      args.push_back("--ranks");
      args.push_back(std::to_string(o.sut.ranks));
    }
    for (const auto& kv : o.sut.worker_env) {
      args.push_back("--worker-env");
      args.push_back(kv);
    }
    for (const auto& p : o.fuzz.oracle.properties) {
      args.push_back("--property");
      args.push_back(p);
    }
    if (o.fuzz.oracle.profile) args.push_back("--profile");
    if (o.fuzz.oracle.differential) {
      args.push_back("--differential");
      args.push_back(*o.fuzz.oracle.differential == device::BackendChoice::Cuda ? "cuda" : "sim");
    }
    // --gpus: the job sees its GPU alone, and so does every process it starts (its framework worker)
    std::vector<std::string> env;
    if (w.gpu >= 0) {
      args.push_back("--job-gpu");
      args.push_back(std::to_string(w.gpu));
      const size_t k = std::find(o.gpus.begin(), o.gpus.end(), w.gpu) - o.gpus.begin();
      env = sut::environment_with({"CUDA_VISIBLE_DEVICES=" + o.gpu_visible.at(k)});
    }
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&w.pid, exe.c_str(), &fa, nullptr, argv.data(), env.empty() ? environ : envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw UsageError("cannot start a worker process (" + exe + "): " + std::strerror(rc));
    workers.push_back(w);
  }

  // merged in shard order once all are done, not as they finish: the report is the same every run
  std::vector<CampaignResult> parts(workers.size());
  size_t running = workers.size();
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  bool forwarded = false;
  while (running > 0) {
    if (!forwarded && stop_flag()->load()) {  // each worker stops as we do and hands over what it has
      forwarded = true;
      for (const auto& w : workers)
        if (!w.done) kill(w.pid, SIGTERM);
    }
    for (size_t wi = 0; wi < workers.size(); ++wi) {
      Worker& w = workers[wi];
      if (w.done) continue;
      int status = 0;
      pid_t r = waitpid(w.pid, &status, WNOHANG);
      if (r == 0) continue;
      w.done = true;
      w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      --running;
      bool clean = r == w.pid && WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1);
      CampaignResult part;
      bool loaded = false;
      if (clean) {
        std::ifstream in(w.out);
        try {
          part = reports::campaign_from_json(Json::parse(in));
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
        // chunks are claimed one at a time, so the job's last claim is the chunk it died in; shard
        // K/CHUNKS is chunk K alone
        const std::vector<int> mine = chunks_claimed_by(claims, w.job);
        const int chunks = (o.fuzz.cases + std::max(1, o.fuzz.chunk_cases) - 1) / std::max(1, o.fuzz.chunk_cases);
        std::string line = "job " + std::to_string(w.job) + " " + how;
        if (mine.empty())
          line += " before it claimed a chunk (no case ran)";
        else
          line += " after " + std::to_string(done) + " of its cases (case " + std::to_string(done + 1) +
                  " of the job crashed, in chunk " + std::to_string(mine.back()) + "); reproduce: recap fuzz --backend " + o.backend +
                  " --seed " + std::to_string(o.fuzz.seed) + " --cases " + std::to_string(o.fuzz.cases) +
                  " --chunk-cases " + std::to_string(o.fuzz.chunk_cases) + (o.policy.empty() ? "" : " --policy " + o.policy) +
                  (o.sut.sut == "recap" ? "" : " --sut " + o.sut.sut) + " --shard " + std::to_string(mine.back()) + "/" +
                  std::to_string(chunks);
        part.crashes.push_back(line);
        // a job that died before it claimed a chunk ran no case: its crash is the line alone
        part.cases = done + (mine.empty() ? 0 : 1);
        if (!mine.empty()) part.by_disposition["crashed"] = 1;
        if (done > 0) part.by_disposition["unrecorded"] = done;  // ran before the crash; results lost
      }
      parts[wi] = std::move(part);
    }
    if (running == 0) break;
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.progress && std::chrono::steady_clock::now() - last > std::chrono::milliseconds(200)) {
      last = std::chrono::steady_clock::now();
      int done = 0, failures = 0;
      std::vector<int> per_gpu(o.gpus.size(), 0);  // --gpus: cases done by the jobs given each GPU
      for (const auto& w : workers) {
        int f = 0;
        const int d = read_progress(w.out, &f);
        done += d;
        failures += f;
        if (w.gpu >= 0) per_gpu[std::find(o.gpus.begin(), o.gpus.end(), w.gpu) - o.gpus.begin()] += d;
      }
      std::string extra;  // as given: which GPU each job's worker observed is known only from its result
      for (size_t k = 0; k < per_gpu.size(); ++k)
        extra += (k ? ", " : "given GPUs: ") + std::to_string(o.gpus[k]) + " " + std::to_string(per_gpu[k]) + " cases";
      int total = shard_cases(o.fuzz.cases, o.fuzz.chunk_cases, i, n);
      progress_line(done, total, failures, el,
                    o.fuzz.time_budget_s > 0 ? std::max(0.0, o.fuzz.time_budget_s - el) : -1.0, extra);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (o.progress) clear_progress_line();
  CampaignResult all;
  std::vector<reports::JobDevice> devices;  // --gpus: per job, what it observed, in job order
  for (size_t wi = 0; wi < workers.size() && !o.gpus.empty(); ++wi) {
    reports::JobDevice d = parts[wi].job_devices.empty() ? reports::JobDevice{} : parts[wi].job_devices.front();
    const Worker& w = workers[wi];
    d.job = static_cast<int>(wi);
    d.shard = std::to_string(i) + "/" + std::to_string(n);  // the jobs share it, claiming its chunks
    d.requested = w.gpu;
    d.visible_set = o.gpu_visible.at(std::find(o.gpus.begin(), o.gpus.end(), w.gpu) - o.gpus.begin());
    d.cases = parts[wi].cases;
    d.seconds = w.seconds;
    devices.push_back(d);
  }
  for (auto& part : parts) {
    part.job_devices.clear();
    reports::merge_into(all, std::move(part));
  }
  all.job_devices = std::move(devices);
  all.gpus = o.gpus;
  reports::sort_reports_by_chunk(all);  // cases in case order, as one process lists them
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  all.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return all;
}

}  // namespace recap::cli
