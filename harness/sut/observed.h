// What recap reads from another system's observation beyond its tensors (CONTRACT.md, issue 18,
// "observations, not labels"): whether graphs were captured and replayed, from the captures and
// replays it observed, and its RNG ledger, from its dropout draws. run_result_of (worker.cpp)
// calls these for systems other than recap's own runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/runtime/phase.h"
#include "harness/training/executor.h"

namespace recap::sut {

// Another system's dropout draw as its observation reported it (CONTRACT, "masks").
struct MaskDraw {
  std::string layer, op;
  int microbatch = 0;
  runtime::Phase pass = runtime::Phase::Forward;
  int index = 0;
  bool checkpointed = false;
  uint64_t digest = 0;
};

// CONTRACT, rng_ledger: per (step, layer, op, microbatch) the recompute draws, by index, are
// exactly the checkpointed forward draws, by index, digest for digest. Missing, extra or different
// ones add to r.recompute_mismatches; the first is r.ledger_problem ("block0.drop1 step 2 mb 0: 0
// recompute draws for 1 checkpointed forward draw"), else what was compared is r.ledger_evidence.
// `steps`: the draws of each of r.steps.
void judge_recompute_draws(training::RunResult& r, const std::vector<std::vector<MaskDraw>>& steps);

// CONTRACT, graphs: r.captured and r.graphs from r.captures and the steps' replays (never from the
// phase labels), and r.driver_error when the case asks for graphs the observation does not show.
void judge_graphs(training::RunResult& r, const training::CaseSpec& spec);

}  // namespace recap::sut
