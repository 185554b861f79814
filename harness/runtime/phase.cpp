#include "harness/runtime/phase.h"

#include <exception>

#include "harness/runtime/faults.h"

namespace recap::runtime {
namespace {

thread_local bool g_warmup = false;
thread_local bool g_capturing = false;
thread_local bool g_checkpoint_valid = true;

}  // namespace

bool is_graph_warmup() { return g_warmup; }
bool is_graph_capturing() { return g_capturing; }
bool is_checkpoint_valid() { return g_checkpoint_valid; }
bool phase_flags_clear() { return !g_warmup && !g_capturing && g_checkpoint_valid; }
void reset_phase_flags() {
  g_warmup = false;
  g_capturing = false;
  g_checkpoint_valid = true;
}

GraphWarmupScope::GraphWarmupScope(bool on) : previous_(g_warmup) {
  if (on) g_warmup = true;
}
// phase-flag-leak (bug class 6): Megatron's plain assignments, which an exception skips.
static bool leaks() { return fault_on(Fault::PhaseFlagLeak) && std::uncaught_exceptions() > 0; }

GraphWarmupScope::~GraphWarmupScope() {
  if (!leaks()) g_warmup = previous_;
}

GraphCaptureScope::GraphCaptureScope(bool on) : previous_(g_capturing) {
  if (on) g_capturing = true;
}
GraphCaptureScope::~GraphCaptureScope() {
  if (!leaks()) g_capturing = previous_;
}

BackwardStyleScope::BackwardStyleScope(bool grad_of_inputs) : previous_(g_checkpoint_valid) {
  if (grad_of_inputs) g_checkpoint_valid = false;
}
BackwardStyleScope::~BackwardStyleScope() { g_checkpoint_valid = previous_; }

}  // namespace recap::runtime
