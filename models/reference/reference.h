// The fp64 CPU reference of every layer: forward and backward in double from the same inputs,
// parameters and dropout masks as the device run, for gradient checks with a tolerance (not
// bitwise). The structure, layer paths and parameter names mirror models/layers.h exactly:
// "block0.attn.core" draws op "attn_dropout", "block0.mlp.fc1.weight" is a parameter, and so on.
//
// Dropout masks are not drawn here: the caller supplies them through a MaskFn, normally computed
// on the host with runtime::dropout_mask_bytes() from the (seed, offset) the device kernel
// recorded for that layer and op, so that a mismatch between the kernel's mask and the ledger's
// (seed, offset) shows up as a gradient error.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/registry.h"

namespace recap::models::reference {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;  // parameter name -> values (row-major)

// The mask of the draw of `op` at layer path `layer`: n bytes, 1 kept, 0 dropped.
using MaskFn = std::function<std::vector<uint8_t>(const std::string& layer, const std::string& op, uint64_t n, float p)>;

// ---- ops, row-major, in double -------------------------------------------------------------------
// y[r, o] = sum_i x[r, i] W[o, i] + b[o]   (b may be null)
Vec linear_forward(const Vec& x, int64_t rows, int64_t in, int64_t out, const Vec& W, const Vec* b);
// returns dx; dW += dy^T x; db += column sums of dy (db may be null)
Vec linear_backward(const Vec& x, const Vec& dy, int64_t rows, int64_t in, int64_t out, const Vec& W, Vec& dW, Vec* db);
double gelu(double x);       // tanh approximation
double gelu_grad(double x);
constexpr double kNormEps = 1e-5;

// ---- the model -------------------------------------------------------------------------------------
class RefLayer;
struct Store;  // where reference layers find their parameters and put their gradients

// The reference layer of each kind (models/registry.h's make_reference).
std::unique_ptr<RefLayer> make_linear(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_gelu(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_dropout(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_layernorm(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_rmsnorm(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_swiglu(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_mlp_layer(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_attention_layer(Store& s, const LayerArgs& a);
std::unique_ptr<RefLayer> make_block(Store& s, const LayerArgs& a);

class RefModel {
 public:
  // Throws std::invalid_argument when the spec is invalid or a parameter is missing/mis-sized.
  RefModel(const ModelSpec& spec, const Params& params);
  ~RefModel();
  RefModel(const RefModel&) = delete;
  RefModel& operator=(const RefModel&) = delete;

  // x: [rows, hidden]. Masks are asked for in forward order.
  Vec forward(const Vec& x, int64_t rows, const MaskFn& masks);
  // dy: [rows, hidden] -> dx; parameter gradients accumulate (from zero) into grads().
  Vec backward(const Vec& dy);
  const Params& grads() const { return grads_; }

 private:
  ModelSpec spec_;
  Params params_;
  Params grads_;
  std::vector<std::unique_ptr<RefLayer>> layers_;
  int64_t rows_ = 0;
};

}  // namespace recap::models::reference
