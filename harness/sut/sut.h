// A system under test seen from recap's oracles: it runs a case and returns the run they judge.
// recap's own runtime runs in process unless a Sut is given (properties::OracleOptions::sut);
// WorkerSut runs cases in a persistent worker process speaking recap.worker/1 (drivers/PROTOCOL.md),
// started once and restarted after it dies, so a case that kills it costs that case alone.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "harness/training/executor.h"

namespace recap::sut {

struct SutRun {
  training::RunResult result;
  int64_t live_after = 0;  // device bytes the run left behind
  std::string hygiene;     // when the capture failed: training::hygiene_after_failed_capture
  std::string device_name, backend;  // what the worker ran it on
};

class Sut {
 public:
  virtual ~Sut() = default;
  virtual std::string name() const = 0;
  // Whether it is recap's own runtime (whose fp64 reference recap can compute without its masks).
  virtual bool recap_runtime() const = 0;
  // Runs the case. Throws SkippedBySut when the system cannot run it as specified, and
  // std::runtime_error with one line when it could not give a run (the worker died, talked
  // garbage, refused the case): the oracles record the case as crashed.
  virtual SutRun run(const training::CaseSpec& spec) = 0;
};

// recap's runtime behind `argv` (e.g. {"/path/recap", "worker", "--backend", "sim"}).
class WorkerSut : public Sut {
 public:
  // `send_frames`: send each case's parameters and data (a framework needs them; recap's own
  // worker derives them from the seeds).
  WorkerSut(std::string name, std::vector<std::string> argv, bool send_frames, bool recap_runtime)
      : name_(std::move(name)), argv_(std::move(argv)), send_frames_(send_frames), recap_runtime_(recap_runtime) {}
  ~WorkerSut() override;
  std::string name() const override { return name_; }
  bool recap_runtime() const override { return recap_runtime_; }
  SutRun run(const training::CaseSpec& spec) override;

 private:
  void start();
  void stop(bool kill_it);  // closes the pipes, reaps the process (killed first when asked); how it ended: last_exit_
  std::string name_;
  std::vector<std::string> argv_;
  bool send_frames_;
  bool recap_runtime_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  int64_t next_id_ = 1;
  std::string last_exit_;
};

}  // namespace recap::sut
