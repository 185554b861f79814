#include "models/ops.h"

#include <cstdint>
#include <string>
#include <vector>

#include "harness/runtime/faults.h"

#ifdef RECAP_WITH_CUDA
#include "models/ops_gpu.h"
#endif

namespace recap::models::ops {
namespace {

using device::Access;
using device::Kernel;

size_t esize(int dt) { return dt == math::kBF16 ? 2 : 4; }
Access span(const void* p, int64_t elems, int dt) { return Access{p, static_cast<size_t>(elems) * esize(dt)}; }
Access fspan(const float* p, int64_t elems) { return Access{p, static_cast<size_t>(elems) * sizeof(float)}; }
Access mspan(const uint32_t* words, int64_t n) {
  return Access{words, static_cast<size_t>(runtime::dropout_mask_words(static_cast<uint64_t>(n))) * sizeof(uint32_t)};
}

// A host body that applies `fn` to every index in [0, count), in order.
template <typename Args, typename Fn>
std::function<void()> host_loop(const Args& a, int64_t count, Fn fn) {
  return [a, count, fn] {
    for (int64_t i = 0; i < count; ++i) fn(a, i);
  };
}

#ifdef RECAP_WITH_CUDA
#define RECAP_MODELS_GPU(call) [=](void* st) { return gpu::call; }
#else
#define RECAP_MODELS_GPU(call) nullptr
#endif

std::vector<Access> philox_state_reads(const runtime::PhiloxArgs& p) {
  if (!p.graph_safe) return {};
  return {Access{p.seed_ptr, sizeof(uint64_t)}, Access{p.offset_ptr, sizeof(uint64_t)}};
}

}  // namespace

Kernel gemm(const math::GemmArgs& a, GemmImpl impl, BlasWorkspace ws) {
  Kernel k;
  k.name = impl == GemmImpl::Cublas ? "gemm_cublas" : "gemm";
  const int64_t a_extent = (a.batch - 1) * a.stride_a + (a.trans_a ? (a.K - 1) * a.lda + a.M : (a.M - 1) * a.lda + a.K);
  const int64_t b_extent = (a.batch - 1) * a.stride_b + (a.trans_b ? (a.N - 1) * a.ldb + a.K : (a.K - 1) * a.ldb + a.N);
  const int64_t c_extent = (a.batch - 1) * a.stride_c + (a.M - 1) * a.ldc + a.N;
  k.reads = {span(a.A, a_extent, a.dtype), span(a.B, b_extent, a.dtype)};
  if (a.beta != 0.0f) k.reads.push_back(span(a.C, c_extent, a.dtype));
  if (a.bias != nullptr) k.reads.push_back(span(a.bias, a.N, a.dtype));
  k.writes = {span(a.C, c_extent, a.dtype)};
  k.host = host_loop(a, a.batch * a.M * a.N, math::gemm_element);
#ifdef RECAP_WITH_CUDA
  if (impl == GemmImpl::Cublas)
    k.gpu = [a, ws](void* st) { return gpu::gemm_cublas(st, a, ws.ptr, ws.bytes); };
  else
    k.gpu = [a](void* st) { return gpu::gemm(st, a); };
#else
  (void)ws;
#endif
  return k;
}

Kernel col_sum(const math::ColSumArgs& a) {
  Kernel k;
  k.name = "col_sum";
  k.reads = {span(a.in, a.rows * a.cols, a.dtype)};
  if (a.beta != 0.0f) k.reads.push_back(span(a.out, a.cols, a.dtype));
  k.writes = {span(a.out, a.cols, a.dtype)};
  k.host = host_loop(a, a.cols, math::col_sum_element);
  k.gpu = RECAP_MODELS_GPU(col_sum(st, a));
  return k;
}

Kernel norm_forward(const math::NormArgs& a) {
  Kernel k;
  k.name = a.rms ? "rmsnorm_forward" : "layernorm_forward";
  k.reads = {span(a.x, a.rows * a.cols, a.dtype), span(a.gamma, a.cols, a.dtype)};
  if (!a.rms) k.reads.push_back(span(a.beta, a.cols, a.dtype));
  k.writes = {span(a.y, a.rows * a.cols, a.dtype)};
  if (a.mean != nullptr) k.writes.push_back(fspan(a.mean, a.rows));
  if (a.rstd != nullptr) k.writes.push_back(fspan(a.rstd, a.rows));
  k.host = host_loop(a, a.rows, math::norm_forward_row);
  k.gpu = RECAP_MODELS_GPU(norm_forward(st, a));
  return k;
}

Kernel norm_backward_dx(const math::NormArgs& a) {
  Kernel k;
  k.name = a.rms ? "rmsnorm_backward_dx" : "layernorm_backward_dx";
  k.reads = {span(a.x, a.rows * a.cols, a.dtype), span(a.gamma, a.cols, a.dtype), span(a.dy, a.rows * a.cols, a.dtype),
             fspan(a.rstd, a.rows)};
  if (!a.rms) k.reads.push_back(fspan(a.mean, a.rows));
  k.writes = {span(a.dx, a.rows * a.cols, a.dtype)};
  k.host = host_loop(a, a.rows, math::norm_backward_dx_row);
  k.gpu = RECAP_MODELS_GPU(norm_backward_dx(st, a));
  return k;
}

Kernel norm_backward_params(const math::NormArgs& a) {
  Kernel k;
  k.name = a.rms ? "rmsnorm_backward_params" : "layernorm_backward_params";
  k.reads = {span(a.x, a.rows * a.cols, a.dtype), span(a.dy, a.rows * a.cols, a.dtype), fspan(a.rstd, a.rows),
             span(a.dgamma, a.cols, a.dtype)};
  k.writes = {span(a.dgamma, a.cols, a.dtype)};
  if (!a.rms) {
    k.reads.push_back(fspan(a.mean, a.rows));
    k.reads.push_back(span(a.dbeta, a.cols, a.dtype));
    k.writes.push_back(span(a.dbeta, a.cols, a.dtype));
  }
  k.host = host_loop(a, a.cols, math::norm_backward_params_col);
  k.gpu = RECAP_MODELS_GPU(norm_backward_params(st, a));
  return k;
}

Kernel elementwise(const math::EwArgs& a) {
  using math::Ew;
  static const char* const kNames[] = {"fill", "add", "add_into", "gelu", "gelu_backward", "dropout_apply",
                                       "silu_gate", "sgd", "mse_grad", "copy"};
  Kernel k;
  k.name = kNames[static_cast<int>(a.op)];
  switch (a.op) {
    case Ew::Fill: break;
    case Ew::AddInto:
    case Ew::Sgd: k.reads = {span(a.out, a.n, a.dtype), span(a.a, a.n, a.dtype)}; break;
    case Ew::Copy:
    case Ew::Gelu: k.reads = {span(a.a, a.n, a.dtype)}; break;
    case Ew::DropoutApply: k.reads = {span(a.a, a.n, a.dtype), mspan(a.mask, a.n)}; break;
    case Ew::Add:
    case Ew::GeluBackward:
    case Ew::SiluGate:
    case Ew::MseGrad: k.reads = {span(a.a, a.n, a.dtype), span(a.b, a.n, a.dtype)}; break;
  }
  k.writes = {span(a.out, a.n, a.dtype)};
  k.host = host_loop(a, a.n, math::ew_element);
  k.gpu = RECAP_MODELS_GPU(elementwise(st, a));
  return k;
}

Kernel silu_gate_backward(const math::SiluGateBackwardArgs& a) {
  Kernel k;
  k.name = "silu_gate_backward";
  k.reads = {span(a.g, a.n, a.dtype), span(a.u, a.n, a.dtype), span(a.dh, a.n, a.dtype)};
  k.writes = {span(a.dg, a.n, a.dtype), span(a.du, a.n, a.dtype)};
  k.host = host_loop(a, a.n, math::silu_gate_backward_element);
  k.gpu = RECAP_MODELS_GPU(silu_gate_backward(st, a));
  return k;
}

Kernel fill_uniform(const math::FillUniformArgs& a) {
  Kernel k;
  k.name = "fill_uniform";
  k.writes = {span(a.out, a.n, a.dtype)};
  k.host = host_loop(a, a.n, math::fill_uniform_element);
  k.gpu = RECAP_MODELS_GPU(fill_uniform(st, a));
  return k;
}

Kernel dropout_mask(const math::DropoutMaskArgs& given) {
  math::DropoutMaskArgs a = given;
  if (runtime::fault_on(runtime::Fault::CudaDropoutOffset)) a.gpu_offset_shift = 4;  // one Philox block
  Kernel k;
  k.name = "dropout_mask";
  k.reads = philox_state_reads(a.philox);
  k.writes = {mspan(a.words, static_cast<int64_t>(a.n))};
  if (a.record != nullptr) k.writes.push_back(Access{a.record, 2 * sizeof(uint64_t)});
  k.host = host_loop(a, static_cast<int64_t>(runtime::dropout_mask_words(a.n)), math::dropout_mask_element);
  k.gpu = RECAP_MODELS_GPU(dropout_mask(st, a));
  return k;
}

namespace {
int64_t attn_p_elems(const math::AttnArgs& a) { return a.heads * a.T * a.T; }
Access attn_qkv(const math::AttnArgs& a) { return span(a.qkv, a.T * 3 * a.hidden, a.dtype); }
Access attn_p(const math::AttnArgs& a) { return span(a.P, attn_p_elems(a), a.dtype); }
}  // namespace

Kernel attn_softmax_forward(const math::AttnArgs& a) {
  Kernel k;
  k.name = "attn_softmax_forward";
  k.reads = {attn_qkv(a)};
  k.writes = {attn_p(a)};
  k.host = host_loop(a, a.heads * a.T, math::attn_softmax_forward_row);
  k.gpu = RECAP_MODELS_GPU(attn_softmax_forward(st, a));
  return k;
}

Kernel attn_pv_forward(const math::AttnArgs& a) {
  Kernel k;
  k.name = "attn_pv_forward";
  k.reads = {attn_qkv(a), attn_p(a)};
  if (a.mask != nullptr) k.reads.push_back(mspan(a.mask, attn_p_elems(a)));
  k.writes = {span(a.out, a.T * a.hidden, a.dtype)};
  k.host = host_loop(a, a.T * a.hidden, math::attn_pv_forward_element);
  k.gpu = RECAP_MODELS_GPU(attn_pv_forward(st, a));
  return k;
}

Kernel attn_dp(const math::AttnArgs& a) {
  Kernel k;
  k.name = "attn_dp";
  k.reads = {attn_qkv(a), span(a.dout, a.T * a.hidden, a.dtype)};
  if (a.mask != nullptr) k.reads.push_back(mspan(a.mask, attn_p_elems(a)));
  k.writes = {fspan(a.dS, attn_p_elems(a))};
  k.host = host_loop(a, attn_p_elems(a), math::attn_dp_element);
  k.gpu = RECAP_MODELS_GPU(attn_dp(st, a));
  return k;
}

Kernel attn_softmax_backward(const math::AttnArgs& a) {
  Kernel k;
  k.name = "attn_softmax_backward";
  k.reads = {attn_p(a), fspan(a.dS, attn_p_elems(a))};
  k.writes = {fspan(a.dS, attn_p_elems(a))};
  k.host = host_loop(a, a.heads * a.T, math::attn_softmax_backward_row);
  k.gpu = RECAP_MODELS_GPU(attn_softmax_backward(st, a));
  return k;
}

Kernel attn_dqkv(const math::AttnArgs& a) {
  Kernel k;
  k.name = "attn_dqkv";
  k.reads = {attn_qkv(a), attn_p(a), fspan(a.dS, attn_p_elems(a)), span(a.dout, a.T * a.hidden, a.dtype)};
  if (a.mask != nullptr) k.reads.push_back(mspan(a.mask, attn_p_elems(a)));
  k.writes = {span(a.dqkv, a.T * 3 * a.hidden, a.dtype)};
  k.host = host_loop(a, a.T * 3 * a.hidden, math::attn_dqkv_element);
  k.gpu = RECAP_MODELS_GPU(attn_dqkv(st, a));
  return k;
}

Kernel mse_loss(const math::MseArgs& a) {
  Kernel k;
  k.name = "mse_loss";
  k.reads = {span(a.y, a.n, a.dtype), span(a.target, a.n, a.dtype)};
  k.writes = {fspan(a.loss, 1)};
  k.host = [a] { math::mse_loss_single(a); };
  k.gpu = RECAP_MODELS_GPU(mse_loss(st, a));
  return k;
}

int blas_prepare() {
#ifdef RECAP_WITH_CUDA
  return gpu::blas_prepare();
#else
  return 0;
#endif
}

bool blas_available() {
#ifdef RECAP_WITH_CUDA
  return gpu::cublas_available();
#else
  return false;
#endif
}

}  // namespace recap::models::ops
