#include "models/model.h"

#include <cmath>
#include <stdexcept>

#include "models/layers.h"
#include "models/ops.h"
#include "models/registry.h"

namespace recap::models {


std::string validate(const ModelSpec& spec) {
  if (spec.hidden < 1) return "hidden must be at least 1, got " + std::to_string(spec.hidden);
  if (spec.tokens < 1) return "tokens must be at least 1, got " + std::to_string(spec.tokens);
  if (spec.dtype != DType::F32 && spec.dtype != DType::BF16) return "unknown dtype";
  if (spec.layers.empty()) return "the stack has no layers";
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const std::string at = "layer " + std::to_string(i) + ": ";
    const LayerKind* kind = find_layer_kind(l.kind);
    if (!kind) return at + "unknown kind '" + l.kind + "'";
    if (kind->uses_heads) {
      if (l.heads < 1) return at + "heads must be at least 1, got " + std::to_string(l.heads);
      if (spec.hidden % l.heads != 0)
        return at + "hidden " + std::to_string(spec.hidden) + " is not divisible by heads " + std::to_string(l.heads);
    }
    if (kind->uses_ffn && l.ffn_hidden < 0)
      return at + "ffn_hidden must be 0 (4 * hidden) or positive, got " + std::to_string(l.ffn_hidden);
    if (!(l.dropout >= 0.0f && l.dropout < 1.0f))  // NaN fails too
      return at + "dropout must be in [0, 1), got " + std::to_string(l.dropout);
  }
  return "";
}

Model::Model(Ctx& ctx, const ModelSpec& spec, uint64_t param_seed, const WrapFn& wrap) : spec_(spec) {
  std::string problem = validate(spec);
  if (!problem.empty()) throw std::invalid_argument("invalid model spec: " + problem);
  Builder b(ctx, spec.dtype, param_seed, wrap);
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    layers_.push_back(b.wrapped(find_layer_kind(l.kind)->make(b, layer_args(spec, l, l.kind + std::to_string(i))), "block"));
  }
  // Parameters were drawn on the builder's stream and gradients zeroed by cudaMemset (which may
  // still be in flight when it returns, and work on a non-blocking stream would not wait for it).
  // Settle them before anyone launches.
  device::Status st = ctx.dev.device_synchronize();
  if (!device::ok(st)) throw runtime::DeviceError("cudaDeviceSynchronize", st, "model parameters");
}

std::vector<Param*> Model::params() {
  std::vector<Param*> out;
  for (auto& l : layers_) {
    std::vector<Param*> p = l->params();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<Layer*> Model::layers() {
  std::vector<Layer*> out;
  for (auto& l : layers_) out.push_back(l.get());
  return out;
}

Tensor Model::forward(Ctx& ctx, const Tensor& x, std::vector<Saved>& saved) {
  if (!x.defined() || x.shape.size() != 2 || x.shape[1] != spec_.hidden || x.dtype != spec_.dtype)
    throw std::invalid_argument("model input must be [tokens, " + std::to_string(spec_.hidden) + "] " +
                                runtime::dtype_name(spec_.dtype));
  saved.assign(layers_.size(), Saved{});
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    runtime::LayerScope scope(ctx, layers_[i]->name());
    h = layers_[i]->forward(ctx, h, saved[i]);
  }
  return h;
}

Tensor Model::backward(Ctx& ctx, const Tensor& dy, std::vector<Saved>& saved) {
  if (saved.size() != layers_.size()) throw std::logic_error("model backward without a saved forward");
  Tensor d = dy;
  for (size_t k = layers_.size(); k-- > 0;) {
    runtime::LayerScope scope(ctx, layers_[k]->name());
    d = layers_[k]->backward(ctx, d, saved[k]);
  }
  return d;
}

Tensor mse_loss(Ctx& ctx, const Tensor& y, const Tensor& target, Tensor* dy) {
  if (y.shape != target.shape || y.dtype != target.dtype) throw std::invalid_argument("mse_loss: y and target differ in shape or dtype");
  Tensor loss = ctx.alloc_tensor({1}, DType::F32, device::MemCategory::Workspace);
  math::MseArgs m;
  m.dtype = ops::dtype_code(y.dtype);
  m.n = y.numel();
  m.y = y.data;
  m.target = target.data;
  m.loss = loss.as<float>();
  ctx.launch(ops::mse_loss(m));
  if (dy != nullptr) {
    *dy = ctx.alloc_tensor(y.shape, y.dtype, device::MemCategory::Workspace);
    math::EwArgs e;
    e.op = math::Ew::MseGrad;
    e.dtype = m.dtype;
    e.n = m.n;
    e.a = y.data;
    e.b = target.data;
    e.out = dy->data;
    e.s = 1.0f / static_cast<float>(m.n);
    ctx.launch(ops::elementwise(e));
  }
  return loss;
}

namespace {
// One elementwise op writing `out` in place (reading `a` when given), with scalar s.
void launch_in_place(Ctx& ctx, math::Ew op, const Tensor& out, const void* a, float s) {
  math::EwArgs e;
  e.op = op;
  e.dtype = ops::dtype_code(out.dtype);
  e.n = out.numel();
  e.a = a;
  e.out = out.data;
  e.s = s;
  ctx.launch(ops::elementwise(e));
}
}  // namespace

void sgd_update(Ctx& ctx, const std::vector<Param*>& params, float lr) {
  for (Param* p : params) launch_in_place(ctx, math::Ew::Sgd, p->value, p->grad.data, lr);
}

void zero_grads(Ctx& ctx, const std::vector<Param*>& params) {
  for (Param* p : params) launch_in_place(ctx, math::Ew::Fill, p->grad, nullptr, 0.0f);
}

}  // namespace recap::models
