// Fault injection for the isolation tests: RECAP_FAULT_ABORT="SHARD:N" makes the process running
// shard SHARD abort after its N-th case, so a test can watch a worker die. Off unless the variable
// is set; when it is not, maybe_abort is one comparison.
#pragma once

namespace recap::cli {

// Aborts the process when RECAP_FAULT_ABORT names this shard and `done` cases.
void maybe_abort(int shard, int done);

}  // namespace recap::cli
