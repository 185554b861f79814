// rng_ledger: every recomputed random draw has the (seed, offset) of its forward draw, and no
// forward mask repeats across steps. The most precise RNG oracle: it names the draws, where the
// bitwise comparisons only see their effect (docs/recompute-and-rng.md, bug classes 3, 4, 5, 16,
// 17). The ledger records the values kernels realized, so a graph replay is judged too.
#include "properties/oracles/oracle.h"

namespace recap::properties {

namespace {
CheckResult judge(Runs& runs) {
  const char* p = "rng_ledger";
  const training::RunResult& r = runs.main();
  size_t draws = 0;
  for (const auto& s : r.steps) draws += s.ledger.size();
  if (r.recompute_mismatches > 0 || r.reused_masks > 0) {
    std::string why;
    if (r.recompute_mismatches > 0)
      why = std::to_string(r.recompute_mismatches) + " recomputed draws differ from their forward draw";
    if (r.reused_masks > 0)
      why += (why.empty() ? "" : "; ") + std::to_string(r.reused_masks) + " forward masks reused across steps";
    return bad(p, Disposition::Incorrect, why + " (" + r.ledger_summary + ")");
  }
  if (draws == 0) return skipped(p, runs.ran() ? "no random draws" : "the run failed");
  return passed(p);
}
}  // namespace

Oracle rng_ledger_oracle() {
  return {"rng_ledger", "every recomputed draw equals its forward draw; no mask reused across steps", judge};
}

}  // namespace recap::properties
