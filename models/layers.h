// The layers. Each maps a [rows, width] tensor to another through the ops of ops.h, records what
// backward needs in its Saved (only when ctx.save_for_backward), and in backward accumulates its
// parameter gradients (+=), returns dL/dx and clears its Saved.
//
// Containers (Attention, Mlp, SwiGlu, Block) run each child inside a runtime::LayerScope named
// after the child, in forward AND backward, so that a child wrapped in a checkpoint recomputes
// under the same layer path as its forward (the RNG ledger compares draws by path). Sub-modules
// pass through the Builder's WrapFn with their role ("attn_core", "mlp", "norm"); a wrapped child
// is only ever used through the Layer interface.
//
// Memory categories: parameters Parameters, their gradients Gradients; forward outputs and the
// tensors saved for backward (LayerNorm statistics, attention probabilities, dropout masks)
// Activations; tensors needed only within a call (everything in backward but parameter gradients,
// statistics a no-grad forward does not keep) Workspace.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/layer.h"
#include "models/ops.h"

namespace recap::models {

// How a parameter is initialized (bf16 rounds to nearest even).
enum class Init {
  Uniform,    // U(-bound, bound), bound = 1/sqrt(fan_in) (PyTorch's Linear default)
  NormGamma,  // 1 + U(-0.1, 0.1): near PyTorch's ones, but not exactly 1, so gradients see gamma
  NormBeta,   // U(-0.1, 0.1)
};

// The host values of parameter `name`: value i is a Philox draw at key param_seed ^ fnv1a(name),
// so a parameter's values depend on the seed and its name alone (not on build order or backend).
// Builder::make_param draws the same values on the device (ops::fill_uniform).
std::vector<float> init_values(uint64_t param_seed, const std::string& name, int64_t n, Init init, int64_t fan_in);

// Which GEMM Linear layers use on the cuda backend: Cublas unless the environment variable
// RECAP_GEMM=simple says otherwise (read once).
ops::GemmImpl default_gemm_impl();

// What building layers needs. Parameters are created through it (allocated, initialized,
// uploaded, gradients zeroed on ctx.stream).
struct Builder {
  Ctx& ctx;
  DType dtype = DType::F32;
  uint64_t param_seed = 0;
  WrapFn wrap;
  ops::GemmImpl gemm = ops::GemmImpl::Cublas;
  Tensor blas_workspace;  // cuda only: the cuBLAS workspace every Linear sets at each launch

  Builder(Ctx& c, DType dt, uint64_t seed, WrapFn w);
  Param make_param(const std::string& name, const Shape& shape, Init init, int64_t fan_in);
  std::unique_ptr<Layer> wrapped(std::unique_ptr<Layer> layer, const std::string& role) const;
  ops::BlasWorkspace blas() const;
};

// y = x W^T + b; W [out, in], b [out] (optional).
class Linear : public Layer {
 public:
  Linear(Builder& b, const std::string& path, const std::string& name, int64_t in, int64_t out, bool bias = true);
  std::string kind() const override { return "linear"; }
  std::vector<Param*> params() override;
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;

 private:
  int64_t in_, out_;
  bool has_bias_;
  DType dtype_;
  ops::GemmImpl gemm_;
  Tensor workspace_;  // keeps the cuBLAS workspace alive
  Param weight_, bias_;
};

// LayerNorm (weight, bias) or RMSNorm (weight), eps 1e-5, over the last dimension.
class Norm : public Layer {
 public:
  Norm(Builder& b, const std::string& path, const std::string& name, int64_t width, bool rms);
  std::string kind() const override { return rms_ ? "rmsnorm" : "layernorm"; }
  std::vector<Param*> params() override;
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;

 private:
  int64_t width_;
  bool rms_;
  DType dtype_;
  Param weight_, bias_;
};

// GELU, tanh approximation (op_math.h).
class Gelu : public Layer {
 public:
  Gelu(Builder& b, const std::string& name);
  std::string kind() const override { return "gelu"; }
  std::vector<Param*> params() override { return {}; }
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;
};

// Dropout with probability p in [0, 1): one draw of numel values through ctx.draw(op, numel),
// the mask computed by a kernel from the (seed, offset) it unpacks when it runs (its realized
// values go to the draw's record), kept elements scaled by 1/(1-p); the mask is saved for
// backward. p = 0 draws nothing and copies.
class Dropout : public Layer {
 public:
  Dropout(Builder& b, const std::string& name, float p, std::string op = "dropout");
  std::string kind() const override { return "dropout"; }
  std::vector<Param*> params() override { return {}; }
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;
  float p() const { return p_; }

 private:
  float p_;
  std::string op_;
};

// Causal scaled-dot-product attention core: qkv [T, 3*hidden] -> [T, hidden]; softmax, then
// attention dropout (op "attn_dropout", heads*T*T values). Role "attn_core".
class AttentionCore : public Layer {
 public:
  AttentionCore(Builder& b, const std::string& name, int64_t hidden, int64_t heads, float p);
  std::string kind() const override { return "attn_core"; }
  std::vector<Param*> params() override { return {}; }
  Tensor forward(Ctx& ctx, const Tensor& qkv, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;

 private:
  int64_t hidden_, heads_;
  float p_;
};

// Causal multi-head self-attention: qkv (Linear hidden -> 3 hidden), core (AttentionCore,
// wrapped as "attn_core"), proj (Linear hidden -> hidden).
class Attention : public Layer {
 public:
  Attention(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t heads, float p);
  std::string kind() const override { return "attention"; }
  std::vector<Param*> params() override;
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;

 private:
  std::unique_ptr<Layer> qkv_, core_, proj_;
};

// fc1 (hidden -> ffn), gelu, fc2 (ffn -> hidden), dropout.
class Mlp : public Layer {
 public:
  Mlp(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t ffn, float p);
  std::string kind() const override { return "mlp"; }
  std::vector<Param*> params() override;
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;

 private:
  std::unique_ptr<Layer> fc1_, gelu_, fc2_, dropout_;
};

// SwiGLU feed-forward (LLaMA): down(silu(gate(x)) * up(x)); gate, up: hidden -> ffn, down:
// ffn -> hidden, all without bias.
class SwiGlu : public Layer {
 public:
  SwiGlu(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t ffn);
  std::string kind() const override { return "swiglu"; }
  std::vector<Param*> params() override;
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;

 private:
  std::unique_ptr<Layer> gate_, up_, down_;
};

// Pre-norm transformer block: h = x + drop1(attn(ln1(x))); y = h + mlp(ln2(h)), where the MLP's
// own trailing dropout is the second residual dropout. ln1/ln2 are LayerNorms (role "norm"), the
// MLP has role "mlp", the attention's core role "attn_core".
class Block : public Layer {
 public:
  Block(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t heads, int64_t ffn,
        float p);
  std::string kind() const override { return "block"; }
  std::vector<Param*> params() override;
  Tensor forward(Ctx& ctx, const Tensor& x, Saved& saved) override;
  Tensor backward(Ctx& ctx, const Tensor& dy, Saved& saved) override;

 private:
  std::unique_ptr<Layer> ln1_, attn_, drop1_, ln2_, mlp_;
};

}  // namespace recap::models
