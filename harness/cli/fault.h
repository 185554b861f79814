// Fault injection for the isolation tests: RECAP_FAULT_ABORT="JOB:N" makes worker job JOB of --jobs
// (0 for a campaign in one process) abort after its N-th case (N = 0: as it starts, before it
// claims a chunk), so a test can watch a worker die.
// Off unless the variable is set; when it is not, maybe_abort is one comparison.
#pragma once

namespace recap::cli {

// Aborts the process when RECAP_FAULT_ABORT names this job and `done` cases.
void maybe_abort(int job, int done);

}  // namespace recap::cli
