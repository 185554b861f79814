// recap worker: serves recap's own runtime over recap.worker/1 on stdin/stdout (harness/sut/worker.h,
// drivers/PROTOCOL.md). Exit 0 on shutdown or end of input, 2 on a protocol error.
#include <unistd.h>

#include <cstdio>

#include "harness/cli/cli.h"
#include "harness/runtime/faults.h"
#include "harness/sut/worker.h"

namespace recap::cli {

namespace {
struct WorkerArgs {
  std::string backend = "sim";
};

int worker(const WorkerArgs& a) {
  device::BackendChoice choice = device::BackendChoice::Sim;
  device::parse_backend_choice(a.backend, &choice);
  open_device(a.backend);  // an unusable backend is bad usage, said once
  runtime::g_process_killing_faults_allowed = true;  // a case that kills us costs this worker only
  // Only protocol messages go to the real stdout: anything else printed (by recap or a library)
  // goes to stderr, where the client keeps a tail for crash reports.
  int proto = dup(STDOUT_FILENO);
  if (proto < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) throw UsageError("cannot set up the protocol stream");
  FILE* out = fdopen(proto, "wb");
  if (!out) throw UsageError("cannot open the protocol stream");
  int rc = sut::serve(stdin, out, choice);
  std::fclose(out);
  return rc;
}
}  // namespace

void add_worker_command(CLI::App& app, Runner* runner) {
  auto [cmd, args] = add_command<WorkerArgs>(app, runner, worker,
      "worker",
      "Serve recap's own runtime over the worker protocol recap.worker/1 on stdin/stdout (drivers/PROTOCOL.md). "
      "Exit 0 on shutdown or end of input, 2 on a protocol error.");
  add_backend_option(*cmd, &args->backend);
}

}  // namespace recap::cli
