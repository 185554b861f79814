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
  const Run& eager = runs.eager_twin();
  std::string trouble = twin_trouble("the eager twin", eager);
  if (!trouble.empty()) return skipped(p, trouble);
  if (auto d = first_divergence(runs.main(), *eager.result)) {
    CheckResult c = bad(p, Disposition::Incorrect, "vs eager: " + d->describe());
    c.divergence = d;
    return c;
  }
  return passed(p);
}
}  // namespace

Oracle eager_vs_graphed_oracle() {
  return {"eager_vs_graphed", "loss, gradients, parameters bitwise equal to the eager run at every step and microbatch",
          judge};
}

}  // namespace recap::properties
