// --profile's summary (docs/profile.md): over the case reports that hold timings.profile, each
// phase's median and p90 per case and its share of the cases' time. Rows ("phase", by "kind"):
//   case             the cases' whole time (wall_ms)
//   run.<name>       a run's time: the case's own ("run.case"), each twin, hygiene's injected run
//   runs.<phase>     a phase summed over a case's runs (startup, model_build, eager_steps, ...)
//   runs.<counter>   kind "within": copies and synchronizations inside those phases
//   worker.<phase>   a worker's own phases (its reply's timings.profile), inside runs.exchange
//   oracle.<name>    an oracle's own time, less the runs it asked for (reference: the fp64 reference)
//   other            what no run or oracle holds
// The run, oracle and other rows add up to the case row; the phase rows (with runs.other) to the
// run rows.
#pragma once

#include <string>
#include <vector>

#include "harness/base/json.h"

namespace recap::reports {

// {"cases", "wall_ms", "phases": [{phase, kind, cases, median_ms, p90_ms, total_ms, share}]};
// null when no report holds a profile. A phase a case lacks counts 0 for it ("cases" counts those
// that have it); medians and p90s by nearest rank; share = the phase's total / the cases' total.
Json profile_summary_json(const std::vector<const Json*>& case_reports);
// The summary as the console's table ("" for null).
std::string profile_table_text(const Json& summary);

}  // namespace recap::reports
