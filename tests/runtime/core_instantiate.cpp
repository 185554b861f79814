// Runs the runtime core tests on one backend: compiled once per test binary with
// RECAP_CORE_BACKEND=Sim (runtime_core_test, label unit) or Cuda (runtime_core_gpu_test, label
// gpu; each case skips without a GPU).
#include <gtest/gtest.h>

#include <string>

#include "tests/runtime/core_test_util.h"

namespace recap::runtime::coretest {

// One level of indirection so that RECAP_CORE_BACKEND is expanded before gtest pastes it into names.
#define RECAP_INSTANTIATE(prefix, ...) INSTANTIATE_TEST_SUITE_P(prefix, __VA_ARGS__)
#define RECAP_CORE_ON(Suite)                                                                 \
  RECAP_INSTANTIATE(RECAP_CORE_BACKEND, Suite,                                               \
                    ::testing::Values(::recap::device::BackendChoice::RECAP_CORE_BACKEND),   \
                    [](const auto& info) { return ::recap::name_of(::recap::device::kBackendChoiceNames, info.param); })

using AllocatorTest = CoreTest;
using GeneratorTest = CoreTest;
using TrackerTest = CoreTest;
using LedgerTest = CoreTest;
using ContextTest = CoreTest;
RECAP_CORE_ON(AllocatorTest);
RECAP_CORE_ON(GeneratorTest);
RECAP_CORE_ON(TrackerTest);
RECAP_CORE_ON(LedgerTest);
RECAP_CORE_ON(ContextTest);

}  // namespace recap::runtime::coretest
