// Checkpointing (activation recomputation): a models::Layer wrapper, applied through the model
// builder's WrapFn, so layers know nothing of it.
//
// Styles (Megatron-LM megatron/core/tensor_parallel/random.py):
//  - Reentrant (CheckpointFunction): forward saves its input and the RNG states, runs the inner
//    forward with ctx.save_for_backward = false (its intermediates are freed as soon as they are
//    used); backward saves the current RNG states, restores the forward's, re-runs the inner
//    forward (ctx.phase = Recompute, saving on), restores the current states, then runs the inner
//    backward. It refuses a backward in grad-of-inputs style (torch.autograd.grad, see phase.h)
//    with "Checkpointing is not compatible with .grad(), please use .backward() if possible"
//    (Megatron-LM #2758).
//  - WithoutOutput (CheckpointWithoutOutput): as Reentrant, and in addition its output is dropped
//    once its consumer has used it and rematerialized just before the consumer's backward. recap
//    models Megatron's discard_output_and_register_recompute() with two calls the executor makes
//    around the consumer (the next top-level layer): discard_output() after the consumer's forward
//    replaces every reference to the output inside the consumer's Saved with a hole, so the
//    output's memory goes back to the allocator; recompute_output() before the consumer's backward
//    re-runs the inner forward (saving on; its Saved serves this checkpoint's own backward, which
//    then does not recompute again) and rebinds the holes to the new output. As in Megatron, the
//    rebinding is a host-side operation: a graph that baked the old address does not see it, which
//    is why executors apply the protocol only when the checkpoint and its consumer run in the same
//    unit (both eager, or both captured). The protocol is skipped when the consumer is itself a
//    checkpoint (its saved input is the output: dropping it would leave its own recompute nothing
//    to start from); the output is then kept, as in Reentrant style. It does not refuse a
//    grad-of-inputs backward (it is built on hooks, not on a reentrant autograd function).
//
// Policies while the graph phase flags are set (phase.h):
//  - Naive: exactly as eager (the behaviour before Megatron-LM PR #3919). Saving the RNG states
//    depends on the generator mode, as Megatron's _get_cuda_rng_state(graph_safe=...) does:
//      host generator: a get_rng_state that copies the generator state through the device to the
//        host (record kernel, memcpy_async on ctx.stream, stream_synchronize) and keeps snapshots.
//        Legal eagerly; during capture the synchronize returns cudaErrorStreamCaptureUnsupported,
//        invalidates the capture, and the checkpoint throws DeviceError naming itself, the phase
//        and the CUDA error (bug class 14);
//      graph-safe generator: handles (graphsafe_get_state), live aliases of the generator, so
//        "restoring" them rewinds nothing and the recompute draws other masks than the forward:
//        wrong gradients with no error, eagerly and in graphs (bug class 3).
//  - Skip: bypassed while warming up or capturing (Reentrant) or while warming up
//    (WithoutOutput), as PR #3919 does: a plain forward that saves everything, so the memory
//    saving is lost inside graphs (bug class 2). Outside the phases it behaves as Naive.
//  - GraphSafe: at forward a kernel writes the realized (seed, offset) of the current generator
//    (the unpacked arguments of a zero-length draw, what TransformerEngine's
//    nvte_extract_seed_and_offset does) into a device pair the checkpoint owns (16 bytes,
//    category Activations); the inner forward draws normally. At recompute ctx.draw_override
//    points at that pair, so every recomputed draw reads the forward's realized values at the
//    same relative offsets: identical masks eagerly and inside graphs (the pair is written when
//    the forward graph replays and read when the backward graph replays), with no host RNG state
//    touched, so it is capture-safe and recompute keeps saving memory inside graphs.
//    Precondition: the inner forward draws only from the tracker's current generator (recap's
//    layers do; a fork to another generator inside the region would need one pair per generator).
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/training/spec.h"
#include "models/layer.h"

namespace recap::training {

// The reentrant checkpoint's refusal of a grad-of-inputs backward. what() is
// "checkpoint <layer>: Checkpointing is not compatible with .grad(), please use .backward() if
// possible".
struct CheckpointError : std::runtime_error {
  CheckpointError(const std::string& layer, const std::string& message);
  std::string layer;
  std::string message;  // without the "checkpoint <layer>: " prefix
};

constexpr const char* kCheckpointGradRefusal =
    "Checkpointing is not compatible with .grad(), please use .backward() if possible";

// What the runtime saw of one without-output rebinding (recompute_on_off's rebinding check): the
// references a consumer's saved record held to a discarded output, as they stand when
// recompute_output has rebound them, which is right before the consumer's backward reads them.
// The check compares what was read with what the recompute wrote, never with what the protocol
// says it should be.
struct Rebinding {
  std::string layer;        // the checkpointed top-level layer
  int microbatch = 0;
  int holes = 0;            // references the discard replaced
  bool rebound = false;     // recompute_output ran before the consumer's backward
  uint64_t recomputed = 0;  // storage id of the recomputed output
  std::vector<uint64_t> read;  // per hole: the storage id the consumer reads
  int misplaced = 0;        // holes whose address is not the recomputed output's at their offset
};

struct CheckpointConfig {
  CheckpointStyle style = CheckpointStyle::Reentrant;
  CheckpointPolicy policy = CheckpointPolicy::GraphSafe;
  std::string role;  // the WrapFn role it was applied with: "block", "attn_core", "mlp", "norm"
};

class Checkpoint : public models::Layer {
 public:
  Checkpoint(std::unique_ptr<models::Layer> inner, CheckpointConfig config);
  ~Checkpoint() override;

  // The inner layer's kind and name: a checkpoint is transparent to paths and reports.
  std::string kind() const override { return inner_->kind(); }
  std::vector<models::Param*> params() override { return inner_->params(); }
  models::Tensor forward(models::Ctx& ctx, const models::Tensor& x, models::Saved& saved) override;
  models::Tensor backward(models::Ctx& ctx, const models::Tensor& dy, models::Saved& saved) override;

  models::Layer& inner() { return *inner_; }
  const CheckpointConfig& config() const { return config_; }

  // Whether the forward that filled `saved` was bypassed (Skip policy in a graph phase).
  static bool bypassed(const models::Saved& saved);

  // WithoutOutput protocol (see the file comment). Both are no-ops unless this is a
  // WithoutOutput checkpoint whose forward (the one that filled `own`) checkpointed.
  // Returns the number of references replaced by holes.
  int discard_output(models::Ctx& ctx, models::Saved& own, models::Saved& consumer);
  // Rematerializes the output and fills the holes; must run before the consumer's backward.
  void recompute_output(models::Ctx& ctx, models::Saved& own, models::Saved& consumer);

  // Forward calls whose backward has not run yet (records of saved RNG states).
  size_t pending() const { return records_.size(); }
  // Forgets every pending record (after a failed capture, whose Saved objects are dropped) and
  // every rebinding observed since the last take_rebindings().
  void reset();
  // The rebindings observed since the last call (in the order their outputs were discarded).
  std::vector<Rebinding> take_rebindings();

 private:
  struct Hole {
    models::Tensor* where = nullptr;
    ptrdiff_t byte_offset = 0;  // its data pointer's offset within the output's storage
    std::shared_ptr<runtime::Storage> stale;  // without-output-not-rebound: the storage left behind
  };
  struct Record {
    bool graph_safe = false;                  // RNG replay from the device pair (saved.tensors[1])
    std::map<std::string, RngState> states;   // Naive: the tracker states saved at forward
    models::Tensor output;                    // WithoutOutput: until discarded
    std::vector<Hole> holes;                  // WithoutOutput: discarded references
    bool discarded = false;
    bool recomputed = false;                  // WithoutOutput: inner Saved already rebuilt
    models::Saved inner;                      // the recompute's Saved
    size_t observed = 0;                      // WithoutOutput: 1 + its index in observed_, 0 none
  };

  Record& record_of(const models::Saved& saved, const char* what);
  // Saves the RNG states as Naive does (see the file comment); throws DeviceError during capture
  // with a host generator.
  std::map<std::string, RngState> save_rng_states(models::Ctx& ctx, const char* when);
  // Re-runs the inner forward into rec.inner with the forward's RNG; returns its output.
  models::Tensor recompute(models::Ctx& ctx, const models::Tensor& x, const models::Tensor& token, Record& rec);
  bool bypass_now(models::Ctx& ctx) const;

  std::unique_ptr<models::Layer> inner_;
  CheckpointConfig config_;
  std::map<uint64_t, Record> records_;  // by the id of the token tensor in saved.tensors[1]
  std::vector<Rebinding> observed_;     // rebindings since the last take_rebindings()
  uint64_t host_state_[2] = {0, 0};     // get_rng_state's host copy (a stable address)
};

// The WrapFn that applies a case's checkpoint flags. Model builders call it for every sub-module,
// children before their top-level layer (role "block"); top-level layers are counted in build
// order to find their flags. `created` (optional) receives every checkpoint made, and `top`
// (optional) is resized to the number of layers and receives, per top-level layer, its Checkpoint
// when the whole layer is checkpointed (nullptr otherwise).
models::WrapFn make_checkpoint_wrap(const CaseSpec& spec, std::vector<Checkpoint*>* created,
                                    std::vector<Checkpoint*>* top);

// Runs inside the scope with ctx fields set, restoring them on every exit path.
class CtxFieldsScope {
 public:
  explicit CtxFieldsScope(models::Ctx& ctx)
      : ctx_(ctx), phase_(ctx.phase), save_(ctx.save_for_backward), override_(ctx.draw_override) {}
  ~CtxFieldsScope() {
    ctx_.phase = phase_;
    ctx_.save_for_backward = save_;
    ctx_.draw_override = override_;
  }
  CtxFieldsScope(const CtxFieldsScope&) = delete;
  CtxFieldsScope& operator=(const CtxFieldsScope&) = delete;

 private:
  models::Ctx& ctx_;
  Phase phase_;
  bool save_;
  std::optional<DrawOverride> override_;
};

}  // namespace recap::training
