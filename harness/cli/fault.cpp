// Fault injection for the crash-isolation tests (fault.h).
#include "harness/cli/fault.h"

#include <cstdio>
#include <cstdlib>

namespace recap::cli {

namespace {
struct Fault {
  int shard = -1;
  int after = -1;
};
Fault fault_from_env() {
  Fault f;
  if (const char* e = std::getenv("RECAP_FAULT_ABORT")) std::sscanf(e, "%d:%d", &f.shard, &f.after);
  return f;
}
}  // namespace

void maybe_abort(int shard, int done) {
  static const Fault fault = fault_from_env();  // read once
  if (fault.after < 0 || fault.shard != shard || done != fault.after) return;
  std::fprintf(stderr, "recap: RECAP_FAULT_ABORT: aborting shard %d after case %d\n", fault.shard, done);
  std::abort();
}

}  // namespace recap::cli
