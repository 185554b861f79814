// eager_vs_graphed: a graphed case (per-layer or full-iteration) gives the same loss, gradients and
// parameters as the same case run eagerly, bit for bit, at every step (warmup, first replay, later
// replays with fresh inputs) and microbatch. Catches stale static inputs, aliased outputs, RNG
// consumed by warmup or baked into a graph (docs/recompute-and-rng.md, bug classes 4, 5, 7, 8, 10,
// 13).
#include "properties/oracles/oracle.h"

namespace recap::properties {

namespace {
CheckResult judge(Runs& runs) {
  const char* p = "eager_vs_graphed";
  if (runs.spec().executor == training::ExecutorKind::Eager) return skipped(p, "an eager case");
  if (!runs.ran()) return skipped(p, "the run failed");
  return compare_with_twin(p, runs, runs.eager_twin(), "the eager twin", "vs eager");
}
}  // namespace

Oracle eager_vs_graphed_oracle() {
  return {"eager_vs_graphed", "loss, gradients, parameters bitwise equal to the eager run at every step and microbatch",
          judge};
}

}  // namespace recap::properties
