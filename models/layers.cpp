#include "models/layers.h"

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <unordered_set>

#include "harness/base/hash.h"
#include "harness/runtime/dropout.h"
#include "harness/runtime/faults.h"
#include "harness/runtime/philox.h"

namespace recap::models {

using device::MemCategory;
using math::Ew;

// ---- Saved ----------------------------------------------------------------------------------

namespace {
void collect_storages(const Saved& s, std::unordered_set<const runtime::Storage*>& seen, int64_t& bytes) {
  for (const Tensor& t : s.tensors) {
    if (!t.storage) continue;
    if (seen.insert(t.storage.get()).second) bytes += static_cast<int64_t>(t.storage->bytes);
  }
  for (const Saved& c : s.children) collect_storages(c, seen, bytes);
}
}  // namespace

int64_t Saved::bytes() const {
  std::unordered_set<const runtime::Storage*> seen;
  int64_t total = 0;
  collect_storages(*this, seen, total);
  return total;
}

// ---- helpers --------------------------------------------------------------------------------

namespace {

// Tensors kept for backward are activations; when the forward keeps nothing (inside a
// checkpoint's no-grad forward) the same scratch is workspace.
MemCategory saved_category(const Ctx& ctx) {
  return ctx.save_for_backward ? MemCategory::Activations : MemCategory::Workspace;
}

void check_2d(const Tensor& t, int64_t cols, DType dtype, const std::string& layer, const char* what) {
  if (!t.defined()) throw std::invalid_argument(layer + ": " + what + " is undefined");
  if (t.shape.size() != 2 || t.shape[1] != cols || t.shape[0] < 1)
    throw std::invalid_argument(layer + ": " + what + " must be [rows, " + std::to_string(cols) + "]");
  if (t.dtype != dtype)
    throw std::invalid_argument(layer + ": " + what + " is " + runtime::dtype_name(t.dtype) + ", layer is " +
                                runtime::dtype_name(dtype));
}

void check_saved(const Saved& s, size_t tensors, size_t children, const std::string& layer) {
  if (s.tensors.size() < tensors || s.children.size() != children)
    throw std::logic_error(layer + ": backward without a saved forward");
}

Tensor child_forward(Ctx& ctx, Layer& child, const Tensor& x, Saved& saved) {
  runtime::LayerScope scope(ctx, child.name());
  return child.forward(ctx, x, saved);
}

Tensor child_backward(Ctx& ctx, Layer& child, const Tensor& dy, Saved& saved) {
  runtime::LayerScope scope(ctx, child.name());
  return child.backward(ctx, dy, saved);
}

// A chain of sub-layers (Attention, Mlp): forward in order, one saved record per child; backward
// in reverse.
Tensor chain_forward(Ctx& ctx, const std::vector<Layer*>& chain, const Tensor& x, Saved& saved) {
  saved.clear();
  saved.children.resize(chain.size());
  Tensor h = x;
  for (size_t i = 0; i < chain.size(); ++i) h = child_forward(ctx, *chain[i], h, saved.children[i]);
  if (!ctx.save_for_backward) saved.clear();
  return h;
}

Tensor chain_backward(Ctx& ctx, const std::vector<Layer*>& chain, const Tensor& dy, Saved& saved,
                      const std::string& layer) {
  check_saved(saved, 0, chain.size(), layer);
  Tensor d = dy;
  for (size_t i = chain.size(); i-- > 0;) d = child_backward(ctx, *chain[i], d, saved.children[i]);
  saved.clear();
  return d;
}

void launch_ew(Ctx& ctx, Ew op, const Tensor& out, const Tensor* a, const Tensor* b = nullptr,
               const uint32_t* mask = nullptr, float s = 0.0f) {
  math::EwArgs e;
  e.op = op;
  e.dtype = ops::dtype_code(out.dtype);
  e.n = out.numel();
  e.a = a ? a->data : nullptr;
  e.b = b ? b->data : nullptr;
  e.mask = mask;
  e.out = out.data;
  e.s = s;
  ctx.launch(ops::elementwise(e));
}

// out = a + b, a new tensor.
Tensor add(Ctx& ctx, const Tensor& a, const Tensor& b, MemCategory cat) {
  Tensor out = ctx.alloc_tensor(a.shape, a.dtype, cat);
  launch_ew(ctx, Ew::Add, out, &a, &b);
  return out;
}

// A packed dropout mask of n elements (dropout_mask_words(n) uint32 words), carried by an fp32
// tensor of as many elements (Tensor has no integer dtype; the bytes are what matter).
Tensor alloc_mask(Ctx& ctx, uint64_t n, MemCategory cat) {
  return ctx.alloc_tensor({static_cast<int64_t>(runtime::dropout_mask_words(n))}, DType::F32, cat);
}

// Draws n values for `op` of the current layer and launches the mask kernel into `mask`.
void launch_dropout_mask(Ctx& ctx, const std::string& op, const Tensor& mask, uint64_t n, float p) {
  runtime::Draw d = ctx.draw(op, n);
  math::DropoutMaskArgs m;
  m.words = mask.as<uint32_t>();
  m.philox = d.args;
  m.n = n;
  m.p = p;
  m.record = d.record;
  ctx.launch(ops::dropout_mask(m));
}

std::string join(const std::string& path, const std::string& name) { return path.empty() ? name : path + "." + name; }

}  // namespace

// ---- init and builder -----------------------------------------------------------------------

namespace {
// What init_values draws, as the arguments of the kernel that draws it where the parameter lives.
math::FillUniformArgs init_args(uint64_t param_seed, const std::string& name, int64_t n, Init init, int64_t fan_in) {
  math::FillUniformArgs a;
  a.n = n;
  a.seed = param_seed ^ fnv1a64(name);
  a.offset = 0;
  a.base = init == Init::NormGamma ? 1.0f : 0.0f;
  a.bound = init == Init::Uniform ? 1.0f / std::sqrt(static_cast<float>(fan_in > 0 ? fan_in : 1)) : 0.1f;
  return a;
}
}  // namespace

std::vector<float> init_values(uint64_t param_seed, const std::string& name, int64_t n, Init init, int64_t fan_in) {
  std::vector<float> v(static_cast<size_t>(n));
  math::FillUniformArgs a = init_args(param_seed, name, n, init, fan_in);
  a.out = v.data();
  for (int64_t i = 0; i < n; ++i) math::fill_uniform_element(a, i);
  return v;
}

ops::GemmImpl default_gemm_impl() {
  static const ops::GemmImpl impl = [] {
    const char* e = std::getenv("RECAP_GEMM");
    return (e != nullptr && std::string(e) == "simple") ? ops::GemmImpl::Simple : ops::GemmImpl::Cublas;
  }();
  return impl;
}

Builder::Builder(Ctx& c, DType dt, uint64_t seed, WrapFn w)
    : ctx(c), dtype(dt), param_seed(seed), wrap(std::move(w)), gemm(default_gemm_impl()) {
  if (ctx.dev.backend() == device::Backend::Cuda && gemm == ops::GemmImpl::Cublas) {
    int e = ops::blas_prepare();
    if (e != 0) throw runtime::DeviceError("cublasCreate", static_cast<device::Status>(e), ctx.layer);
    // 8 MiB: ample for the small GEMMs recap runs; fixed, so cuBLAS never allocates (in capture).
    blas_workspace = ctx.alloc_tensor({2 * 1024 * 1024}, DType::F32, MemCategory::Workspace);
  }
}

Param Builder::make_param(const std::string& name, const Shape& shape, Init init, int64_t fan_in) {
  Param p;
  p.name = name;
  p.value = ctx.alloc_tensor(shape, dtype, MemCategory::Parameters);
  p.grad = ctx.alloc_tensor(shape, dtype, MemCategory::Gradients);
  // Drawn on the device, the values of init_values (a copy from the host per parameter waited for
  // the GPU: with 16 campaign processes on one H200, model builds were 23% of a case's time).
  // Model's constructor synchronizes once after every parameter.
  math::FillUniformArgs a = init_args(param_seed, name, p.value.numel(), init, fan_in);
  a.dtype = ops::dtype_code(dtype);
  a.out = p.value.data;
  ctx.launch(ops::fill_uniform(a));
  if (runtime::fault_on(runtime::Fault::GradBufferEmpty)) return p;  // allocated empty (torch.empty, not zeros)
  device::Status s = ctx.dev.memset(p.grad.data, 0, p.grad.bytes());  // zero in fp32 and bf16 alike
  if (!device::ok(s)) throw runtime::DeviceError("cudaMemset", s, "zeroing " + name + "'s gradient");
  return p;
}

std::unique_ptr<Layer> Builder::wrapped(std::unique_ptr<Layer> layer, const std::string& role) const {
  if (!wrap) return layer;
  std::unique_ptr<Layer> out = wrap(std::move(layer), role);
  if (!out) throw std::logic_error("wrap returned no layer for role " + role);
  return out;
}

ops::BlasWorkspace Builder::blas() const { return ops::BlasWorkspace{blas_workspace.data, blas_workspace.bytes()}; }

// ---- Linear ---------------------------------------------------------------------------------

Linear::Linear(Builder& b, const std::string& path, const std::string& name, int64_t in, int64_t out, bool bias)
    : Layer(name), in_(in), out_(out), has_bias_(bias), dtype_(b.dtype), gemm_(b.gemm), workspace_(b.blas_workspace) {
  const std::string full = join(path, name);
  weight_ = b.make_param(full + ".weight", {out, in}, Init::Uniform, in);
  if (bias) bias_ = b.make_param(full + ".bias", {out}, Init::Uniform, in);
}

std::vector<Param*> Linear::params() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

Tensor Linear::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  check_2d(x, in_, dtype_, name(), "input");
  const int64_t rows = x.shape[0];
  Tensor y = ctx.alloc_tensor({rows, out_}, dtype_, MemCategory::Activations);
  const math::GemmArgs g{.dtype = ops::dtype_code(dtype_), .trans_b = 1, .M = rows, .N = out_, .K = in_,  // y = x W^T + b
                         .A = x.data, .lda = in_, .B = weight_.value.data, .ldb = in_, .C = y.data, .ldc = out_,
                         .bias = has_bias_ ? bias_.value.data : nullptr};
  ctx.launch(ops::gemm(g, gemm_, ops::BlasWorkspace{workspace_.data, workspace_.bytes()}));
  saved.clear();
  if (ctx.save_for_backward) saved.tensors = {x};
  return y;
}

Tensor Linear::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  check_saved(saved, 1, 0, name());
  check_2d(dy, out_, dtype_, name(), "output gradient");
  const Tensor x = saved.tensors[0];
  const int64_t rows = x.shape[0];
  if (dy.shape[0] != rows) throw std::invalid_argument(name() + ": output gradient rows differ from the input's");
  const ops::BlasWorkspace ws{workspace_.data, workspace_.bytes()};
  const int dt = ops::dtype_code(dtype_);

  Tensor dx = ctx.alloc_tensor({rows, in_}, dtype_, MemCategory::Workspace);
  const math::GemmArgs g{.dtype = dt, .M = rows, .N = in_, .K = out_,  // dx = dy W
                         .A = dy.data, .lda = out_, .B = weight_.value.data, .ldb = in_, .C = dx.data, .ldc = in_};
  ctx.launch(ops::gemm(g, gemm_, ws));

  const math::GemmArgs w{.dtype = dt, .trans_a = 1, .M = out_, .N = in_, .K = rows, .beta = 1.0f,  // dW += dy^T x
                         .A = dy.data, .lda = out_, .B = x.data, .ldb = in_, .C = weight_.grad.data, .ldc = in_};
  ctx.launch(ops::gemm(w, gemm_, ws));

  if (has_bias_) {  // db += sum over rows of dy
    math::ColSumArgs c;
    c.dtype = dt;
    c.rows = rows;
    c.cols = out_;
    c.in = dy.data;
    c.out = bias_.grad.data;
    c.beta = 1.0f;
    ctx.launch(ops::col_sum(c));
  }
  saved.clear();
  return dx;
}

// ---- Norm -----------------------------------------------------------------------------------

Norm::Norm(Builder& b, const std::string& path, const std::string& name, int64_t width, bool rms)
    : Layer(name), width_(width), rms_(rms), dtype_(b.dtype) {
  const std::string full = join(path, name);
  weight_ = b.make_param(full + ".weight", {width}, Init::NormGamma, width);
  if (!rms) bias_ = b.make_param(full + ".bias", {width}, Init::NormBeta, width);
}

std::vector<Param*> Norm::params() {
  if (rms_) return {&weight_};
  return {&weight_, &bias_};
}

Tensor Norm::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  check_2d(x, width_, dtype_, name(), "input");
  const int64_t rows = x.shape[0];
  Tensor y = ctx.alloc_tensor(x.shape, dtype_, MemCategory::Activations);
  Tensor mean, rstd;
  if (ctx.save_for_backward) {
    if (!rms_) mean = ctx.alloc_tensor({rows}, DType::F32, MemCategory::Activations);
    rstd = ctx.alloc_tensor({rows}, DType::F32, MemCategory::Activations);
  }
  const math::NormArgs a{.dtype = ops::dtype_code(dtype_), .rms = rms_ ? 1 : 0, .rows = rows, .cols = width_, .x = x.data,
                         .gamma = weight_.value.data, .beta = rms_ ? nullptr : bias_.value.data, .y = y.data,
                         .mean = mean.as<float>(), .rstd = rstd.as<float>()};
  ctx.launch(ops::norm_forward(a));
  saved.clear();
  if (ctx.save_for_backward) saved.tensors = rms_ ? std::vector<Tensor>{x, rstd} : std::vector<Tensor>{x, rstd, mean};
  return y;
}

Tensor Norm::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  check_saved(saved, rms_ ? 2 : 3, 0, name());
  check_2d(dy, width_, dtype_, name(), "output gradient");
  const Tensor x = saved.tensors[0];
  const Tensor rstd = saved.tensors[1];
  const Tensor mean = rms_ ? Tensor{} : saved.tensors[2];
  const int64_t rows = x.shape[0];
  if (dy.shape[0] != rows) throw std::invalid_argument(name() + ": output gradient rows differ from the input's");
  Tensor dx = ctx.alloc_tensor(x.shape, dtype_, MemCategory::Workspace);
  const math::NormArgs a{.dtype = ops::dtype_code(dtype_), .rms = rms_ ? 1 : 0, .rows = rows, .cols = width_, .x = x.data,
                         .gamma = weight_.value.data, .mean = mean.as<float>(), .rstd = rstd.as<float>(),
                         .dy = dy.data, .dx = dx.data, .dgamma = weight_.grad.data,
                         .dbeta = rms_ ? nullptr : bias_.grad.data};
  ctx.launch(ops::norm_backward_dx(a));
  ctx.launch(ops::norm_backward_params(a));
  saved.clear();
  return dx;
}

// ---- Gelu -----------------------------------------------------------------------------------

Gelu::Gelu(Builder&, const std::string& name) : Layer(name) {}

Tensor Gelu::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  if (!x.defined()) throw std::invalid_argument(name() + ": input is undefined");
  Tensor y = ctx.alloc_tensor(x.shape, x.dtype, MemCategory::Activations);
  launch_ew(ctx, Ew::Gelu, y, &x);
  saved.clear();
  if (ctx.save_for_backward) saved.tensors = {x};
  return y;
}

Tensor Gelu::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  check_saved(saved, 1, 0, name());
  const Tensor x = saved.tensors[0];
  if (dy.shape != x.shape || dy.dtype != x.dtype) throw std::invalid_argument(name() + ": output gradient shape mismatch");
  Tensor dx = ctx.alloc_tensor(x.shape, x.dtype, MemCategory::Workspace);
  launch_ew(ctx, Ew::GeluBackward, dx, &x, &dy);
  saved.clear();
  return dx;
}

// ---- Dropout --------------------------------------------------------------------------------

Dropout::Dropout(Builder&, const std::string& name, float p, std::string op) : Layer(name), p_(p), op_(std::move(op)) {
  if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument(name + ": dropout probability must be in [0, 1)");
}

Tensor Dropout::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  if (!x.defined()) throw std::invalid_argument(name() + ": input is undefined");
  saved.clear();
  if (p_ == 0.0f) return x;  // no draw and no copy: ATen's dropout returns its input when p = 0
  Tensor y = ctx.alloc_tensor(x.shape, x.dtype, MemCategory::Activations);
  const uint64_t n = static_cast<uint64_t>(x.numel());
  Tensor mask = alloc_mask(ctx, n, saved_category(ctx));
  launch_dropout_mask(ctx, op_, mask, n, p_);
  launch_ew(ctx, Ew::DropoutApply, y, &x, nullptr, mask.as<uint32_t>(), 1.0f / (1.0f - p_));
  if (ctx.save_for_backward) saved.tensors = {mask};
  return y;
}

Tensor Dropout::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  Tensor dx = ctx.alloc_tensor(dy.shape, dy.dtype, MemCategory::Workspace);
  if (p_ == 0.0f) {
    launch_ew(ctx, Ew::Copy, dx, &dy);
  } else {
    check_saved(saved, 1, 0, name());
    const Tensor mask = saved.tensors[0];
    if (static_cast<uint64_t>(mask.numel()) != runtime::dropout_mask_words(static_cast<uint64_t>(dy.numel())))
      throw std::invalid_argument(name() + ": output gradient shape mismatch");
    launch_ew(ctx, Ew::DropoutApply, dx, &dy, nullptr, mask.as<uint32_t>(), 1.0f / (1.0f - p_));
  }
  saved.clear();
  return dx;
}

// ---- AttentionCore --------------------------------------------------------------------------

AttentionCore::AttentionCore(Builder&, const std::string& name, int64_t hidden, int64_t heads, float p)
    : Layer(name), hidden_(hidden), heads_(heads), p_(p) {
  if (heads < 1 || hidden % heads != 0) throw std::invalid_argument(name + ": hidden must be divisible by heads");
  if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument(name + ": dropout probability must be in [0, 1)");
}

namespace {
math::AttnArgs attn_args(const Tensor& qkv, int64_t hidden, int64_t heads) {
  math::AttnArgs a;
  a.dtype = ops::dtype_code(qkv.dtype);
  a.T = qkv.shape[0];
  a.hidden = hidden;
  a.heads = heads;
  a.dh = hidden / heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(a.dh));
  a.qkv = qkv.data;
  return a;
}
}  // namespace

Tensor AttentionCore::forward(Ctx& ctx, const Tensor& qkv, Saved& saved) {
  check_2d(qkv, 3 * hidden_, qkv.dtype, name(), "qkv");
  saved.clear();
  math::AttnArgs a = attn_args(qkv, hidden_, heads_);
  const int64_t T = a.T;
  Tensor P = ctx.alloc_tensor({heads_, T, T}, qkv.dtype, saved_category(ctx));
  a.P = P.data;
  ctx.launch(ops::attn_softmax_forward(a));
  Tensor mask;
  if (p_ > 0.0f) {
    const uint64_t n = static_cast<uint64_t>(heads_ * T * T);
    mask = alloc_mask(ctx, n, saved_category(ctx));
    launch_dropout_mask(ctx, "attn_dropout", mask, n, p_);
    a.mask = mask.as<uint32_t>();
    a.keep_scale = 1.0f / (1.0f - p_);
  }
  Tensor out = ctx.alloc_tensor({T, hidden_}, qkv.dtype, MemCategory::Activations);
  a.out = out.data;
  ctx.launch(ops::attn_pv_forward(a));
  if (ctx.save_for_backward) {
    saved.tensors = {qkv, P};
    if (mask.defined()) saved.tensors.push_back(mask);
  }
  return out;
}

Tensor AttentionCore::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  check_saved(saved, p_ > 0.0f ? 3 : 2, 0, name());
  const Tensor qkv = saved.tensors[0];
  const Tensor P = saved.tensors[1];
  check_2d(dy, hidden_, qkv.dtype, name(), "output gradient");
  math::AttnArgs a = attn_args(qkv, hidden_, heads_);
  const int64_t T = a.T;
  if (dy.shape[0] != T) throw std::invalid_argument(name() + ": output gradient rows differ from the input's");
  a.P = P.data;
  if (p_ > 0.0f) {
    a.mask = saved.tensors[2].as<uint32_t>();
    a.keep_scale = 1.0f / (1.0f - p_);
  }
  Tensor dS = ctx.alloc_tensor({heads_, T, T}, DType::F32, MemCategory::Workspace);
  Tensor dqkv = ctx.alloc_tensor(qkv.shape, qkv.dtype, MemCategory::Workspace);
  a.dout = dy.data;
  a.dS = dS.as<float>();
  a.dqkv = dqkv.data;
  ctx.launch(ops::attn_dp(a));
  ctx.launch(ops::attn_softmax_backward(a));
  ctx.launch(ops::attn_dqkv(a));
  saved.clear();
  return dqkv;
}

// ---- Attention ------------------------------------------------------------------------------

Attention::Attention(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t heads,
                     float p)
    : Layer(name) {
  const std::string full = join(path, name);
  qkv_ = std::make_unique<Linear>(b, full, "qkv", hidden, 3 * hidden);
  core_ = b.wrapped(std::make_unique<AttentionCore>(b, "core", hidden, heads, p), "attn_core");
  proj_ = std::make_unique<Linear>(b, full, "proj", hidden, hidden);
}

namespace {
std::vector<Param*> concat_params(std::initializer_list<Layer*> layers) {
  std::vector<Param*> out;
  for (Layer* l : layers) {
    std::vector<Param*> p = l->params();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}
}  // namespace

std::vector<Param*> Attention::params() { return concat_params({qkv_.get(), core_.get(), proj_.get()}); }

Tensor Attention::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  return chain_forward(ctx, {qkv_.get(), core_.get(), proj_.get()}, x, saved);
}

Tensor Attention::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  return chain_backward(ctx, {qkv_.get(), core_.get(), proj_.get()}, dy, saved, name());
}

// ---- Mlp ------------------------------------------------------------------------------------

Mlp::Mlp(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t ffn, float p)
    : Layer(name) {
  const std::string full = join(path, name);
  fc1_ = std::make_unique<Linear>(b, full, "fc1", hidden, ffn);
  gelu_ = std::make_unique<Gelu>(b, "gelu");
  fc2_ = std::make_unique<Linear>(b, full, "fc2", ffn, hidden);
  dropout_ = std::make_unique<Dropout>(b, "dropout", p);
}

std::vector<Param*> Mlp::params() { return concat_params({fc1_.get(), gelu_.get(), fc2_.get(), dropout_.get()}); }

Tensor Mlp::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  return chain_forward(ctx, {fc1_.get(), gelu_.get(), fc2_.get(), dropout_.get()}, x, saved);
}

Tensor Mlp::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  return chain_backward(ctx, {fc1_.get(), gelu_.get(), fc2_.get(), dropout_.get()}, dy, saved, name());
}

// ---- SwiGlu ---------------------------------------------------------------------------------

SwiGlu::SwiGlu(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t ffn)
    : Layer(name) {
  const std::string full = join(path, name);
  gate_ = std::make_unique<Linear>(b, full, "gate", hidden, ffn, false);
  up_ = std::make_unique<Linear>(b, full, "up", hidden, ffn, false);
  down_ = std::make_unique<Linear>(b, full, "down", ffn, hidden, false);
}

std::vector<Param*> SwiGlu::params() { return concat_params({gate_.get(), up_.get(), down_.get()}); }

Tensor SwiGlu::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  saved.clear();
  saved.children.resize(3);
  Tensor g = child_forward(ctx, *gate_, x, saved.children[0]);
  Tensor u = child_forward(ctx, *up_, x, saved.children[1]);
  Tensor h = ctx.alloc_tensor(g.shape, g.dtype, MemCategory::Activations);
  launch_ew(ctx, Ew::SiluGate, h, &g, &u);
  Tensor y = child_forward(ctx, *down_, h, saved.children[2]);
  if (ctx.save_for_backward)
    saved.tensors = {g, u};
  else
    saved.clear();
  return y;
}

Tensor SwiGlu::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  check_saved(saved, 2, 3, name());
  const Tensor g = saved.tensors[0];
  const Tensor u = saved.tensors[1];
  Tensor dh = child_backward(ctx, *down_, dy, saved.children[2]);
  Tensor dg = ctx.alloc_tensor(g.shape, g.dtype, MemCategory::Workspace);
  Tensor du = ctx.alloc_tensor(u.shape, u.dtype, MemCategory::Workspace);
  math::SiluGateBackwardArgs a;
  a.dtype = ops::dtype_code(g.dtype);
  a.n = g.numel();
  a.g = g.data;
  a.u = u.data;
  a.dh = dh.data;
  a.dg = dg.data;
  a.du = du.data;
  ctx.launch(ops::silu_gate_backward(a));
  Tensor dx_up = child_backward(ctx, *up_, du, saved.children[1]);
  Tensor dx_gate = child_backward(ctx, *gate_, dg, saved.children[0]);
  Tensor dx = add(ctx, dx_gate, dx_up, MemCategory::Workspace);
  saved.clear();
  return dx;
}

// ---- Block ----------------------------------------------------------------------------------

Block::Block(Builder& b, const std::string& path, const std::string& name, int64_t hidden, int64_t heads, int64_t ffn,
             float p)
    : Layer(name) {
  const std::string full = join(path, name);
  ln1_ = b.wrapped(std::make_unique<Norm>(b, full, "ln1", hidden, false), "norm");
  attn_ = std::make_unique<Attention>(b, full, "attn", hidden, heads, p);
  drop1_ = std::make_unique<Dropout>(b, "drop1", p);
  ln2_ = b.wrapped(std::make_unique<Norm>(b, full, "ln2", hidden, false), "norm");
  mlp_ = b.wrapped(std::make_unique<Mlp>(b, full, "mlp", hidden, ffn, p), "mlp");
}

std::vector<Param*> Block::params() {
  return concat_params({ln1_.get(), attn_.get(), drop1_.get(), ln2_.get(), mlp_.get()});
}

Tensor Block::forward(Ctx& ctx, const Tensor& x, Saved& saved) {
  saved.clear();
  saved.children.resize(5);
  Tensor a = child_forward(ctx, *ln1_, x, saved.children[0]);
  a = child_forward(ctx, *attn_, a, saved.children[1]);
  a = child_forward(ctx, *drop1_, a, saved.children[2]);
  Tensor h = add(ctx, x, a, MemCategory::Activations);
  Tensor m = child_forward(ctx, *ln2_, h, saved.children[3]);
  m = child_forward(ctx, *mlp_, m, saved.children[4]);
  Tensor y = add(ctx, h, m, MemCategory::Activations);
  if (!ctx.save_for_backward) saved.clear();
  return y;
}

Tensor Block::backward(Ctx& ctx, const Tensor& dy, Saved& saved) {
  check_saved(saved, 0, 5, name());
  Tensor dm = child_backward(ctx, *mlp_, dy, saved.children[4]);
  dm = child_backward(ctx, *ln2_, dm, saved.children[3]);
  Tensor dh = add(ctx, dy, dm, MemCategory::Workspace);
  Tensor da = child_backward(ctx, *drop1_, dh, saved.children[2]);
  da = child_backward(ctx, *attn_, da, saved.children[1]);
  da = child_backward(ctx, *ln1_, da, saved.children[0]);
  Tensor dx = add(ctx, dh, da, MemCategory::Workspace);
  saved.clear();
  return dx;
}

}  // namespace recap::models
