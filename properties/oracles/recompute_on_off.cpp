// recompute_on_off: a case with checkpoints gives bitwise the same results as the same case with
// every checkpoint off. With dropout this is where a recompute that draws another mask shows
// (a live RNG handle saved instead of a snapshot; docs/recompute-and-rng.md, bug classes 3, 16,
// 17), and where parameters hidden inside a checkpoint lose their gradients (class 11).
#include "properties/oracles/oracle.h"

namespace recap::properties {

namespace {
CheckResult judge(Runs& runs) {
  const char* p = "recompute_on_off";
  if (!runs.spec().any_checkpoint()) return skipped(p, "no checkpoint");
  if (!runs.ran()) return skipped(p, "the run failed");
  return compare_with_twin(p, runs, runs.no_checkpoint_twin(), "the no-checkpoint twin", "vs no checkpoint");
}
}  // namespace

Oracle recompute_on_off_oracle() {
  return {"recompute_on_off", "bitwise equal to the same case without checkpointing", judge};
}

}  // namespace recap::properties
