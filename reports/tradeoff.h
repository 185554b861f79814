// The trade-off report, "recap.tradeoff/1" (reports/schema/recap.tradeoff.schema.json): per model
// size, per configuration (checkpointing x executor x the SUT's own choices), the oracles' verdict
// and what it cost in time and memory. Read here for `recap report`; `recap tradeoff` will write it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/base/json.h"

namespace recap::reports {

constexpr const char* kTradeoffSchema = "recap.tradeoff/1";

struct TradeoffFinding {
  std::string bucket;       // property/disposition/api/cuda_error/quantity
  std::string id;           // the known finding (M1, F1, ...), "" when none accepted it
  std::string corpus_file;  // its counterexample, "" when none was written
  std::string reason;
};

struct StepTimes {
  double median = 0, p10 = 0, p90 = 0;
  std::optional<double> mean;
  std::vector<double> samples;  // every timed step, in order
};

// Bytes; absent (nullopt) when not measured or not applicable, never 0 for that.
struct TradeoffMemory {
  std::optional<int64_t> peak_allocated, peak_reserved, device_used, graph_pool, capture_peak, activations_in_graphs,
      saved_by_recompute;
};

struct LayerFigures {
  int layer = 0;
  std::optional<double> forward_ms, backward_ms;
  std::optional<int64_t> activations_in_graphs, graph_pool;
};

// The size the oracles judged a configuration at when its own size was past `recap tradeoff
// --judge-budget` (docs/DESIGN.md, section 8): the same configuration, narrower and shorter. Its
// figures (step times, memory) are still the full size's; only the verdict is this size's.
struct JudgedSize {
  int hidden = 0, heads = 0, ffn_hidden = 0, tokens = 0;
  std::string reason;  // one line: the full size's observation a step, over the budget
};

struct Configuration {
  std::string name;        // unique within its size: what reports are compared by
  std::string checkpoint;  // none, selective, full
  std::vector<std::string> selective_modules;
  std::string executor;    // eager, per-layer, full-iteration
  std::map<std::string, std::string> choice;  // the SUT's own choices (style, recompute, tracker, ...)
  std::string verdict;     // a disposition; anything but passed is shown with its findings
  std::string reason;
  std::vector<TradeoffFinding> findings;
  std::optional<StepTimes> step_ms;
  std::optional<double> capture_ms, tflops, matmul_share, recompute_overhead;
  TradeoffMemory memory;
  std::vector<LayerFigures> per_layer;
  std::optional<JudgedSize> judged_size;  // absent: judged at the size itself
};

struct TradeoffSize {
  std::string name;
  int layers = 0, hidden = 0, heads = 0, ffn_hidden = 0, seq = 0, micro_batch = 0, microbatches = 0;
  std::string dtype;
  std::optional<double> flops_per_step;
  std::vector<Configuration> configurations;
};

struct TradeoffContext {
  std::string recap_version, git_commit, command, started_utc, host;
  std::string sut_name, sut_version, sut_device;
  std::string device_name;
  std::optional<double> matmul_bf16_tflops;
  std::optional<int> warmup_steps, measured_steps;
  std::string clock;
};

struct TradeoffReport {
  TradeoffContext context;
  std::vector<TradeoffSize> sizes;
};

// Reads a parsed recap.tradeoff/1 document into *out. "" or one line naming the first problem by
// its path ("sizes[0].configurations[2].executor: must be one of eager, per-layer, full-iteration,
// got 'lazy'"). Unknown fields are ignored, as for recap.report/1.
std::string read_tradeoff(const Json& j, TradeoffReport* out);

}  // namespace recap::reports
