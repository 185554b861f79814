// recompute_on_off: a case with checkpoints gives bitwise the same results as the same case with
// every checkpoint off. With dropout this is where a recompute that draws another mask shows
// (a live RNG handle saved instead of a snapshot; docs/recompute-and-rng.md, bug classes 3, 16,
// 17), and where parameters hidden inside a checkpoint lose their gradients (class 11).
// First, by observation: after every step (in a replay, what its graph's capture observed) each
// without-output checkpoint's consumer reads the output the recompute wrote, its storage and its
// address (training::Rebinding), not the storage discarded at the forward (class 19: a graph, or a
// consumer, left on the old storage reads stale memory, whatever values it happens to hold).
#include "properties/oracles/oracle.h"

namespace recap::properties {

namespace {
// "" when every observed rebinding reads its recomputed output, else the first that does not.
// `count` gets the rebindings observed.
std::string rebinding_problem(const training::RunResult& r, size_t* count) {
  *count = 0;
  for (const auto& s : r.steps)
    for (const auto& b : s.rebindings) {
      ++*count;
      const std::string at = "step " + std::to_string(s.step) + ", microbatch " + std::to_string(b.microbatch) + ": " +
                             b.layer + "'s consumer ";
      if (!b.rebound)
        return at + "ran its backward with " + std::to_string(b.holes) + " discarded references never rebound";
      for (uint64_t id : b.read)
        if (id != b.recomputed)
          return at + "reads storage " + std::to_string(id) + ", not the recomputed output (storage " +
                 std::to_string(b.recomputed) + "): the rebinding did not reach it";
      if (b.misplaced > 0)
        return at + "reads " + std::to_string(b.misplaced) + " references at another address than the recomputed output's";
    }
  return "";
}

CheckResult judge(Runs& runs) {
  const char* p = "recompute_on_off";
  if (!runs.spec().any_checkpoint()) return skipped(p, "no checkpoint");
  size_t rebindings = 0;
  if (std::string why = rebinding_problem(runs.main(), &rebindings); !why.empty())
    return bad(p, Disposition::Incorrect, "without-output rebinding: " + why);
  if (!runs.ran()) return skipped(p, "the run failed");
  CheckResult c = compare_with_twin(p, runs, runs.no_checkpoint_twin(), "the no-checkpoint twin", "vs no checkpoint");
  if (c.disposition == Disposition::Passed && rebindings > 0)
    c.evidence += "; " + std::to_string(rebindings) + " without-output rebindings observed, each consumer reading its recomputed output";
  return c;
}
}  // namespace

Oracle recompute_on_off_oracle() {
  return {"recompute_on_off",
          "bitwise equal to the same case without checkpointing; a without-output checkpoint's consumer reads the recomputed output",
          judge};
}

}  // namespace recap::properties
