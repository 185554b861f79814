#include "harness/training/checkpoint.h"

#include <algorithm>
#include <csignal>

#include "harness/runtime/context.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/phase.h"
#include "harness/runtime/rng_state_kernels.h"

namespace recap::training {

using models::Saved;

CheckpointError::CheckpointError(const std::string& layer_, const std::string& message_)
    : std::runtime_error("checkpoint " + layer_ + ": " + message_), layer(layer_), message(message_) {}

namespace {

// "forward during graph capture", "recompute during graph warmup", "forward".
std::string phase_text(Ctx& ctx, const std::string& what) {
  device::CaptureStatus st = device::CaptureStatus::None;
  ctx.dev.stream_is_capturing(ctx.stream, &st);
  if (st != device::CaptureStatus::None) return what + " during graph capture";
  if (is_graph_capturing()) return what + " during graph capture";
  if (is_graph_warmup()) return what + " during graph warmup";
  return what;
}

void collect_holes(Saved& s, const Storage* target, std::vector<std::pair<Tensor*, ptrdiff_t>>& out) {
  for (Tensor& t : s.tensors)
    if (t.storage.get() == target)
      out.emplace_back(&t, static_cast<const char*>(t.data) - static_cast<const char*>(target->ptr));
  for (Saved& c : s.children) collect_holes(c, target, out);
}

}  // namespace

Checkpoint::Checkpoint(std::unique_ptr<models::Layer> inner, CheckpointConfig config)
    : models::Layer(inner->name()), inner_(std::move(inner)), config_(std::move(config)) {}

Checkpoint::~Checkpoint() = default;

bool Checkpoint::bypassed(const Saved& saved) { return saved.tensors.empty() && saved.children.size() == 1; }

bool Checkpoint::bypass_now(Ctx& ctx) const {
  if (config_.policy == CheckpointPolicy::GraphSafe && fault_on(Fault::RecomputeSavesNothing)) {
    // recompute-saves-nothing (bug class 2): while the stream captures, a plain forward that saves
    // everything, whatever the phase flags say (full-iteration graphs set none)
    device::CaptureStatus st = device::CaptureStatus::None;
    ctx.dev.stream_is_capturing(ctx.stream, &st);
    return st != device::CaptureStatus::None;
  }
  if (config_.policy != CheckpointPolicy::Skip) return false;
  if (is_graph_warmup()) return true;
  // PR #3919 bypasses CheckpointFunction while warming up or capturing; CheckpointWithoutOutput
  // only while warming up.
  return config_.style == CheckpointStyle::Reentrant && is_graph_capturing();
}

void Checkpoint::reset() {
  records_.clear();
  observed_.clear();
}

std::vector<Rebinding> Checkpoint::take_rebindings() {
  std::vector<Rebinding> out;
  out.swap(observed_);
  for (auto& [id, rec] : records_) rec.observed = 0;  // their observations are gone with them
  return out;
}

Checkpoint::Record& Checkpoint::record_of(const Saved& saved, const char* what) {
  if (saved.tensors.size() != 2)
    throw std::logic_error("checkpoint " + name() + ": " + what + " without a checkpointed forward");
  auto it = records_.find(saved.tensors[1].id());
  if (it == records_.end())
    throw std::logic_error("checkpoint " + name() + ": " + what + ": no record of its forward (already consumed?)");
  return it->second;
}

std::map<std::string, RngState> Checkpoint::save_rng_states(Ctx& ctx, const char* when) {
  Generator& gen = ctx.rng.current();
  if (gen.mode() == GeneratorMode::GraphSafe) {
    // Megatron with a graph-safe tracker: graphsafe_get_state(), an alias of the live state.
    return ctx.rng.save(/*as_handles=*/true);
  }
  // torch.cuda.get_rng_state() modelled as a round trip through the device: the generator's
  // current (seed, offset) unpacked by a kernel into a device buffer, copied to the host, and a
  // synchronize to read it. The synchronize is what a capture cannot take.
  std::string where = "checkpoint " + ctx.layer + ", get_rng_state in " + phase_text(ctx, when);
  // A 16-byte device buffer (the "CUDA RNG state tensor"), alive until the copy has completed.
  Tensor t = ctx.alloc_tensor({4}, DType::F32, device::MemCategory::Other);
  void* buf = t.data;
  ctx.launch(record_draw_kernel(static_cast<uint64_t*>(buf), gen.draw(0)));
  device::Status s =
      ctx.dev.memcpy_async(host_state_, buf, sizeof host_state_, device::CopyKind::DeviceToHost, ctx.stream);
  if (!device::ok(s)) throw DeviceError("cudaMemcpyAsync", s, where);
  s = ctx.dev.stream_synchronize(ctx.stream);
  if (!device::ok(s)) throw DeviceError("cudaStreamSynchronize", s, where);
  return ctx.rng.save(/*as_handles=*/false);
}

models::Tensor Checkpoint::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  saved.clear();
  if (!ctx.save_for_backward) {
    // Inside an enclosing no-grad forward: nothing is kept, so there is nothing to checkpoint.
    Saved scratch;
    return inner_->forward(ctx, x, scratch);
  }
  if (bypass_now(ctx)) {
    saved.children.resize(1);
    return inner_->forward(ctx, x, saved.children[0]);
  }
  Record rec;
  Tensor token;
  if (config_.policy == CheckpointPolicy::GraphSafe) {
    // The device pair the recompute will draw from: the realized (seed, offset) of the current
    // generator, written by a kernel when the forward actually runs (eagerly or in a replay).
    token = ctx.alloc_tensor({4}, DType::F32, device::MemCategory::Activations);
    ctx.launch(record_draw_kernel(token.as<uint64_t>(), ctx.rng.current().draw(0)));
    rec.graph_safe = true;
  } else {
    // A key for the record; the RNG states themselves are host objects.
    token = ctx.alloc_tensor({1}, DType::F32, device::MemCategory::Other);
    rec.states = save_rng_states(ctx, "forward");
  }
  Tensor y;
  {
    CtxFieldsScope scope(ctx);
    ctx.save_for_backward = false;
    Saved scratch;
    y = inner_->forward(ctx, x, scratch);
  }
  saved.tensors = {x, token};
  if (config_.style == CheckpointStyle::WithoutOutput) rec.output = y;
  records_[token.id()] = std::move(rec);
  return y;
}

models::Tensor Checkpoint::recompute(Ctx& ctx, const Tensor& x, const Tensor& token, Record& rec) {
  // layer-segfault: the crash path (a recompute that dereferences freed host memory in a real
  // framework); recap runs it only in a worker process (runtime::fault_kills_process)
  // (the default action first: a sanitizer's SIGSEGV handler would turn it into an abort)
  if (fault_on(Fault::LayerSegfault)) {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  CtxFieldsScope scope(ctx);
  ctx.phase = Phase::Recompute;
  ctx.save_for_backward = true;
  rec.inner.clear();
  if (rec.graph_safe) {
    const uint64_t* pair = token.as<uint64_t>();
    ctx.draw_override = DrawOverride{pair, pair + 1, 0};
    return inner_->forward(ctx, x, rec.inner);
  }
  ctx.draw_override.reset();
  // CheckpointFunction.backward: save the current states, restore the forward's, recompute,
  // restore the current ones.
  auto current = save_rng_states(ctx, "recompute");
  ctx.rng.restore(rec.states);
  Tensor y;
  try {
    y = inner_->forward(ctx, x, rec.inner);
  } catch (...) {
    ctx.rng.restore(current);
    throw;
  }
  ctx.rng.restore(current);
  return y;
}

models::Tensor Checkpoint::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  if (bypassed(saved)) {
    Tensor dx = inner_->backward(ctx, dy, saved.children[0]);
    saved.clear();
    return dx;
  }
  if (config_.style == CheckpointStyle::Reentrant && !is_checkpoint_valid())
    throw CheckpointError(ctx.layer.empty() ? name() : ctx.layer, kCheckpointGradRefusal);
  Record& rec = record_of(saved, "backward");
  if (!rec.recomputed) recompute(ctx, saved.tensors[0], saved.tensors[1], rec);
  // hidden-param-grad (Megatron-LM #6373): the parameters reached only inside a without-output
  // checkpoint lose what its backward adds to their gradients (put back to their values before it).
  std::vector<std::pair<Tensor, Tensor>> kept;
  if (config_.style == CheckpointStyle::WithoutOutput && fault_on(Fault::HiddenParamGrad))
    for (models::Param* p : inner_->params()) {
      Tensor copy = ctx.alloc_tensor(p->grad.shape, p->grad.dtype, device::MemCategory::Gradients);
      ctx.dev.memcpy_async(copy.data, p->grad.data, p->grad.bytes(), device::CopyKind::DeviceToDevice, ctx.stream);
      kept.emplace_back(p->grad, copy);
    }
  Tensor dx = inner_->backward(ctx, dy, rec.inner);
  for (auto& [grad, copy] : kept)
    ctx.dev.memcpy_async(grad.data, copy.data, grad.bytes(), device::CopyKind::DeviceToDevice, ctx.stream);
  records_.erase(saved.tensors[1].id());
  saved.clear();
  return dx;
}

int Checkpoint::discard_output(Ctx& ctx, Saved& own, Saved& consumer) {
  if (config_.style != CheckpointStyle::WithoutOutput || bypassed(own) || own.tensors.size() != 2) return 0;
  Record& rec = record_of(own, "discard_output");
  if (rec.discarded || !rec.output.storage) return 0;
  // An output that is its input (dropout with p = 0 returns its input, as ATen's does) is not
  // discarded: freeing it frees the input the recompute starts from (Megatron-LM #4497, whose fix
  // skips it). output-aliases-input-freed discards it anyway, and the freed memory is reused before
  // the recompute reads it (modelled by poisoning it with NaN bytes).
  if (rec.output.storage == own.tensors[0].storage) {
    if (!fault_on(Fault::OutputAliasesInputFreed)) return 0;
    const Tensor& in = own.tensors[0];
    if (!device::ok(ctx.dev.memset_async(in.data, 0xFF, in.bytes(), ctx.stream))) return 0;
  }
  std::vector<std::pair<Tensor*, ptrdiff_t>> found;
  collect_holes(consumer, rec.output.storage.get(), found);
  for (auto& [t, off] : found) {
    // without-output-not-rebound: the consumer's reference is left on the old storage, as a graph
    // that baked its address keeps it (the block stays reserved, so it still holds the forward's
    // values: no comparison of results sees the bug, only what was read)
    std::shared_ptr<Storage> stale = fault_on(Fault::WithoutOutputNotRebound) ? t->storage : nullptr;
    t->storage.reset();
    t->data = nullptr;  // shape and dtype stay: the hole knows what it was
    rec.holes.push_back(Hole{t, off, std::move(stale)});
  }
  if (!found.empty()) {
    Rebinding o;
    o.layer = name();
    o.microbatch = ctx.microbatch;
    o.holes = static_cast<int>(found.size());
    observed_.push_back(std::move(o));
    rec.observed = observed_.size();
  }
  rec.output = Tensor{};  // the last reference: the output's memory goes back to the allocator
  rec.discarded = true;
  return static_cast<int>(found.size());
}

void Checkpoint::recompute_output(Ctx& ctx, Saved& own, Saved& consumer) {
  (void)consumer;  // the holes point into it
  if (config_.style != CheckpointStyle::WithoutOutput || bypassed(own) || own.tensors.size() != 2) return;
  Record& rec = record_of(own, "recompute_output");
  if (!rec.discarded || rec.recomputed) return;
  Tensor y = recompute(ctx, own.tensors[0], own.tensors[1], rec);
  for (const Hole& h : rec.holes) {
    const std::shared_ptr<Storage>& to = h.stale ? h.stale : y.storage;
    h.where->storage = to;
    h.where->data = static_cast<char*>(to->ptr) + h.byte_offset;
  }
  if (rec.observed > 0) {
    // What the consumer's backward will read, as it now stands in its saved record.
    Rebinding& o = observed_[rec.observed - 1];
    o.rebound = true;
    o.recomputed = y.id();
    for (const Hole& h : rec.holes) {
      o.read.push_back(h.where->id());
      o.misplaced += h.where->data != static_cast<char*>(y.data) + h.byte_offset;
    }
  }
  rec.holes.clear();
  rec.recomputed = true;
}

// ---- the WrapFn -----------------------------------------------------------------------------

models::WrapFn make_checkpoint_wrap(const CaseSpec& spec, std::vector<Checkpoint*>* created,
                                    std::vector<Checkpoint*>* top) {
  if (top != nullptr) top->assign(spec.layers.size(), nullptr);
  auto next_top = std::make_shared<size_t>(0);
  std::vector<LayerFlags> flags = spec.layers;
  CheckpointConfig base{spec.style, spec.policy, ""};
  return [=](std::unique_ptr<models::Layer> layer, const std::string& role) -> std::unique_ptr<models::Layer> {
    size_t i = *next_top;
    if (role == "block") ++*next_top;
    if (i >= flags.size()) return layer;
    const LayerFlags& f = flags[i];
    bool wrap = false;
    if (role == "block")
      wrap = f.checkpoint == CheckpointGranularity::Full;
    else if (f.checkpoint == CheckpointGranularity::Selective)
      wrap = std::find(f.modules.begin(), f.modules.end(), role) != f.modules.end();
    if (!wrap) return layer;
    CheckpointConfig cfg = base;
    cfg.role = role;
    auto c = std::make_unique<Checkpoint>(std::move(layer), cfg);
    if (created != nullptr) created->push_back(c.get());
    if (top != nullptr && role == "block") (*top)[i] = c.get();
    return c;
  };
}

}  // namespace recap::training
