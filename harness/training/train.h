// The training machinery the executors share: the model built from a case (checkpoints applied
// through the WrapFn), the RNG tracker and ledger, the allocator, streams, the static input and
// target buffers, and what one training step records.
//
// A training step: zero the gradients; for each entry of the microbatch order: a forward (the
// step's fresh input for that microbatch, a deterministic function of (data seed, step,
// microbatch), is in its input buffer), the mse loss against a fresh target, or a backward
// accumulating into the parameter gradients (then a copy of every gradient, so each microbatch's
// accumulated gradients can be compared); then an SGD update, so parameters change between steps.
// Recorded per step and microbatch: loss, gradients, parameters after the update, the ledger's
// entries, memory by category (device and allocator), time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "harness/training/checkpoint.h"
#include "harness/runtime/context.h"
#include "harness/runtime/rng_ledger.h"
#include "harness/runtime/rng_tracker.h"
#include "harness/training/spec.h"
#include "harness/runtime/tensor.h"
#include "models/model.h"

namespace recap::training {

// The rule of a case's data (docs/DESIGN.md, "Cases"): the input (kind 0) or target (kind 1) of
// microbatch `microbatch` at step `step`, [tokens * hidden] values in [-1, 1), a function of the
// case's data seed alone (the trainer uploads these; the `training` oracle recomputes them).
std::vector<float> step_data(const CaseSpec& spec, int step, int microbatch, int kind);

// Memory figures at one moment: the device's ledger (per category, the pool/graph counters) and
// the allocator's logical figures (live tensors by category, inside pools too; pool reservations).
// Peaks are since the last reset (each step resets them at its start).
struct MemorySnapshot {
  device::MemoryStats device;
  Allocator::Stats allocator;
  // Activations peak of live tensors (logical) — the figure the memory oracle compares.
  int64_t activations_peak() const { return allocator.tensors[static_cast<int>(device::MemCategory::Activations)].peak_bytes; }
};

struct MicrobatchRecord {
  int microbatch = 0;
  float loss = 0.0f;
  // Every parameter's accumulated gradient right after this microbatch's backward.
  std::vector<std::vector<float>> grads;
};

struct StepRecord {
  int step = 0;
  std::string phase;  // "eager", "warmup", "replay"
  std::vector<MicrobatchRecord> microbatches;  // indexed by microbatch
  std::vector<std::vector<float>> grads;       // after the step's last backward, before the update
  std::vector<std::vector<float>> params;      // after the update
  std::vector<LedgerEntry> ledger;             // the step's draws
  // Graph replays observed during the step, by label (a top-level layer's name, "iteration" for
  // a whole-step graph): what the executor launched, or what another system reported.
  std::map<std::string, int> replays;
  MemorySnapshot memory;
  // Bytes held by graph pools when the step ended, and of those the bytes live tensors hold (a pool
  // whose figures grow from one replay to the next leaks; a leak fills the free blocks before the
  // pool grows); nullopt when the system under test does not report them.
  std::optional<int64_t> graph_pool_bytes, graph_pool_used_bytes;
  // The without-output rebindings of the step (checkpoint.h), as observed: in a replay of a graph
  // that holds them, the ones its capture observed (the replay reads what the capture baked).
  std::vector<Rebinding> rebindings;
  double ms = 0.0;
  // The step's device work alone, from begin_step to the end of its last kernel (the data upload
  // before it and the downloads of its results after it left out): what recap tradeoff times.
  // Trainer::step_clock() says which clock measured it.
  double work_ms = 0.0;
};

// A failure while creating graphs (or while running a step): what failed, where and how.
struct RunFailure {
  std::string phase;   // "warmup", "capture", "replay", "eager"
  std::string pass;    // "forward", "backward", "" when not inside one
  std::string layer;   // top-level layer (or checkpoint path) being run or captured
  int microbatch = -1;
  int step = -1;
  std::string api;     // the failing CUDA call ("cudaStreamSynchronize"), "" when not a CUDA error
  std::string error;   // CUDA error name, or the kind of error ("RuntimeError", "RngError", ...)
  std::string message;  // the exception's message
  // One line: "graph capture failed: forward of block0, microbatch 0: cudaStreamSynchronize:
  // cudaErrorStreamCaptureUnsupported: <message>".
  std::string line() const;
};

// The brief's name for it: what a failed graph creation reports.
using CaptureFailure = RunFailure;

class Trainer {
 public:
  Trainer(device::Device& dev, const CaseSpec& spec);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  device::Device& dev;
  const CaseSpec spec;
  Allocator alloc;
  RngTracker rng;
  RngLedger ledger;
  device::Stream main{}, side{}, capture{};

  std::unique_ptr<models::Model> model;
  std::vector<models::Layer*> layers;
  std::vector<Checkpoint*> checkpoints;      // every checkpoint wrapper
  std::vector<Checkpoint*> top_checkpoints;  // per top-level layer: its whole-layer checkpoint or null
  std::vector<models::Param*> params;
  std::vector<int> param_layer;              // the top-level layer of each parameter

  std::vector<Tensor> input, target;             // per microbatch, [tokens, hidden]
  std::vector<std::vector<Tensor>> grad_copies;  // [microbatch][param]
  std::vector<int> order;                        // the effective microbatch order

  Ctx ctx(device::Stream s);

  // Host values of the step's fresh input (kind 0) or target (kind 1) for a microbatch.
  std::vector<float> fresh_values(int step, int microbatch, int kind) const { return step_data(spec, step, microbatch, kind); }
  // Synchronizes every stream, then draws the step's inputs and targets into their buffers (on the
  // device: the values of step_data).
  void load_step_data(int step);
  // Resets memory peaks and the ledger (on `s`), zeroes the gradients (on `s`).
  void begin_step(int step, device::Stream s);
  // Copies every gradient into grad_copies[mb] (on ctx.stream; captured inside a graph).
  void copy_grads(Ctx& c, int mb);
  // Synchronizes, collects the ledger and downloads losses, gradients and parameters.
  StepRecord finish_step(int step, const std::string& phase, const std::vector<Tensor>& losses, int last_backward_mb,
                         double start_ms);

  // The without-output rebindings observed since the last call, over every checkpoint.
  std::vector<Rebinding> take_rebindings();

  // Whether the WithoutOutput protocol applies between top-level layer l and its consumer l+1
  // (given that they run in the same unit; the caller checks that).
  bool discard_pair(size_t l) const;

  // Eager pieces: one microbatch's forward through layers [0, n) and loss, its backward. The
  // `around` hook, when set, wraps each layer's call (the per-layer executor's warmup scopes).
  using Around = std::function<void(size_t layer, int microbatch, bool forward, const std::function<void()>& call)>;
  Tensor forward_microbatch(Ctx& c, int mb, std::vector<models::Saved>& saved, Tensor* loss, Tensor* dy,
                            const Around& around = {});
  void backward_microbatch(Ctx& c, int mb, const Tensor& dy, std::vector<models::Saved>& saved,
                           const Around& around = {});
  // One whole eager training step on stream `s`.
  StepRecord eager_step(int step, device::Stream s, const std::string& phase, const Around& around = {});

  double now_ms() const;

  // The clock of StepRecord::work_ms: "cuda-events" (two timing events on the step's stream, read
  // after it synchronized) where the device has a clock, else "host-clock" (steady_clock between
  // begin_step and the synchronization that ends the step: sim runs its kernels on the CPU).
  std::string step_clock() const { return timing_events_ ? "cuda-events" : "host-clock"; }
  // false: finish_step downloads no gradients and parameters, only the losses (recap tradeoff's
  // timed runs, whose size can make a step's downloads cost more than its work). Every run the
  // oracles judge keeps the default.
  bool record_tensors = true;

 private:
  bool timing_events_ = false;
  device::Event work_start_{}, work_end_{};
  device::Stream step_stream_{};
  double work_t0_ = 0.0;
};

// A step's draws, counted: forward/recompute draws and recomputed draws whose (seed, offset)
// differ from their forward draw (same layer, op, microbatch).
struct LedgerCounts {
  int draws = 0;
  int forward = 0;
  int recompute = 0;
  int mismatches = 0;
  std::string line() const;  // "12 draws (8 forward, 4 recompute), 0 recompute mismatches"
};
LedgerCounts count_ledger(const std::vector<LedgerEntry>& entries);

// Fills a RunFailure from the exception being handled (call inside a catch block).
RunFailure failure_from_current_exception(const std::string& phase, const std::string& pass, const std::string& layer,
                                          int microbatch, int step);

}  // namespace recap::training
