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
  const Run& plain = runs.no_checkpoint_twin();
  std::string trouble = twin_trouble("the no-checkpoint twin", plain);
  if (!trouble.empty()) return skipped(p, trouble);
  if (auto d = first_divergence(runs.main(), *plain.result)) {
    CheckResult c = bad(p, Disposition::Incorrect, "vs no checkpoint: " + d->describe());
    c.divergence = d;
    return c;
  }
  return passed(p);
}
}  // namespace

Oracle recompute_on_off_oracle() {
  return {"recompute_on_off", "bitwise equal to the same case without checkpointing", judge};
}

}  // namespace recap::properties
