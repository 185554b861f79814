#include "harness/sut/sut.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "harness/sut/protocol.h"
#include "harness/sut/worker.h"

extern char** environ;

namespace recap::sut {

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
  stop(/*kill_it=*/false);
}

void WorkerSut::start() {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error(std::string("cannot create pipes: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&fa, fd);
  std::vector<char*> argv;
  for (auto& a : argv_) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = posix_spawnp(&pid_, argv_[0].c_str(), &fa, nullptr, argv.data(), environ);  // PATH lookup: python3
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    pid_ = -1;
    throw std::runtime_error("cannot start the worker " + argv_[0] + ": " + std::strerror(rc));
  }
  to_ = fdopen(in[1], "wb");
  from_ = fdopen(out[0], "rb");
  // A worker that died leaves a broken pipe: a write error, not a SIGPIPE that ends recap.
  signal(SIGPIPE, SIG_IGN);
}

void WorkerSut::stop(bool kill_it) {
  if (to_) std::fclose(to_);
  if (from_) std::fclose(from_);
  to_ = from_ = nullptr;
  if (pid_ > 0) {
    int status = 0;
    if (kill_it) kill(pid_, SIGKILL);  // a worker in any state: its case is over
    waitpid(pid_, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
      last_exit_ = "died of signal " + std::to_string(WTERMSIG(status));
    else if (WIFEXITED(status))
      last_exit_ = "exited with status " + std::to_string(WEXITSTATUS(status));
    else
      last_exit_ = "was ended by recap";
  }
  pid_ = -1;
}

SutRun WorkerSut::run(const training::CaseSpec& spec) {
  if (pid_ < 0) start();
  Message req;
  const int64_t id = next_id_++;
  req.header = {{"op", "run"}, {"id", id}, {"case", training::case_to_json(spec)}};
  if (send_frames_) req.frames = case_frames(spec);
  Message obs;
  try {
    write_message(to_, req);
    if (!read_message(from_, &obs)) throw ProtocolError("the worker closed its output");
    if (obs.header.value("op", std::string()) != "error" && obs.header.value("id", int64_t{-1}) != id)
      throw ProtocolError("an observation for another request");
    SutRun out;
    out.result = run_result_of(obs, spec);
    if (obs.header.contains("recap")) {
      const Json& x = obs.header["recap"];
      out.live_after = x.value("live_after", int64_t{0});
      out.hygiene = x.value("hygiene", std::string());
      out.backend = x.value("backend", std::string());
    }
    out.device_name = obs.header.value("device", std::string());
    return out;
  } catch (const ProtocolError& e) {
    // The stream cannot be trusted any more: end this worker; the next case starts another.
    const bool refused = obs.header.is_object() && obs.header.value("op", std::string()) == "error";
    stop(/*kill_it=*/true);
    throw std::runtime_error(name_ + " worker: " + e.what() + (refused ? "" : " (the worker " + last_exit_ + ")"));
  }
}

}  // namespace recap::sut
