// Diagnosis: the bug class (docs/recompute-and-rng.md, section 3) a failure's symptoms match, when
// a rule recognises them. Rules read only what any system under test reports (the failing check,
// its error and first divergence) and the case's configuration, never the fault points a case
// carries, so a finding in a real framework is diagnosed the same way as a mutant of recap's.
#pragma once

#include <string>

#include "properties/oracles.h"

namespace recap::properties {

// "class 13: graphs read memory something else overwrote (...)", or "" when no rule matches or the
// case did not fail. One line.
std::string diagnose(const CaseReport& r);

}  // namespace recap::properties
