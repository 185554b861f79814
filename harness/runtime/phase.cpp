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

// phase-flag-leak (bug class 6): Megatron's plain assignments, which an exception skips.
static bool leaks() { return fault_on(Fault::PhaseFlagLeak) && std::uncaught_exceptions() > 0; }

PhaseFlagScope::PhaseFlagScope(bool* flag, bool value, bool on, bool may_leak)
    : flag_(flag), previous_(*flag), may_leak_(may_leak) {
  if (on) *flag_ = value;
}
PhaseFlagScope::~PhaseFlagScope() {
  if (!(may_leak_ && leaks())) *flag_ = previous_;
}

GraphWarmupScope::GraphWarmupScope(bool on) : PhaseFlagScope(&g_warmup, true, on, /*may_leak=*/true) {}
GraphCaptureScope::GraphCaptureScope(bool on) : PhaseFlagScope(&g_capturing, true, on, /*may_leak=*/true) {}
BackwardStyleScope::BackwardStyleScope(bool grad_of_inputs)
    : PhaseFlagScope(&g_checkpoint_valid, false, grad_of_inputs, /*may_leak=*/false) {}

}  // namespace recap::runtime
