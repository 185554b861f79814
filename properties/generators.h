// RapidCheck generators of cases, built from combinators so that shrinking moves toward fewer
// layers, smaller dims, fewer steps and flags off.
#pragma once

#include <optional>

#include <rapidcheck.h>

#include "harness/device/device.h"
#include "harness/runtime/spec.h"

namespace recap::properties {

struct GenConfig {
  device::Backend backend = device::Backend::Sim;  // sim: hidden 8-64, tokens 4-64; cuda: larger
  std::optional<runtime::CheckpointPolicy> policy;  // fixed, or drawn when absent
};

// A valid case covering the whole configuration space of the runtime (issue 4, item 1).
rc::Gen<runtime::CaseSpec> gen_case(const GenConfig& config);

}  // namespace recap::properties
