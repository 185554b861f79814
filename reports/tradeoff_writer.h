// Writing a trade-off report, recap.tradeoff/1 (reports/schema/recap.tradeoff.schema.json): each
// part of tradeoff.h's model as JSON, in the schema's field names. A figure that is absent is
// written as null, never as 0, and a non-finite number (which the schema has no place for) as null
// too. `recap tradeoff` (harness/cli/tradeoff_cmd.cpp) adds fields of its own (the schema allows
// more: each configuration's checks and case) and reads the whole back with read_tradeoff, so
// that what it writes is what `recap report` reads.
#pragma once

#include "harness/base/json.h"
#include "reports/tradeoff.h"

namespace recap::reports {

Json tradeoff_context_to_json(const TradeoffContext& c);
Json tradeoff_size_to_json(const TradeoffSize& s);  // its configurations included
Json configuration_to_json(const Configuration& c);
Json tradeoff_to_json(const TradeoffReport& r);

}  // namespace recap::reports
