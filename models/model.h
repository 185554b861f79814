// A model: a stack of layers built from a ModelSpec, with the loss. The spec is part of a recap
// case (harness/training/spec.h) and of its JSON form.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/layer.h"

namespace recap::models {

// One entry of the stack. `kind` is one of: "linear", "layernorm", "rmsnorm", "gelu", "swiglu",
// "dropout", "attention", "mlp", "block" (pre-norm transformer block with residuals).
// Every layer maps [tokens, hidden] -> [tokens, hidden] so any stack composes.
struct LayerSpec {
  std::string kind;
  int ffn_hidden = 0;    // mlp/block/swiglu inner width (0: 4 * hidden)
  int heads = 1;         // attention/block; hidden % heads == 0
  float dropout = 0.0f;  // dropout/attention/mlp/block probability, in [0, 1)
};

struct ModelSpec {
  int hidden = 16;
  int tokens = 8;  // per microbatch; attention is causal over the tokens
  DType dtype = DType::F32;
  std::vector<LayerSpec> layers;
};

// Checks a spec; returns "" or a one-line description of the first problem
// ("layer 2: unknown kind 'conv'", "hidden 12 is not divisible by heads 5", ...).
std::string validate(const ModelSpec& spec);

class Model {
 public:
  // Builds the stack; every sub-module passes through `wrap` (identity when empty). Parameters
  // are initialized deterministically from `param_seed` (host-side, the same on both backends).
  Model(Ctx& ctx, const ModelSpec& spec, uint64_t param_seed, const WrapFn& wrap = {});
  std::vector<Param*> params();
  std::vector<Layer*> layers();
  Tensor forward(Ctx& ctx, const Tensor& x, std::vector<Saved>& saved);
  Tensor backward(Ctx& ctx, const Tensor& dy, std::vector<Saved>& saved);

 private:
  ModelSpec spec_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

// loss = 0.5 * sum((y - target)^2) / numel, computed deterministically on the device into a
// one-element fp32 tensor; dy = (y - target) / numel.
Tensor mse_loss(Ctx& ctx, const Tensor& y, const Tensor& target, Tensor* dy);
// p -= lr * grad, for every parameter (on the device).
void sgd_update(Ctx& ctx, const std::vector<Param*>& params, float lr);
// grad := 0 for every parameter.
void zero_grads(Ctx& ctx, const std::vector<Param*>& params);

}  // namespace recap::models
