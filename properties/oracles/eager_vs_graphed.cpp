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
  const training::RunResult& r = runs.main();
  if (!r.captures) return skipped(p, "the system under test does not report graph captures and replays");
  int replays = 0;
  for (const auto& s : r.steps)
    for (const auto& [label, n] : s.replays) replays += n;
  if (!r.captured || r.graphs == 0 || replays == 0)
    return skipped(p, "no graph was captured and replayed: nothing graphed to compare");
  CheckResult c = compare_with_twin(p, runs, runs.eager_twin(), "the eager twin", "vs eager");
  if (c.disposition == Disposition::Passed)
    c.evidence = std::to_string(r.graphs) + (r.graphs == 1 ? " graph" : " graphs") + " replayed " + std::to_string(replays) +
                 " times; " + c.evidence;
  return c;
}
}  // namespace

Oracle eager_vs_graphed_oracle() {
  return {"eager_vs_graphed", "loss, gradients, parameters bitwise equal to the eager run at every step and microbatch",
          judge};
}

}  // namespace recap::properties
