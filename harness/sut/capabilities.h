// What a system under test runs, per case dimension: the "capabilities" of its hello reply
// (drivers/PROTOCOL.md, "hello"), read into recap's enums so that the generators draw only what the
// system supports (properties::GenConfig::caps).
//
// Every list holds the values the system runs, in recap's order (the order of the enum's name
// table; for kinds, models::layer_kinds()), whatever order the hello listed them in. Values recap
// does not know are ignored (a newer driver may list more); a dimension the hello leaves out is
// unrestricted. Restrictions that hold for one executor only are `per_executor`: PROTOCOL.md's
// general form {"per_executor": {"per-layer": {...}}}, or torch's {"per_layer": {...}}.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/base/json.h"
#include "harness/training/spec.h"

namespace recap::sut {

// The values of each dimension that a system runs. In a per-executor restriction an empty list
// means "no restriction of this dimension".
struct Dims {
  std::vector<std::string> kinds;
  std::vector<models::DType> dtype;
  std::vector<training::ExecutorKind> executor;
  std::vector<training::CheckpointGranularity> checkpoint;
  std::vector<training::CheckpointStyle> checkpoint_style;
  std::vector<training::CheckpointPolicy> policy;
  std::vector<runtime::GeneratorMode> generator;
  std::vector<runtime::DeviceStateModel> device_state;
  std::vector<training::WarmupBackward> warmup_backward;
  std::vector<bool> shared_pool;  // true before false
  // The microbatch orders that run: "default" ([1, -1] per microbatch) and "interleaved" (any
  // other valid order); shared_pool_orders: the same, with a shared pool.
  std::vector<std::string> microbatch_order;
  std::vector<std::string> shared_pool_orders;
};

struct Capabilities {
  Dims all;                                                 // every dimension filled
  std::map<training::ExecutorKind, Dims> per_executor;      // further restrictions, by executor
  // Tensor-parallel world sizes above 1 that a rank group runs (a group's hello: "tp": [N];
  // drivers/PROTOCOL.md, "Rank groups"), and the executors it runs them with (its hello's
  // "executor"). Empty: one rank only, and the generators draw no tp (their draws unchanged).
  std::vector<int> tp;
  std::vector<training::ExecutorKind> tp_executor;
  // The layer kinds a tp > 1 case may hold (the group's hello: "tp_kinds"; megatron's groups split
  // only `block`, beside kinds without parameters). Empty: any kind the SUT runs.
  std::vector<std::string> tp_kinds;
  // Pipeline stages above 1 the groups run (their hellos' "pp"); a case's tp * pp is the size of
  // one of the groups (`worlds`). Empty: no pp is drawn.
  std::vector<int> pp;
  // Virtual pipeline stages above 1 the groups run with pp > 1 (their hellos' "vp"). Empty: no vp is drawn.
  std::vector<int> vp;
  // Data-parallel replicas above 1 the groups run (their hellos' "dp"); a case's tp * pp * dp is the
  // size of one of the groups. Empty: no dp is drawn.
  std::vector<int> dp;
  // Whether the group runs tp cases sequence parallel too (its hello's "sp": true). False: no sp is drawn.
  bool sp = false;
  // The sizes of the rank groups started (--ranks N: every divisor of N above 1): a shape's
  // tp * pp * dp is one of them. Empty: the one group whose size is the largest tp or pp value.
  std::vector<int> worlds;
};

// Everything recap.case/1 defines (what `all` is for a hello that lists nothing).
Capabilities every_value();

// Reads a hello's "capabilities" object. "" or one line naming the field and the problem
// ("capabilities.dtype: expected an array of strings, got an object"; "capabilities.executor:
// none of its values is one recap knows ('tpu')").
std::string capabilities_from_json(const Json& j, Capabilities* out);

// recap's own runtime: the hello of `recap worker` and what the in-process SUT supports (one
// function serves both). Everything recap.case/1 defines except checkpoint_style non-reentrant
// (training::unmodelled).
Json recap_capabilities_json();
Capabilities recap_capabilities();  // the same, read

}  // namespace recap::sut
