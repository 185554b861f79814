// Runs the runtime core tests on the `sim` backend (runtime_core_test, label unit).
#include <gtest/gtest.h>

#include <string>

#include "tests/runtime/core_test_util.h"

namespace recap::runtime::coretest {

#define RECAP_CORE_ON(Suite) \
  INSTANTIATE_TEST_SUITE_P(Sim, Suite, ::testing::Values(::recap::device::BackendChoice::Sim), \
                           [](const auto&) { return std::string("sim"); })

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
