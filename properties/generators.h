// RapidCheck generators of cases, built from combinators so that shrinking moves toward fewer
// layers, smaller dims, fewer steps and flags off.
#pragma once

#include <optional>

#include <rapidcheck.h>

#include "harness/device/device.h"
#include "harness/sut/capabilities.h"
#include "harness/training/spec.h"

namespace recap::properties {

struct GenConfig {
  // The tensor sizes drawn are those of this backend's campaigns: sim hidden 8-64, tokens 4-64;
  // cuda larger (recap fuzz --dims chooses)
  device::Backend backend = device::Backend::Sim;
  std::optional<training::CheckpointPolicy> policy;  // fixed, or drawn when absent
  // Keep the knobs that are broken whatever the policy in their sound setting, so that a campaign
  // judges the policy alone: graphed cases use the graph-safe generator (a host generator bakes
  // offsets into graphs, bug classes 4/5); reentrant checkpoints get a plain warmup backward
  // (Megatron-LM #2758); under skip, eager cases use the host generator and graphed cases have no
  // dropout inside checkpointed layers (skip checkpoints as naive outside graph phases: live RNG
  // handles, bug class 3). Absent: sound when `policy` is fixed to skip or graph-safe, everything
  // drawn otherwise. A campaign fixed to naive draws graphed cases with the host generator (its
  // capture failure, bug class 14) and explores its eager defect (bug class 3) on eager cases.
  std::optional<bool> sound_knobs;
  // What the system under test runs (its hello's capabilities): every dimension is drawn from its
  // values only (shrinking toward the first of them in the generator's order), and a value the
  // case's executor does not run (caps.per_executor) is replaced by the first one it does. By
  // default recap's own, for which the draws are exactly those recap has always made (the
  // restriction is the identity: Generators.RecapDistributionIsPinned).
  sut::Capabilities caps = sut::recap_capabilities();
  // Campaigns that judge graphs alone (the no-false-alarm campaigns): every layer unchecked
  // (checkpoint none) and without dropout. Off: the draws are unchanged.
  bool no_checkpoint = false;
  bool no_dropout = false;
  // Fault points every drawn case carries (CaseSpec::faults; recap mutants, --fault). Empty: none.
  std::vector<std::string> faults;
};

// A valid case covering the whole configuration space of the system under test. Throws
// std::invalid_argument when config.policy is fixed to a policy the system does not run.
rc::Gen<training::CaseSpec> gen_case(const GenConfig& config);

}  // namespace recap::properties
