// Shared by the executor tests (sim and gpu): the acceptance stack and bitwise comparison of runs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness/training/executor.h"
#include "harness/training/spec.h"

namespace recap::training::testing {

// The acceptance stack: 4 transformer blocks, dropout 0.1, every block checkpointed (full),
// graph-safe policy, 2 microbatches, 3 warmup steps + capture + 5 replays, SGD. Small dims for sim.
inline CaseSpec acceptance_spec(ExecutorKind executor, bool checkpoint = true) {
  CaseSpec s;
  s.name = "acceptance";
  s.model.hidden = 16;
  s.model.tokens = 8;
  s.model.dtype = DType::F32;
  for (int i = 0; i < 4; ++i) {
    models::LayerSpec l;
    l.kind = "block";
    l.heads = 2;
    l.ffn_hidden = 32;
    l.dropout = 0.1f;
    s.model.layers.push_back(l);
    LayerFlags f;
    f.checkpoint = checkpoint ? CheckpointGranularity::Full : CheckpointGranularity::None;
    f.graphed = true;
    s.layers.push_back(f);
  }
  // CaseSpec's defaults for the rest: reentrant style, graph-safe policy and generator, shared
  // device state, backward warmup, shared pool, lr 0.05.
  s.executor = executor;
  s.warmup = 3;
  s.replays = 5;
  s.microbatches = 2;
  s.order = {1, 1, -1, -1};
  s.param_seed = 11;
  s.data_seed = 22;
  s.rng_seed = 33;
  return s;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// "" when a and b are bitwise equal at every step (losses, every microbatch's gradients, the
// step's gradients, the parameters after the update); else the first difference.
inline std::string first_difference(const RunResult& a, const RunResult& b) {
  if (a.steps.size() != b.steps.size())
    return "steps: " + std::to_string(a.steps.size()) + " vs " + std::to_string(b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    const StepRecord& x = a.steps[s];
    const StepRecord& y = b.steps[s];
    std::string at = "step " + std::to_string(x.step) + " (" + x.phase + " vs " + y.phase + ")";
    if (x.microbatches.size() != y.microbatches.size()) return at + ": microbatch count";
    for (size_t m = 0; m < x.microbatches.size(); ++m) {
      const auto& p = x.microbatches[m];
      const auto& q = y.microbatches[m];
      if (std::memcmp(&p.loss, &q.loss, sizeof(float)) != 0)
        return at + " microbatch " + std::to_string(m) + ": loss " + std::to_string(p.loss) + " vs " +
               std::to_string(q.loss);
      if (p.grads.size() != q.grads.size()) return at + ": gradient count";
      for (size_t i = 0; i < p.grads.size(); ++i)
        if (!same_bits(p.grads[i], q.grads[i]))
          return at + " microbatch " + std::to_string(m) + ": gradient of " + a.param_names[i] + " differs";
    }
    if (x.grads.size() != y.grads.size()) return at + ": gradient count";
    for (size_t i = 0; i < x.grads.size(); ++i)
      if (!same_bits(x.grads[i], y.grads[i])) return at + ": gradient of " + a.param_names[i] + " differs";
    for (size_t i = 0; i < x.params.size(); ++i)
      if (!same_bits(x.params[i], y.params[i])) return at + ": parameter " + a.param_names[i] + " differs";
  }
  return "";
}

// Non-vacuity: the run trained (losses change, gradients not all zero, dropout drew).
inline void expect_non_vacuous(const RunResult& r) {
  ASSERT_FALSE(r.steps.empty());
  bool nonzero = false;
  for (const auto& g : r.steps[0].grads)
    for (float v : g) nonzero = nonzero || v != 0.0f;
  EXPECT_TRUE(nonzero) << "all gradients are zero";
  EXPECT_NE(r.steps.front().microbatches[0].loss, r.steps.back().microbatches[0].loss);
  EXPECT_FALSE(r.steps[0].ledger.empty()) << "no random draws were logged";
}

}  // namespace recap::training::testing
