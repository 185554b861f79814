// A recap case: everything one training run needs (the model, per-layer checkpoint and capture
// flags, the checkpoint style and policy, the executor, phases, microbatches and their order, the
// generator, seeds), with its JSON form. A case is independent of RapidCheck's random stream, so a
// corpus file survives generator changes (docs/DESIGN.md, "Cases and the corpus").
//
// JSON (schema "recap.case/1"; every field but `layers` has a default):
//   {
//     "schema": "recap.case/1", "name": "...", "description": "...",
//     "hidden": 16, "tokens": 8, "dtype": "fp32",
//     "layers": [ {"kind": "block", "heads": 2, "ffn_hidden": 0, "dropout": 0.1,
//                  "checkpoint": "full" | "none" | "selective",
//                  "checkpoint_modules": ["attn_core", "mlp", "norm"],   (selective only)
//                  "graphed": true}, ... ],
//     "checkpoint_style": "reentrant" | "without-output" | "non-reentrant",
//     "policy": "naive" | "skip" | "graph-safe",
//     "executor": "eager" | "per-layer" | "full-iteration",
//     "warmup": 0..3, "replays": 0..1000,
//     "microbatches": 1..16, "microbatch_order": [1, 1, -1, -1],
//     "generator": "host" | "graph-safe", "device_state": "shared" | "per-capture",
//     "warmup_backward": "backward" | "grad-of-inputs",
//     "shared_pool": true,
//     "seeds": {"param": 1, "data": 2, "rng": 3},
//     "lr": 0.05,
//     "tp": 1,                                  (tensor-parallel ranks: 1 .. 64, default 1; > 1 runs on a
//                                                rank group, drivers/PROTOCOL.md "Rank groups")
//     "pp": 1,                                  (pipeline stages: 1 .. 64, default 1; tp * pp ranks,
//                                                at most 64, run the case)
//     "vp": 1,                                  (virtual pipeline stages per rank: 1 .. 16, default 1;
//                                                > 1 needs pp > 1: megatron-core's interleaved 1F1B)
//     "dp": 1,                                  (data-parallel replicas: 1 .. 64, default 1; each runs
//                                                microbatches / dp, tp * pp * dp ranks at most 64)
//     "sp": false,                              (sequence parallelism over the tp ranks: needs tp > 1;
//                                                default false)
//     "faults": ["rng-offset-baked"],          (fault points, docs/faults.md; absent: none)
//     "expected": <any JSON, kept as is for the corpus>
//   }
// Keys starting with '_' are comments and ignored; any other unknown key is an error (a typo must
// not silently change a case).
//
// Steps: every executor runs `warmup + replays` training steps, numbered from 0, so that runs
// line up step for step. Graphed executors run steps 0 .. warmup-1 eagerly as warmup, capture
// between step warmup-1 and step warmup (the capture executes nothing), and replay steps
// warmup .. warmup+replays-1. The eager executor runs them all eagerly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>


#include "harness/base/json.h"
#include "harness/runtime/generator.h"
#include "models/model.h"

namespace recap::training {

// Training is written in terms of the runtime's types (Tensor, Ctx, GeneratorMode, ...): the
// runtime is the layer below, so its names are visible here unqualified.
using namespace recap::runtime;

enum class CheckpointGranularity { None, Full, Selective };
// NonReentrant is torch.utils.checkpoint(use_reentrant=False): a value of the case format that other
// systems run; recap's own runtime does not model it (training::unmodelled).
enum class CheckpointStyle { Reentrant, WithoutOutput, NonReentrant };
enum class CheckpointPolicy { Naive, Skip, GraphSafe };
enum class ExecutorKind { Eager, PerLayer, FullIteration };
enum class WarmupBackward { Backward, GradOfInputs };

inline constexpr EnumName<CheckpointGranularity> kGranularityNames[] = {{CheckpointGranularity::None, "none"},
                                                                        {CheckpointGranularity::Full, "full"},
                                                                        {CheckpointGranularity::Selective, "selective"}};
inline constexpr EnumName<CheckpointStyle> kStyleNames[] = {{CheckpointStyle::Reentrant, "reentrant"},
                                                            {CheckpointStyle::WithoutOutput, "without-output"},
                                                            {CheckpointStyle::NonReentrant, "non-reentrant"}};
inline constexpr EnumName<CheckpointPolicy> kPolicyNames[] = {
    {CheckpointPolicy::Naive, "naive"}, {CheckpointPolicy::Skip, "skip"}, {CheckpointPolicy::GraphSafe, "graph-safe"}};
inline constexpr EnumName<ExecutorKind> kExecutorNames[] = {{ExecutorKind::Eager, "eager"},
                                                            {ExecutorKind::PerLayer, "per-layer"},
                                                            {ExecutorKind::FullIteration, "full-iteration"}};
inline constexpr EnumName<WarmupBackward> kWarmupBackwardNames[] = {{WarmupBackward::Backward, "backward"},
                                                                    {WarmupBackward::GradOfInputs, "grad-of-inputs"}};
inline std::string granularity_name(CheckpointGranularity g) { return name_of(kGranularityNames, g); }
inline std::string style_name(CheckpointStyle s) { return name_of(kStyleNames, s); }
inline std::string policy_name(CheckpointPolicy p) { return name_of(kPolicyNames, p); }
inline std::string executor_name(ExecutorKind e) { return name_of(kExecutorNames, e); }
inline std::string warmup_backward_name(WarmupBackward w) { return name_of(kWarmupBackwardNames, w); }
inline bool granularity_from_name(const std::string& s, CheckpointGranularity* out) {
  return from_name(kGranularityNames, s, out);
}
inline bool style_from_name(const std::string& s, CheckpointStyle* out) { return from_name(kStyleNames, s, out); }
inline bool policy_from_name(const std::string& s, CheckpointPolicy* out) { return from_name(kPolicyNames, s, out); }
inline bool executor_from_name(const std::string& s, ExecutorKind* out) { return from_name(kExecutorNames, s, out); }
inline bool warmup_backward_from_name(const std::string& s, WarmupBackward* out) {
  return from_name(kWarmupBackwardNames, s, out);
}

// Sub-module roles a selective checkpoint may name (models::WrapFn roles, "block" excepted).
const std::vector<std::string>& selective_roles();  // attn_core, mlp, norm

// The per-layer flags that are not part of the model itself.
struct LayerFlags {
  CheckpointGranularity checkpoint = CheckpointGranularity::None;
  std::vector<std::string> modules;  // Selective: the roles to checkpoint
  bool graphed = true;               // per-layer executor: whether this layer is captured
};

struct CaseSpec {
  std::string name;
  std::string description;
  models::ModelSpec model;
  std::vector<LayerFlags> layers;  // parallel to model.layers

  CheckpointStyle style = CheckpointStyle::Reentrant;
  CheckpointPolicy policy = CheckpointPolicy::GraphSafe;
  ExecutorKind executor = ExecutorKind::Eager;
  int warmup = 1;
  int replays = 3;
  int microbatches = 1;
  // TransformerEngine's `_order` for one model chunk: +1 a forward, -1 a backward. The k-th +1 is
  // the forward of microbatch k, the k-th -1 the backward of microbatch k. Empty: [1, -1] per
  // microbatch.
  std::vector<int> order;
  GeneratorMode generator = GeneratorMode::GraphSafe;
  DeviceStateModel device_state = DeviceStateModel::Shared;
  WarmupBackward warmup_backward = WarmupBackward::Backward;
  bool shared_pool = true;
  uint64_t param_seed = 1;
  uint64_t data_seed = 2;
  uint64_t rng_seed = 3;
  float lr = 0.05f;
  // Tensor-parallel world size (issue 22): 1 is one rank; N > 1 runs on a rank group of N ranks
  // (`recap fuzz --sut torch --ranks N`), which recap's runtime does not model (training::unmodelled).
  int tp = 1;
  // Pipeline-parallel stages (issue 22): 1 is none; P > 1 splits the layers into P contiguous
  // stages on a rank group of tp * P ranks, which recap's runtime does not model either.
  int pp = 1;
  // Virtual pipeline stages per pipeline rank (issue 22, megatron-core's
  // virtual_pipeline_model_parallel_size): 1 is none; V > 1 splits the layers into P * V model
  // chunks, rank s holding chunks s, s + P, .., run in the interleaved 1F1B schedule. Needs pp > 1.
  int vp = 1;
  // Data-parallel replicas (issue 22): 1 is none; D > 1 runs the case on D replicas of its tp * pp
  // ranks (tp * pp * D ranks, megatron-core's order: tensor-parallel rank fastest, then the replica,
  // then the stage), replica d taking the step's microbatches d * M / D .. (d + 1) * M / D - 1; the
  // replicas sum their gradients before the update (recap's loss sums its microbatches).
  int dp = 1;
  // Sequence parallelism (issue 22, megatron-core's sequence_parallel): between tensor-parallel
  // regions each of the tp ranks holds tokens / tp rows. Needs tp > 1.
  bool sp = false;
  // Fault points on while the case runs (harness/runtime/faults.h): a reproducer of a broken
  // mechanism carries the fault it needs. Empty for every real case.
  std::vector<std::string> faults;
  Json expected;  // null when absent

  int steps() const { return warmup + replays; }
  // `order`, or the default when empty.
  std::vector<int> effective_order() const;
  bool any_checkpoint() const;
  // The ranks the case runs on: tp within each of its pp stages, on each of its dp replicas.
  int ranks() const { return tp * pp * dp; }
  // Its parallel dimensions in words, "tp 2 pp 2 dp 2" (tp always; pp and dp above 1).
  std::string parallel_dims() const;
};

// The same case with every layer's checkpointing off (its selective modules cleared): the
// no-checkpoint twin the oracles compare with, and the case family a determinism check covers.
CaseSpec without_checkpoints(CaseSpec s);

// Returns "" or one line naming the field and the problem:
//   "layers[2].kind: unknown layer kind 'conv'"
//   "microbatch_order: 3 forwards but 2 backwards"
//   "hidden must be in [1, 4096], got -3"
std::string validate(const CaseSpec& spec);

// JSON in/out. from_json fills *out and returns "" or a one-line error (type errors, unknown
// fields, unknown names, then validate()).
std::string case_from_json(const Json& j, CaseSpec* out);
Json case_to_json(const CaseSpec& spec);
// The system under test a case file names (its top-level "sut" {name, version}: which system
// found it). A property of the file, not of the case: case_from_json does not read it and
// case_to_json does not write it, so workers never see it.
struct CaseFileSut {
  std::string name;     // "" when the file names none
  std::string version;  // "" when it names none
  std::string framework_mutant;  // "" or the framework mutant it was found with (recap mutants --sut torch|megatron)
};

// Reads and validates a case file; returns "" or one line: "cannot open 'x.json': No such file
// or directory", "x.json: malformed JSON at byte 17: ...", "x.json: layers[0].kind: ...",
// "x.json: sut.name: expected a string, got an integer". Fills *sut (when given) from "sut".
std::string read_case_file(const std::string& path, CaseSpec* out, CaseFileSut* sut = nullptr);

}  // namespace recap::training
