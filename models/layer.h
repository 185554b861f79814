// Layers: forward and backward on both backends (through device-layer Kernels with a host body
// for sim and a CUDA body for cuda), deterministic (fixed reduction order, no atomics), each with
// an fp64 CPU reference for gradient checks. Layers know nothing of executors, graphs or
// checkpoint policies: a checkpoint is a runtime wrapper around a Layer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/runtime/context.h"
#include "harness/runtime/tensor.h"

namespace recap::models {

using runtime::Ctx;
using runtime::DType;
using runtime::Shape;
using runtime::Tensor;

struct Param {
  std::string name;  // path, "block0.mlp.fc1.weight"
  Tensor value;      // MemCategory::Parameters
  Tensor grad;       // MemCategory::Gradients; backward accumulates into it (+=)
};

// What a layer keeps from forward for backward: references to tensors (shared storage, so saving
// costs no copy and dropping the reference frees the memory), and one child record per sub-layer.
struct Saved {
  std::vector<Tensor> tensors;
  std::vector<Saved> children;
  void clear() { tensors.clear(); children.clear(); }
  int64_t bytes() const;  // bytes of the distinct storages referenced, children included
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  const std::string& name() const { return name_; }
  virtual std::string kind() const = 0;  // "linear", "layernorm", "block", ...
  virtual std::vector<Param*> params() = 0;  // this layer's and its children's
  // y = f(x). When ctx.save_for_backward, records in `saved` what backward needs.
  virtual Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) = 0;
  // Given dL/dy: accumulates parameter gradients, returns dL/dx, and clears `saved`.
  virtual Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) = 0;

 private:
  std::string name_;
};

// A hook the model builder calls on every sub-module it creates, so a runtime can wrap some
// (e.g. in a checkpoint) without layers knowing: wrap(layer, role) returns the layer to use.
// Roles: "block" (a whole transformer block or top-level layer), "attn_core", "mlp", "norm".
using WrapFn = std::function<std::unique_ptr<Layer>(std::unique_ptr<Layer>, const std::string& role)>;

}  // namespace recap::models
