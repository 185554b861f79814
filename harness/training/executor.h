// Executors: how a case's training steps run.
//
//  eager           every step eagerly on one stream.
//  per-layer       TransformerEngine's make_graphed_callables / Megatron's per-layer graphs: the
//                  graphed layers (LayerFlags::graphed) get a forward graph per (layer,
//                  microbatch), captured in `order` (layers ascending), and a backward graph per
//                  (layer, microbatch), captured at the matching -1 of `order` (layers
//                  descending). Steps 0 .. warmup-1 are real training steps run eagerly on a side
//                  stream, with is_graph_warmup set around the graphed layers' calls and their
//                  backward in `warmup_backward` style; then every graph is captured on a capture
//                  stream with is_graph_capturing set (the backward graphs in `warmup_backward`
//                  style too, as Megatron builds them with torch.autograd.grad); later steps
//                  replay: fresh inputs and output gradients are copied into each graph's static
//                  buffers, the RNG tracker's replay prologue runs for each graph, the graphs are
//                  launched in `order` with the ungraphed layers run eagerly between them. Graphs
//                  share one memory pool (shared_pool) or get one each. A replay out of record
//                  order is refused (ReplayOrderError, bug class 12). The WithoutOutput protocol
//                  (checkpoint.h) runs only between two ungraphed layers: a graphed consumer saves
//                  its own static input (a copy), and the producer's output is a static graph
//                  output that lives as long as the graph, so there is nothing to drop.
//  full-iteration  steps 0 .. warmup-1 eagerly on a side stream, then one graph of a whole step's
//                  forwards and backwards for every microbatch (losses and per-microbatch gradient
//                  copies included; zeroing the gradients and the SGD update stay outside), then
//                  one replay per step. As in Megatron, full-iteration graphs set neither phase
//                  flag (docs/recompute-and-rng.md), so `skip` does not bypass anything there.
//
// RNG across warmup and capture: warmup steps are real steps and consume the generators as eager
// steps do; the generator states are saved before capture and restored after it (as
// TransformerEngine does), so the first replay draws exactly what eager step `warmup` draws.
//
// Failures while warming up, capturing or replaying are caught and reported as a RunFailure; a
// capture that fails is ended on its origin stream (so no stream stays capturing), the generators'
// capture registration is undone, their states restored, the checkpoints' pending records dropped,
// and the phase flags are reset by their scopes: an eager step still works afterwards.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/runtime/faults.h"
#include "harness/training/train.h"

namespace recap::training {

struct ReplayOrderError : std::logic_error {
  using std::logic_error::logic_error;
};

// A rank group's run (tp > 1; drivers/PROTOCOL.md, "Rank groups"): what its observation says of
// every rank beyond the full-shape record RunResult holds (rank 0's losses and masks, gradients and
// parameters assembled from the shards). What the cross-rank oracles judge (properties/oracles/ranks.cpp).
struct RankMask {
  int step = 0;
  std::string layer, op;
  int microbatch = 0;
  runtime::Phase pass = runtime::Phase::Forward;
  int index = 0;  // its order among the rank's draws of (step, layer, op, microbatch, pass) unless sent
  bool checkpointed = false;
  std::string digest;
  uint64_t numel = 0;
};
// One forward or backward of a pipeline stage's model chunk (0 without virtual stages), as the
// stage ran it (its schedule).
struct StageEvent {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;
  bool operator==(const StageEvent& o) const {
    return forward == o.forward && microbatch == o.microbatch && chunk == o.chunk;
  }
};
struct RankGroupRun {
  int world = 1, tp = 1, pp = 1, vp = 1;
  std::vector<int> stages;  // per rank: its pipeline stage (all 0 without pp)
  // per virtual stage (chunk * pp + stage; without virtual stages, per stage): [first, stop) of its layers
  std::vector<std::pair<int, int>> stage_layers;
  // per rank, per step (in step order): its events as it ran them; empty without pp
  std::vector<std::vector<std::pair<int, std::vector<StageEvent>>>> schedules;
  std::string backend;                    // "gloo", "nccl"
  // draw sites whose draws are per-rank (inside tensor-parallel regions; with sp every site, on the
  // rank's rows); a site's whole mask is the ranks' masks in rank order
  std::vector<std::string> tp_sites;
  bool sp = false;                        // sequence parallel (its "sp")
  std::vector<int> shard_dim;             // per parameter: the dim it is split along, -1 held whole by every rank
  std::vector<std::vector<RankMask>> masks;  // per rank: its draws of every step
  // Per rank, the per-microbatch gradients ("grad <s> <mb> <i>") of parameters held whole
  // (shard_dim -1), from its `@<r>` frames: they must agree across ranks.
  std::vector<std::map<std::string, std::vector<float>>> replicated_grads;
  // Data-parallel replicas (dp > 1): every rank's replica, and per rank, for every parameter it
  // holds, keyed "grad <s> <i>", the step gradient it applied (summed over the replicas) and its
  // replica's own sum (its last microbatch's accumulation), from its `@<r>` frames.
  int dp = 1;
  std::vector<int> replicas;
  struct ReplicaGrad {
    std::vector<float> applied, own;
  };
  std::vector<std::map<std::string, ReplicaGrad>> replica_grads;
};

struct RunResult {
  CaseSpec spec;
  std::string backend;      // "sim", "cuda"
  std::string device_name;  // "sim", "NVIDIA H200"
  std::vector<std::string> layer_names;
  std::vector<std::string> param_names;
  std::vector<int> param_layer;  // top-level layer of each parameter
  std::vector<StepRecord> steps;
  std::optional<RunFailure> failure;
  bool captured = false;           // graphs were created
  int graphs = 0;                  // how many
  // Graph captures observed, by label (as StepRecord::replays). nullopt: the system under test
  // does not report captures (an observation without "graphs"), so graphed steps are not evidenced.
  std::optional<std::map<std::string, int>> captures = std::map<std::string, int>{};
  // Another system's run that claims graphs the observation does not show (drivers/PROTOCOL.md):
  // "driver error: ..." (the case is crashed, property capture_clean); "" otherwise.
  std::string driver_error;
  // Another system's RNG ledger judged by run_result_of (CONTRACT: one recompute draw per
  // checkpointed forward draw): the first problem, and what was compared when there was none.
  std::string ledger_problem, ledger_evidence;
  double capture_ms = 0.0;
  std::string step_clock;          // what measured each StepRecord::work_ms (Trainer::step_clock)
  // Per-layer graphs: per top-level layer, the activation bytes its forward graph keeps for its
  // backward graph (live after the forward's capture less live before it; the largest over
  // microbatches); empty for other executors. What recap tradeoff reports per layer.
  std::vector<int64_t> graph_activations;
  MemorySnapshot capture_memory;   // peaks over the capture (what the graphs hold at replay)
  // Activation bytes each forward captured into a graph left allocated for its backward (live
  // Activations bytes after the forward less before it), by unit: "<layer> mb<m>" for per-layer
  // graphs, "mb<m>" for a full-iteration graph. The memory oracle compares it with its model.
  // nullopt: not observed (no graph captured, or another system than recap's runtime).
  std::optional<std::map<std::string, int64_t>> held_in_graphs;
  std::string ledger_summary;
  size_t recompute_mismatches = 0;  // RNG ledger: recomputed draws that differ from their forward
  size_t reused_masks = 0;          // RNG ledger: forward draws repeated across steps
  size_t overlapping_draws = 0;     // RNG ledger: distinct draws starting inside another's Philox value range
  size_t repeated_draws = 0;        // RNG ledger: distinct draws (other sites or microbatches) at another's (seed, offset)
  size_t draw_streams = 0;          // RNG ledger: Philox streams (seeds) those draws came from
  std::optional<RankGroupRun> ranks;  // a rank group's observation (its "ranks"); nullopt: one rank
  bool ok() const { return !failure.has_value(); }
};

class Executor {
 public:
  explicit Executor(Trainer& t) : t_(t) {}
  virtual ~Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Runs every step of the case into `out` (steps, failure, capture figures).
  virtual void run(RunResult& out) = 0;

 protected:
  Trainer& t_;
};

std::unique_ptr<Executor> make_executor(Trainer& t);

// One case: its trainer and executor.
class Session {
 public:
  // Throws std::invalid_argument for a case that does not validate, DeviceError when the device
  // refuses the setup.
  Session(device::Device& dev, const CaseSpec& spec);
  ~Session();

  RunResult run();
  // One more eager training step on the main stream (e.g. after a failed capture).
  StepRecord eager_step(int step);
  Trainer& trainer() { return *trainer_; }
  Executor& executor() { return *executor_; }

 private:
  runtime::FaultScope faults_;  // the case's fault points, on for the session's whole life
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<Executor> executor_;
};

RunResult run_case(device::Device& dev, const CaseSpec& spec);

// "" when recap's runtime runs the case as specified, else one line naming the dimension it does
// not model (checkpoint_style non-reentrant, where a checkpoint exists: another system's
// checkpoint). recap in process and `recap worker` report such a case as skipped; Session::run
// refuses it (std::invalid_argument) rather than run something else.
std::string unmodelled(const CaseSpec& spec);

// After a session's capture failed: "" when the phase flags are clear, no stream is left capturing,
// no checkpoint keeps pending records and one more eager step works; else the first problem, one
// line (the hygiene oracle's check, docs/recompute-and-rng.md bug class 6).
std::string hygiene_after_failed_capture(Session& session, device::Device& dev);
// How its answer starts when the step after the failed capture ran out of device memory: that
// judges nothing (the hygiene oracle skips), since a full device is not a leak of the capture.
constexpr const char* kHygieneOutOfMemory = "out of device memory after the failed capture: ";

// What the sim's init check saw over a run (device::sim::InitCheckSummary, its reports as lines).
struct InitObservation {
  uint64_t launches = 0;  // kernels and copies that read device memory
  uint64_t bytes = 0;     // the bytes they read
  std::vector<std::string> uninitialized;  // one line per reader and allocation (UninitReport::describe)
};

// One case as recap judges it, in any process: a session on `dev`, hygiene checked on it right
// after a failed capture, the bytes the run left on the device once the session is gone, and what
// the device's init check saw (nullopt on a device without one: cuda, where compute-sanitizer
// initcheck checks the same rule on the GPU).
struct CheckedRun {
  RunResult result;
  std::string hygiene;     // "" unless the capture failed and hygiene found a problem
  int64_t live_after = 0;
  std::optional<InitObservation> init;
};
CheckedRun run_case_checked(device::Device& dev, const CaseSpec& spec);

// ---- reading a result ------------------------------------------------------------------------

// passed: ran through, and nothing the run can see by itself is wrong; failed: an error was
// raised (capture failure, refusal...); incorrect: it ran but the RNG ledger shows a recomputed
// draw different from its forward draw or a forward mask reused across steps, or a loss or
// gradient is not finite. (Comparisons with other runs are the oracles' business.)
struct Verdict {
  std::string disposition;  // "passed", "failed", "incorrect"
  std::string reason;       // one line, empty when passed
};
Verdict verdict(const RunResult& r);

// Gradient norms of a step: total and per top-level layer (L2, accumulated in double).
struct GradNorms {
  double total = 0.0;
  std::vector<double> per_layer;
};
GradNorms grad_norms(const RunResult& r, const StepRecord& s);

// FNV-1a 64 of the bits of a list of float vectors (gradients, parameters): equal digests for
// bitwise equal values.
uint64_t digest(const std::vector<std::vector<float>>& v);

// The result as JSON (schema "recap.run/1"): spec, backend, verdict, failure, capture figures,
// and per step: losses, gradient norms, digests, ledger counts, memory by category, time.
// Non-finite numbers are written as the strings "nan", "inf", "-inf".
Json run_result_to_json(const RunResult& r);

// The per-layer executor's own interface, for tests: replay one captured graph (its prologue and
// launch on the main stream), refused with ReplayOrderError when it is not the next in record order.
void replay_one_graph(Executor& e, size_t layer, int microbatch, bool forward);

}  // namespace recap::training
