// Phase flags, as Megatron-LM keeps them (is_graph_warmup / is_graph_capturing in
// megatron/core/transformer/cuda_graphs.py), plus autograd's "is checkpoint valid" switch.
//
// Checkpoint policies read these flags (the `skip` policy bypasses recompute while either is set,
// Megatron-LM PR #3919). Megatron sets and clears them with plain assignments, and nothing clears
// them when a capture throws: one failed capture leaves recompute disabled for the rest of
// training (bug class 6 of docs/recompute-and-rng.md). recap sets them only through the RAII
// scopes below, whose destructors restore the previous value on every exit path, exceptions
// included. The flags are per thread (one training loop per thread).
#pragma once

namespace recap::runtime {

bool is_graph_warmup();
bool is_graph_capturing();

// torch.autograd._is_checkpoint_valid(): false while a backward runs in grad-of-inputs style
// (torch.autograd.grad), which a reentrant checkpoint refuses.
bool is_checkpoint_valid();

// RAII, the base of the three scopes below: sets one of the thread's phase flags to `value` inside
// the scope (when `on`) and restores it after.
class PhaseFlagScope {
 public:
  PhaseFlagScope(const PhaseFlagScope&) = delete;
  PhaseFlagScope& operator=(const PhaseFlagScope&) = delete;

 protected:
  // `may_leak`: the restore is one that the phase-flag-leak fault can skip.
  PhaseFlagScope(bool* flag, bool value, bool on, bool may_leak);
  ~PhaseFlagScope();

 private:
  bool* flag_;
  bool previous_;
  bool may_leak_;
};

// RAII: is_graph_warmup() is true inside the scope (unless `on` is false) and restored after.
class GraphWarmupScope : public PhaseFlagScope {
 public:
  explicit GraphWarmupScope(bool on = true);
};

// RAII: is_graph_capturing() is true inside the scope (unless `on` is false) and restored after.
class GraphCaptureScope : public PhaseFlagScope {
 public:
  explicit GraphCaptureScope(bool on = true);
};

// RAII: a backward in grad-of-inputs style (torch.autograd.grad) when `grad_of_inputs`:
// is_checkpoint_valid() is false inside the scope.
class BackwardStyleScope : public PhaseFlagScope {
 public:
  explicit BackwardStyleScope(bool grad_of_inputs);
};

// Test support: both graph flags false and checkpointing valid.
bool phase_flags_clear();
// Clears the thread's flags, for a harness that runs independent campaigns in one process after
// one that may have leaked them (recap mutants, the phase-flag-leak fault). Never in training.
void reset_phase_flags();

}  // namespace recap::runtime
