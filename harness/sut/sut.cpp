#include "harness/sut/sut.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "harness/base/profile.h"
#include "harness/sut/worker.h"

extern char** environ;

namespace recap::sut {

namespace {

// A request the worker did not answer within the case timeout (the worker has been killed).
struct TimedOut : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Kills the worker when a request is not answered in time. Requests and replies go through FILE*,
// which cannot wait with a deadline; a thread waiting on a condition variable sends SIGKILL, and
// the blocked write or read then returns (a broken pipe, the end of input).
class Watchdog {
 public:
  Watchdog(pid_t pid, double seconds) {
    if (seconds <= 0) return;
    thread_ = std::thread([this, pid, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
        fired_ = true;
        kill(-pid, SIGKILL);  // its process group (start()); not reaped before disarm() returns
      }
    });
  }
  ~Watchdog() { disarm(); }
  // Stops the watchdog; true when it fired.
  bool disarm() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
    return fired_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

std::string key_of(const std::string& kv) { return kv.substr(0, kv.find('=')); }

}  // namespace

bool sticky_cuda_error(const std::string& error) {
  return error == "cudaErrorIllegalAddress" || error == "cudaErrorAssert" || error == "cudaErrorLaunchFailure" ||
         error == "cudaErrorIllegalInstruction" || error == "cudaErrorMisalignedAddress";
}

bool out_of_memory_error(const std::string& error) {
  return error == "cudaErrorMemoryAllocation" || error == "OutOfMemoryError";
}

std::vector<std::string> environment_with(const std::vector<std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  for (const auto& kv : set) {
    // A later setting of a variable replaces an earlier one (recap's own, or a repeated flag).
    const std::string key = key_of(kv);
    std::erase_if(env, [&](const std::string& x) { return key_of(x) == key; });
    env.push_back(kv);
  }
  return env;
}

WorkerSut::~WorkerSut() {
  // A clean end: ask the worker to stop and let it exit by itself.
  if (to_) {
    try {
      Message bye;
      bye.header = {{"op", "shutdown"}};
      write_message(to_, bye);
    } catch (const ProtocolError&) {
    }
  }
  stop(/*grace_s=*/10);
  if (stderr_fd_ >= 0) {
    end_request();
    close(stderr_fd_);
  }
}

void WorkerSut::start() {
  if (stderr_fd_ < 0) {
    // The worker's stderr: a file nobody else can open (unlinked), appended to by the worker, so
    // recap can empty it before each request and read the tail of what that request wrote.
    const char* tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/recap-worker-stderr-XXXXXX";
    stderr_fd_ = mkostemp(path.data(), O_APPEND | O_CLOEXEC);
    if (stderr_fd_ < 0) throw std::runtime_error("cannot create a file for the worker's stderr in " + path + ": " + std::strerror(errno));
    unlink(path.c_str());
  }
  int in[2], out[2];
  // Close-on-exec everywhere: the worker gets exactly fds 0, 1, 2 (dup2 clears the flag on them),
  // not the pipes of another worker recap runs.
  if (pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(std::string("cannot create pipes: ") + std::strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    throw std::runtime_error(std::string("cannot create pipes: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, stderr_fd_, STDERR_FILENO);
  std::vector<char*> argv, envp;
  for (auto& a : config_.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : config_.env) envp.push_back(e.data());
  envp.push_back(nullptr);
  // The worker leads a process group of its own, so that killing it kills what it started too
  // (a child holding its stdout open would keep recap's read waiting).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  begin_request();  // what the worker writes while it starts belongs to the hello that follows
  int rc = posix_spawnp(&pid_, config_.argv[0].c_str(), &fa, &attr, argv.data(),
                        config_.env.empty() ? environ : envp.data());  // PATH lookup: python3
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    pid_ = -1;
    throw std::runtime_error("cannot start the worker " + config_.argv[0] + ": " + std::strerror(rc));
  }
  to_ = fdopen(in[1], "wb");
  from_ = fdopen(out[0], "rb");
  // A worker that died leaves a broken pipe: a write error, not a SIGPIPE that ends recap.
  signal(SIGPIPE, SIG_IGN);

  // hello: the worker says what it is and what it runs, or why it cannot start.
  Message req, rep;
  req.header = {{"op", "hello"}, {"protocol", kProtocol}};
  // What went wrong, with "%s" where how the worker ended goes.
  std::string problem;
  double grace = 0;  // a worker that answers wrongly is alive: killed at once
  try {
    if (!exchange(req, &rep)) {
      problem = "the worker %s before answering hello";
      grace = 5;  // it closed its output: it is exiting, let it say how
    } else if (rep.header.value("op", std::string()) == "error") {
      problem = "the worker refused hello: " + rep.header.value("message", std::string()) + " (it %s)";
      grace = 5;  // a worker that refuses hello exits (status 2)
    } else if (rep.header.value("op", std::string()) != "hello" || rep.header.value("protocol", std::string()) != kProtocol) {
      problem = "the worker answered hello with " + rep.header.dump().substr(0, 120) + " (it %s)";
    } else if (!rep.header.contains("capabilities") || !rep.header["capabilities"].is_object()) {
      problem = "the worker answered hello without a capabilities object (it %s)";
    }
  } catch (const TimedOut& e) {
    problem = std::string(e.what()) + " (it %s)";
  } catch (const ProtocolError& e) {
    problem = std::string("the worker answered hello with garbage: ") + e.what() + " (it %s)";
  }
  if (!problem.empty()) {
    std::string tail = stderr_tail();
    stop(grace);
    end_request();
    problem.replace(problem.find("%s"), 2, last_exit_);
    throw std::runtime_error(problem + tail);
  }
  end_request();
  info_.name = rep.header.value("sut", std::string());
  info_.version = rep.header.value("version", std::string());
  info_.device = rep.header.value("device", std::string());
  info_.capabilities = rep.header["capabilities"];
  if (rep.header.contains("mutants")) info_.mutants = rep.header["mutants"];
  info_.visible_said = false;
  info_.cuda_visible_devices.reset();
  info_.uuid.clear();
  info_.pci_bus_id.clear();
  read_visible_device(rep.header, &info_);
  info_.ops.clear();
  if (auto ops = rep.header.find("ops"); ops != rep.header.end() && ops->is_array())
    for (const Json& op : *ops)
      if (op.is_string()) info_.ops.push_back(op.get<std::string>());
}

void read_visible_device(const Json& hello, SutInfo* info) {
  const Json v = hello.value("visible_device", Json());
  if (!v.is_object()) return;
  info->visible_said = true;
  const Json cvd = v.value("cuda_visible_devices", Json());
  if (cvd.is_string()) info->cuda_visible_devices = cvd.get<std::string>();
  if (v.value("uuid", Json()).is_string()) info->uuid = v["uuid"].get<std::string>();
  if (v.value("pci_bus_id", Json()).is_string()) info->pci_bus_id = v["pci_bus_id"].get<std::string>();
}

SutInfo WorkerSut::hello() {
  if (pid_ < 0) start();
  return info_;
}

void WorkerSut::stop(double grace_s) {
  if (to_) std::fclose(to_);  // the worker's end of input: a healthy worker exits by itself
  if (from_) std::fclose(from_);
  to_ = from_ = nullptr;
  if (pid_ > 0) {
    int status = 0;
    pid_t r = 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while ((r = waitpid(pid_, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const bool ours = r == 0 || timed_out_;  // a SIGKILL from recap: the grace ran out, or the watchdog
    if (r == 0) {
      kill(-pid_, SIGKILL);  // a worker in any state, and what it started: its case is over
      waitpid(pid_, &status, 0);
    }
    last_signal_.clear();
    // A SIGKILL recap did not send is named as any other signal (the kernel's out-of-memory
    // killer, a worker that killed itself: RECAP_WORKER_FAULT kill-in-capture)
    if (WIFSIGNALED(status) && (WTERMSIG(status) != SIGKILL || !ours)) {
      const char* abbrev = sigabbrev_np(WTERMSIG(status));
      last_signal_ = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(WTERMSIG(status));
      last_exit_ = "died of signal " + std::to_string(WTERMSIG(status)) + " (" + last_signal_ + ")";
    }
    else if (WIFEXITED(status))
      last_exit_ = "exited with status " + std::to_string(WEXITSTATUS(status));
    else
      last_exit_ = "was ended by recap";
  }
  pid_ = -1;
}

bool WorkerSut::exchange(const Message& request, Message* reply) {
  timed_out_ = false;
  Watchdog dog(pid_, config_.case_timeout_s);
  bool got = false;
  try {
    try {
      write_message(to_, request);
    } catch (const ProtocolError&) {
      // The worker closed its input: it is gone or going. What it said before that (an error
      // reply) is still to be read; else the read ends at once.
    }
    got = read_message(from_, reply);
  } catch (const ProtocolError&) {
    if (!dog.disarm()) throw;  // killed by the watchdog: the broken stream is its doing
  }
  timed_out_ = dog.disarm();
  if (timed_out_)
    throw TimedOut("no reply within --case-timeout " + seconds_text(config_.case_timeout_s) + " s (killed)");
  return got;
}

void WorkerSut::begin_request() {
  if (stderr_fd_ < 0) return;
  end_request();  // anything written between requests is echoed, not lost
  if (ftruncate(stderr_fd_, 0) != 0) {
    // Not fatal: the tail then holds older lines too.
  }
  echoed_ = 0;
}

void WorkerSut::end_request() {
  if (!config_.echo_stderr || stderr_fd_ < 0) return;
  char buf[8192];
  for (;;) {
    ssize_t n = pread(stderr_fd_, buf, sizeof buf, echoed_);
    if (n <= 0) break;
    echoed_ += n;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(STDERR_FILENO, buf + off, static_cast<size_t>(n - off));
      if (w <= 0) return;
      off += w;
    }
  }
}

std::string WorkerSut::stderr_tail() const {
  if (stderr_fd_ < 0) return "";
  struct stat st {};
  if (fstat(stderr_fd_, &st) != 0 || st.st_size == 0) return "";
  // The last 5 lines that are not blank, at most 600 bytes, on one line.
  const off_t from = st.st_size > 4096 ? st.st_size - 4096 : 0;
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  ssize_t n = pread(stderr_fd_, text.data(), text.size(), from);
  if (n <= 0) return "";
  text.resize(static_cast<size_t>(n));
  std::vector<std::string> lines;
  std::string line;
  auto flush = [&] {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    size_t start = line.find_first_not_of(' ');
    if (start != std::string::npos) lines.push_back(line.substr(start));
    line.clear();
  };
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') flush();
    else line += (u >= 0x20 && u < 0x7f) ? c : (c == '\t' || c == '\r') ? ' ' : '?';  // one line, printable
  }
  flush();
  if (lines.size() > 5) lines.erase(lines.begin(), lines.end() - 5);
  std::string tail;
  for (const auto& l : lines) tail += (tail.empty() ? "" : " | ") + l;
  if (tail.size() > 600) tail = "..." + tail.substr(tail.size() - 597);
  return tail.empty() ? "" : "; stderr: " + tail;
}

SutRun WorkerSut::run(const training::CaseSpec& spec, const RunRequest& ask) {
  // A one-rank worker would run a tp case on one rank, and a group runs its own size only: neither
  // is the case as specified (checked before a worker is started for it)
  const int ranks = spec.ranks();  // a case's ranks: tp within each of its pp stages, on each of its dp replicas
  const std::string dims = spec.parallel_dims();
  if (ranks > 1 && config_.ranks != ranks)
    throw SkippedBySut(dims + ": " +
                       (config_.ranks > 0 ? "this rank group has " + std::to_string(config_.ranks) + " ranks"
                                          : "this worker runs one rank (--ranks " + std::to_string(ranks) +
                                                " starts a rank group)"));
  if (ranks == 1 && config_.ranks > 0)
    throw SkippedBySut("tp 1: a rank group of " + std::to_string(config_.ranks) + " runs " + std::to_string(config_.ranks) +
                       " ranks only");
  if (pid_ < 0) {
    profile::Scope startup(profile::kStartup);  // the worker's process, its imports, its hello
    try {
      start();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(config_.name + " worker: " + e.what());
    }
  }
  std::optional<profile::Scope> request_scope(std::in_place, profile::kRequest);  // the request and its frames
  Message req;
  const int64_t id = next_id_++;
  req.header = {{"op", "run"}, {"id", id}, {"case", training::case_to_json(spec)}};
  if (ranks > 1) {  // a rank group's request (drivers/PROTOCOL.md, "Rank groups")
    req.header["tp"] = spec.tp;
    if (spec.pp > 1) req.header["pp"] = spec.pp;
    if (spec.dp > 1) req.header["dp"] = spec.dp;
  }
  if (config_.determinism_check) {
    // one check per case family: its executors share the eager form, and its checkpoints run
    // the same kernels again (a recompute is the forward's), so the no-checkpoint twin shares it
    training::CaseSpec family = training::without_checkpoints(spec);
    family.executor = training::ExecutorKind::Eager;
    if (checked_eager_.insert(training::case_to_json(family).dump()).second) req.header["determinism_check"] = true;
  }
  if (config_.send_frames) req.frames = case_frames(spec);
  if (ask.mask_frames) req.header["mask_frames"] = true;
  if (profile::on()) req.header["profile"] = true;  // the worker's own phases in timings.profile
  Message obs;
  begin_request();
  struct EndRequest {
    WorkerSut* w;
    ~EndRequest() { w->end_request(); }
  } end_request_at_exit{this};
  request_scope.reset();
  try {
    {
      profile::Scope exchange_scope(profile::kExchange);  // writing the request, the worker's run, reading its reply
      if (!exchange(req, &obs)) throw ProtocolError("the worker closed its output");
    }
    profile::Scope decode(profile::kDecode);
    if (obs.header.value("op", std::string()) != "error" && obs.header.value("id", int64_t{-1}) != id)
      throw ProtocolError("an observation for another request");
    SutRun out;
    out.result = run_result_of(obs, spec);
    if (obs.header.contains("recap")) {
      const Json& x = obs.header["recap"];
      if (x.contains("live_after")) out.live_after = x["live_after"].get<int64_t>();
      if (x.contains("hygiene")) out.hygiene = x["hygiene"].get<std::string>();
      if (auto ic = x.find("initcheck"); ic != x.end() && ic->is_object()) {
        training::InitObservation& o = out.init.emplace();
        auto count = [&](const char* k) {  // a malformed count reads as nothing checked, never a throw
          auto it = ic->find(k);
          return it != ic->end() && it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t{0};
        };
        o.launches = count("launches");
        o.bytes = count("bytes");
        if (auto u = ic->find("uninitialized"); u != ic->end() && u->is_array())
          for (const Json& line : *u)
            if (line.is_string()) o.uninitialized.push_back(line.get<std::string>());
      }
      out.backend = x.value("backend", std::string());
    }
    out.device_name = obs.header.value("device", std::string());
    if (profile::on())
      if (auto t = obs.header.find("timings"); t != obs.header.end() && t->is_object())
        if (auto p = t->find("profile"); p != t->end() && p->is_object()) out.worker_profile = *p;
    // A fatal reply: the worker's device is unusable and it exits (status 3) after it. It is
    // replaced before the next case, which would otherwise find it gone; when the failure is a
    // sticky CUDA error (the CUDA context is lost) the case is `crashed` with that error as its
    // reason, else the run's own verdict stands (a failed capture that left the generator unusable).
    if (auto f = obs.header.find("fatal"); f != obs.header.end() && f->is_boolean() && f->get<bool>()) {
      stop(/*grace_s=*/10);
      if (out.result.failure && sticky_cuda_error(out.result.failure->error)) {
        const std::string tail = stderr_tail();
        throw WorkerCrash(config_.name + " worker: the CUDA context is lost: " + out.result.failure->line() +
                              " (the worker " + last_exit_ + ")" + tail,
                          out.result.failure->error);
      }
      return out;
    }
    // A worker that asks to retire (its memory grew across cases) has answered: it is replaced
    // before the next case, not mid-case.
    if (auto r = obs.header.find("retire"); r != obs.header.end() && r->is_boolean() && r->get<bool>()) stop(/*grace_s=*/10);
    return out;
  } catch (const TimedOut& e) {
    std::string tail = stderr_tail();
    stop(/*grace_s=*/0);
    throw std::runtime_error(config_.name + " worker: " + e.what() + tail);
  } catch (const ProtocolError& e) {
    // The stream cannot be trusted any more: end this worker; the next case starts another.
    const bool refused = obs.header.is_object() && obs.header.value("op", std::string()) == "error";
    const bool closed = std::string(e.what()) == "the worker closed its output";
    std::string tail = refused ? "" : stderr_tail();
    stop(/*grace_s=*/closed ? 5 : 0);  // a worker that closed its output is exiting: let it say how
    throw WorkerCrash(config_.name + " worker: " + e.what() + (refused ? "" : " (the worker " + last_exit_ + ")") + tail,
                      refused ? "" : last_signal_);
  }
}

}  // namespace recap::sut
