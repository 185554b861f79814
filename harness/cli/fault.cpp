// Fault injection for the crash-isolation tests (fault.h).
#include "harness/cli/fault.h"

#include <cstdio>
#include <cstdlib>

namespace recap::cli {

namespace {
struct Fault {
  int job = -1;
  int after = -1;
};
Fault fault_from_env() {
  Fault f;
  if (const char* e = std::getenv("RECAP_FAULT_ABORT")) std::sscanf(e, "%d:%d", &f.job, &f.after);
  return f;
}
}  // namespace

void maybe_abort(int job, int done) {
  static const Fault fault = fault_from_env();  // read once
  if (fault.after < 0 || fault.job != job || done != fault.after) return;
  std::fprintf(stderr, "recap: RECAP_FAULT_ABORT: aborting job %d after case %d\n", fault.job, done);
  std::abort();
}

}  // namespace recap::cli
