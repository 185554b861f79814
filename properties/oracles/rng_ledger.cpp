// rng_ledger: every recomputed random draw covers exactly its forward draw's Philox range (seed,
// offset, count), no forward mask repeats across steps, and no two distinct draws of one Philox
// stream share a value (overlapping ranges correlate their masks: an increment that does not
// cover its draw). The most precise RNG oracle: it names the draws, where the
// bitwise comparisons only see their effect (docs/recompute-and-rng.md, bug classes 3, 4, 5, 16,
// 17). The ledger records the values kernels realized, so a graph replay is judged too.
#include "harness/runtime/phase.h"
#include "properties/oracles/oracle.h"

namespace recap::properties {

namespace {
// Another system (CONTRACT, rng_ledger): run_result_of judged one recompute draw per checkpointed
// forward draw, digest for digest (ledger_problem / ledger_evidence); reuse keeps recap's rule.
CheckResult judge_other_system(Runs& runs) {
  const char* p = "rng_ledger";
  const training::RunResult& r = runs.main();
  if (!r.ledger_problem.empty() || r.reused_masks > 0) {
    std::string why = r.ledger_problem;
    if (r.reused_masks > 0)
      why += (why.empty() ? "" : "; ") + std::to_string(r.reused_masks) + " forward masks reused across steps";
    return bad(p, Disposition::Incorrect, why + " (" + r.ledger_summary + ")");
  }
  if (r.ledger_evidence.empty())
    return skipped(p, runs.ran() ? "no draw inside a checkpoint observed" : "the run failed");
  return passed(p, r.ledger_evidence + "; no forward mask reused across steps");
}

CheckResult judge(Runs& runs) {
  const char* p = "rng_ledger";
  if (runs.options().sut && !runs.options().sut->recap_runtime()) return judge_other_system(runs);
  const training::RunResult& r = runs.main();
  size_t forward = 0, recomputed = 0;
  for (const auto& s : r.steps)
    for (const auto& e : s.ledger) {
      forward += e.site.phase == runtime::Phase::Forward;
      recomputed += e.site.phase == runtime::Phase::Recompute;
    }
  if (r.recompute_mismatches > 0 || r.reused_masks > 0 || r.repeated_draws > 0 || r.overlapping_draws > 0) {
    std::string why;
    auto add = [&why](size_t n, const char* what) {
      if (n > 0) why += (why.empty() ? "" : "; ") + std::to_string(n) + what;
    };
    add(r.recompute_mismatches, " recomputed draws differ from their forward draw");
    add(r.reused_masks, " forward masks reused across steps");
    add(r.repeated_draws, " draws repeat another site's or microbatch's (seed, offset)");
    add(r.overlapping_draws, " draws start inside another draw's Philox value range");
    return bad(p, Disposition::Incorrect, why + " (" + r.ledger_summary + ")");
  }
  if (forward + recomputed == 0) return skipped(p, runs.ran() ? "no random draws" : "the run failed");
  return passed(p, std::to_string(recomputed) + " recomputed draws equal their forward draws; " + std::to_string(forward) +
                       " forward draws over " + std::to_string(r.steps.size()) + " steps, none reused across steps; " +
                       "no two value ranges overlap in " + std::to_string(r.draw_streams) + " Philox streams");
}
}  // namespace

Oracle rng_ledger_oracle() {
  return {"rng_ledger",
          "every recomputed draw equals its forward draw; no mask reused across steps; no two draws share a Philox value",
          judge};
}

}  // namespace recap::properties
