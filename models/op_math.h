// The arithmetic of every model op, one RECAP_HD function per output element (or per row where a
// row reduction is needed), shared by the sim host loops (ops.cpp) and the CUDA kernels (ops.cu).
//
// Determinism: each function reduces in a fixed sequential order and writes only its own
// outputs; no atomics, no shared partial sums. A given backend therefore produces the same bits
// from the same inputs on every run, eagerly or replayed from a graph. CPU and GPU need not agree
// bit for bit (nvcc contracts a*b+c into FMA; expf/tanhf differ from glibc's).
//
// Storage: every tensor is fp32 or bf16 (dtype codes kF32/kBF16); arithmetic is fp32 and a bf16
// store rounds to nearest even (bf16.h). Internal statistics (LayerNorm mean/rstd, attention
// dS) are always fp32. Dropout masks are packed words as dropout.h lays them out.
//
// Keep to C++17: this header is compiled by nvcc too.
#pragma once

#include <math.h>

#include <cstdint>

#include "harness/runtime/bf16.h"
#include "harness/runtime/dropout.h"
#include "harness/runtime/hd.h"
#include "harness/runtime/philox.h"

namespace recap::models::math {

enum : int { kF32 = 0, kBF16 = 1 };

RECAP_HD inline float load(const void* p, int dt, int64_t i) {
  if (dt == kBF16) return runtime::bits_to_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
  return static_cast<const float*>(p)[i];
}

RECAP_HD inline void store(void* p, int dt, int64_t i, float v) {
  if (dt == kBF16)
    static_cast<uint16_t*>(p)[i] = runtime::float_bits_to_bf16_bits(runtime::float_to_bits(v));
  else
    static_cast<float*>(p)[i] = v;
}

RECAP_HD inline bool mask_kept(const uint32_t* words, int64_t i) { return ((words[i >> 5] >> (i & 31)) & 1u) != 0u; }

// ---- GEMM ------------------------------------------------------------------------------------
// Row-major, strided-batched: C[b](m,n) = alpha * sum_k A'(m,k) B'(k,n) + beta * C[b](m,n)
// (+ bias[n]), with A'(m,k) = trans_a ? A[k*lda + m] : A[m*lda + k] and likewise B'. bias only
// with beta == 0. A, B, C, bias share one dtype.
struct GemmArgs {
  int dtype = kF32;
  int trans_a = 0, trans_b = 0;
  int64_t batch = 1, M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  const void* bias = nullptr;
};

RECAP_HD inline void gemm_element(const GemmArgs& g, int64_t idx) {
  const int64_t n = idx % g.N;
  const int64_t m = (idx / g.N) % g.M;
  const int64_t b = idx / (g.N * g.M);
  const int64_t a0 = b * g.stride_a, b0 = b * g.stride_b;
  float acc = 0.0f;
  for (int64_t k = 0; k < g.K; ++k) {
    float a = load(g.A, g.dtype, a0 + (g.trans_a ? k * g.lda + m : m * g.lda + k));
    float w = load(g.B, g.dtype, b0 + (g.trans_b ? n * g.ldb + k : k * g.ldb + n));
    acc += a * w;
  }
  const int64_t c = b * g.stride_c + m * g.ldc + n;
  float out = g.alpha * acc;
  if (g.beta != 0.0f) out += g.beta * load(g.C, g.dtype, c);
  if (g.bias != nullptr) out += load(g.bias, g.dtype, n);
  store(g.C, g.dtype, c, out);
}

// ---- column sums (bias gradients) ------------------------------------------------------------
// out[n] = beta * out[n] + sum_r in[r*cols + n], r in order.
struct ColSumArgs {
  int dtype = kF32;
  int64_t rows = 0, cols = 0;
  const void* in = nullptr;
  void* out = nullptr;
  float beta = 1.0f;
};

RECAP_HD inline void col_sum_element(const ColSumArgs& a, int64_t n) {
  float acc = 0.0f;
  for (int64_t r = 0; r < a.rows; ++r) acc += load(a.in, a.dtype, r * a.cols + n);
  float out = acc;
  if (a.beta != 0.0f) out += a.beta * load(a.out, a.dtype, n);
  store(a.out, a.dtype, n, out);
}

// ---- LayerNorm / RMSNorm -----------------------------------------------------------------------
// LayerNorm: y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps), var biased.
// RMSNorm (rms = 1): y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps); no mean, no beta.
// mean and rstd (fp32, one per row) are written when non-null (saved for backward).
struct NormArgs {
  int dtype = kF32;
  int rms = 0;
  int64_t rows = 0, cols = 0;
  float eps = 1e-5f;
  const void* x = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;  // LayerNorm only
  void* y = nullptr;
  float* mean = nullptr;       // LayerNorm only
  float* rstd = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* dgamma = nullptr;      // accumulated (+=)
  void* dbeta = nullptr;       // accumulated (+=); LayerNorm only
};

RECAP_HD inline void norm_forward_row(const NormArgs& a, int64_t r) {
  const int64_t base = r * a.cols;
  const float inv_cols = 1.0f / static_cast<float>(a.cols);
  float mu = 0.0f;
  if (!a.rms) {
    float s = 0.0f;
    for (int64_t c = 0; c < a.cols; ++c) s += load(a.x, a.dtype, base + c);
    mu = s * inv_cols;
  }
  float v = 0.0f;
  for (int64_t c = 0; c < a.cols; ++c) {
    float d = load(a.x, a.dtype, base + c) - mu;
    v += d * d;
  }
  const float rs = 1.0f / sqrtf(v * inv_cols + a.eps);
  for (int64_t c = 0; c < a.cols; ++c) {
    float xh = (load(a.x, a.dtype, base + c) - mu) * rs;
    float o = xh * load(a.gamma, a.dtype, c);
    if (!a.rms) o += load(a.beta, a.dtype, c);
    store(a.y, a.dtype, base + c, o);
  }
  if (a.mean != nullptr) a.mean[r] = mu;
  if (a.rstd != nullptr) a.rstd[r] = rs;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma (RMSNorm: no mean(g) term).
RECAP_HD inline void norm_backward_dx_row(const NormArgs& a, int64_t r) {
  const int64_t base = r * a.cols;
  const float inv_cols = 1.0f / static_cast<float>(a.cols);
  const float mu = a.rms ? 0.0f : a.mean[r];
  const float rs = a.rstd[r];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t c = 0; c < a.cols; ++c) {
    float xh = (load(a.x, a.dtype, base + c) - mu) * rs;
    float g = load(a.dy, a.dtype, base + c) * load(a.gamma, a.dtype, c);
    sum_g += g;
    sum_gx += g * xh;
  }
  const float mean_g = a.rms ? 0.0f : sum_g * inv_cols;
  const float mean_gx = sum_gx * inv_cols;
  for (int64_t c = 0; c < a.cols; ++c) {
    float xh = (load(a.x, a.dtype, base + c) - mu) * rs;
    float g = load(a.dy, a.dtype, base + c) * load(a.gamma, a.dtype, c);
    store(a.dx, a.dtype, base + c, rs * (g - mean_g - xh * mean_gx));
  }
}

// dgamma[c] += sum_r dy * xhat; dbeta[c] += sum_r dy.
RECAP_HD inline void norm_backward_params_col(const NormArgs& a, int64_t c) {
  float sg = 0.0f, sb = 0.0f;
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t i = r * a.cols + c;
    const float mu = a.rms ? 0.0f : a.mean[r];
    float xh = (load(a.x, a.dtype, i) - mu) * a.rstd[r];
    float d = load(a.dy, a.dtype, i);
    sg += d * xh;
    sb += d;
  }
  store(a.dgamma, a.dtype, c, load(a.dgamma, a.dtype, c) + sg);
  if (!a.rms) store(a.dbeta, a.dtype, c, load(a.dbeta, a.dtype, c) + sb);
}

// ---- elementwise -----------------------------------------------------------------------------
// GELU is the tanh approximation (GPT-2, PyTorch approximate="tanh"):
//   gelu(x) = 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi).
constexpr float kGeluC = 0.7978845608028654f;
constexpr float kGeluA = 0.044715f;

RECAP_HD inline float gelu(float x) { return 0.5f * x * (1.0f + tanhf(kGeluC * (x + kGeluA * x * x * x))); }
RECAP_HD inline float gelu_grad(float x) {
  float t = tanhf(kGeluC * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
}
RECAP_HD inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

enum class Ew : int {
  Fill,          // out = s
  Add,           // out = a + b
  AddInto,       // out = out + a
  Gelu,          // out = gelu(a)
  GeluBackward,  // out = gelu'(a) * b          (a = x, b = dy)
  DropoutApply,  // out = kept(mask, i) ? a * s : 0   (forward and backward alike)
  SiluGate,      // out = silu(a) * b            (a = gate, b = up)
  Sgd,           // out = out - s * a            (out = parameter, a = gradient)
  MseGrad,       // out = (a - b) * s            (a = y, b = target, s = 1/numel)
  Copy,          // out = a
};

struct EwArgs {
  Ew op = Ew::Fill;
  int dtype = kF32;
  int64_t n = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const uint32_t* mask = nullptr;
  void* out = nullptr;
  float s = 0.0f;
};

RECAP_HD inline void ew_element(const EwArgs& e, int64_t i) {
  const int dt = e.dtype;
  float r = 0.0f;
  switch (e.op) {
    case Ew::Fill: r = e.s; break;
    case Ew::Add: r = load(e.a, dt, i) + load(e.b, dt, i); break;
    case Ew::AddInto: r = load(e.out, dt, i) + load(e.a, dt, i); break;
    case Ew::Gelu: r = gelu(load(e.a, dt, i)); break;
    case Ew::GeluBackward: r = gelu_grad(load(e.a, dt, i)) * load(e.b, dt, i); break;
    case Ew::DropoutApply: r = mask_kept(e.mask, i) ? load(e.a, dt, i) * e.s : 0.0f; break;
    case Ew::SiluGate: {
      float g = load(e.a, dt, i);
      r = g * sigmoid(g) * load(e.b, dt, i);
      break;
    }
    case Ew::Sgd: r = load(e.out, dt, i) - e.s * load(e.a, dt, i); break;
    case Ew::MseGrad: r = (load(e.a, dt, i) - load(e.b, dt, i)) * e.s; break;
    case Ew::Copy: r = load(e.a, dt, i); break;
  }
  store(e.out, dt, i, r);
}

// SwiGLU gate backward: h = silu(g) * u  =>  dg = dh * u * s (1 + g (1 - s)), du = dh * g * s.
struct SiluGateBackwardArgs {
  int dtype = kF32;
  int64_t n = 0;
  const void* g = nullptr;
  const void* u = nullptr;
  const void* dh = nullptr;
  void* dg = nullptr;
  void* du = nullptr;
};

RECAP_HD inline void silu_gate_backward_element(const SiluGateBackwardArgs& a, int64_t i) {
  float g = load(a.g, a.dtype, i), u = load(a.u, a.dtype, i), dh = load(a.dh, a.dtype, i);
  float s = sigmoid(g);
  store(a.dg, a.dtype, i, dh * u * s * (1.0f + g * (1.0f - s)));
  store(a.du, a.dtype, i, dh * g * s);
}

// ---- dropout mask with its realized (seed, offset) ----------------------------------------------
// Word w of the packed mask (dropout.h) at philox_unpack(args), unpacked when the kernel RUNS (so a
// graph-safe launch replayed from a graph reads the refreshed device seed/offset). Word 0's thread
// also writes the realized (seed, offset) to record[0..1] when record is non-null: the RNG ledger's
// slot, and what a recompute must reproduce.
struct DropoutMaskArgs {
  uint32_t* words = nullptr;
  runtime::PhiloxArgs philox;
  uint64_t n = 0;
  float p = 0.0f;
  uint64_t* record = nullptr;
  // Fault point cuda-dropout-offset (ops::dropout_mask sets it): the CUDA body draws this many
  // values past its offset while recording the offset it was given; sim's body never does, so
  // only a comparison across backends (property differential) sees it. 0 otherwise.
  uint64_t gpu_offset_shift = 0;
};

RECAP_HD inline void dropout_mask_element(const DropoutMaskArgs& a, int64_t w) {
  runtime::PhiloxSeedOffset so = runtime::philox_unpack(a.philox);
#ifdef __CUDA_ARCH__
  const uint64_t drawn = so.offset + a.gpu_offset_shift;
#else
  const uint64_t drawn = so.offset;
#endif
  a.words[w] = runtime::dropout_mask_word(so.seed, drawn, a.n, a.p, static_cast<uint64_t>(w));
  if (w == 0 && a.record != nullptr) {
    a.record[0] = so.seed;
    a.record[1] = so.offset;
  }
}

// ---- causal multi-head self-attention core ---------------------------------------------------
// qkv [T, 3*hidden]: q in columns [0, hidden), k in [hidden, 2 hidden), v in [2 hidden, 3 hidden);
// head h owns columns h*dh .. h*dh+dh-1 of each. P [heads, T, T] = softmax over j <= i of
// scale * q_i . k_j (zero above the diagonal), stored in dtype; Pd = P * keep * keep_scale (the
// attention dropout; mask over heads*T*T elements, null when p = 0); out [T, hidden] = Pd V.
struct AttnArgs {
  int dtype = kF32;
  int64_t T = 0, hidden = 0, heads = 1, dh = 0;
  float scale = 1.0f;          // 1/sqrt(dh)
  const void* qkv = nullptr;
  void* P = nullptr;
  const uint32_t* mask = nullptr;
  float keep_scale = 1.0f;     // 1/(1-p)
  void* out = nullptr;
  const void* dout = nullptr;
  float* dS = nullptr;         // [heads, T, T] fp32: dPd, then dS (softmax input gradient)
  void* dqkv = nullptr;        // [T, 3*hidden]
};

RECAP_HD inline float attn_q(const AttnArgs& a, int64_t i, int64_t h, int64_t d) {
  return load(a.qkv, a.dtype, i * 3 * a.hidden + h * a.dh + d);
}
RECAP_HD inline float attn_k(const AttnArgs& a, int64_t j, int64_t h, int64_t d) {
  return load(a.qkv, a.dtype, j * 3 * a.hidden + a.hidden + h * a.dh + d);
}
RECAP_HD inline float attn_v(const AttnArgs& a, int64_t j, int64_t h, int64_t d) {
  return load(a.qkv, a.dtype, j * 3 * a.hidden + 2 * a.hidden + h * a.dh + d);
}
RECAP_HD inline float attn_score(const AttnArgs& a, int64_t h, int64_t i, int64_t j) {
  float acc = 0.0f;
  for (int64_t d = 0; d < a.dh; ++d) acc += attn_q(a, i, h, d) * attn_k(a, j, h, d);
  return acc * a.scale;
}
// The dropout factor of P element idx: keep_scale or 0, or 1 without dropout.
RECAP_HD inline float attn_drop(const AttnArgs& a, int64_t idx) {
  if (a.mask == nullptr) return 1.0f;
  return mask_kept(a.mask, idx) ? a.keep_scale : 0.0f;
}

// One row (h, i) of P: r = h*T + i.
RECAP_HD inline void attn_softmax_forward_row(const AttnArgs& a, int64_t r) {
  const int64_t h = r / a.T, i = r % a.T;
  float m = -INFINITY;
  for (int64_t j = 0; j <= i; ++j) m = fmaxf(m, attn_score(a, h, i, j));
  float sum = 0.0f;
  for (int64_t j = 0; j <= i; ++j) sum += expf(attn_score(a, h, i, j) - m);
  const int64_t base = r * a.T;
  for (int64_t j = 0; j < a.T; ++j)
    store(a.P, a.dtype, base + j, j <= i ? expf(attn_score(a, h, i, j) - m) / sum : 0.0f);
}

// out(i, c), c = h*dh + d: sum_{j <= i} Pd(h,i,j) v(j,h,d).
RECAP_HD inline void attn_pv_forward_element(const AttnArgs& a, int64_t idx) {
  const int64_t i = idx / a.hidden, c = idx % a.hidden;
  const int64_t h = c / a.dh, d = c % a.dh;
  const int64_t base = (h * a.T + i) * a.T;
  float acc = 0.0f;
  for (int64_t j = 0; j <= i; ++j) acc += load(a.P, a.dtype, base + j) * attn_drop(a, base + j) * attn_v(a, j, h, d);
  store(a.out, a.dtype, idx, acc);
}

// dS(h,i,j) := dP(h,i,j) = drop(h,i,j) * sum_d dout(i,h,d) v(j,h,d) for j <= i, else 0.
RECAP_HD inline void attn_dp_element(const AttnArgs& a, int64_t idx) {
  const int64_t j = idx % a.T, i = (idx / a.T) % a.T, h = idx / (a.T * a.T);
  float acc = 0.0f;
  if (j <= i) {
    for (int64_t d = 0; d < a.dh; ++d) acc += load(a.dout, a.dtype, i * a.hidden + h * a.dh + d) * attn_v(a, j, h, d);
    acc *= attn_drop(a, idx);
  }
  a.dS[idx] = acc;
}

// Row (h, i) in place: dS = P * (dP - sum_j P dP).
RECAP_HD inline void attn_softmax_backward_row(const AttnArgs& a, int64_t r) {
  const int64_t i = r % a.T, base = r * a.T;
  float dot = 0.0f;
  for (int64_t j = 0; j <= i; ++j) dot += load(a.P, a.dtype, base + j) * a.dS[base + j];
  for (int64_t j = 0; j <= i; ++j) a.dS[base + j] = load(a.P, a.dtype, base + j) * (a.dS[base + j] - dot);
}

// dqkv(t, c), c in [0, 3 hidden): dq, dk or dv by section.
RECAP_HD inline void attn_dqkv_element(const AttnArgs& a, int64_t idx) {
  const int64_t three = 3 * a.hidden;
  const int64_t t = idx / three, col = idx % three;
  const int64_t sec = col / a.hidden, cc = col % a.hidden;
  const int64_t h = cc / a.dh, d = cc % a.dh;
  const int64_t hb = h * a.T * a.T;
  float acc = 0.0f;
  if (sec == 0) {  // dq(t): sum_{j <= t} dS(h,t,j) k(j)
    for (int64_t j = 0; j <= t; ++j) acc += a.dS[hb + t * a.T + j] * attn_k(a, j, h, d);
    acc *= a.scale;
  } else if (sec == 1) {  // dk(t): sum_{i >= t} dS(h,i,t) q(i)
    for (int64_t i = t; i < a.T; ++i) acc += a.dS[hb + i * a.T + t] * attn_q(a, i, h, d);
    acc *= a.scale;
  } else {  // dv(t): sum_{i >= t} Pd(h,i,t) dout(i)
    for (int64_t i = t; i < a.T; ++i) {
      const int64_t pi = hb + i * a.T + t;
      acc += load(a.P, a.dtype, pi) * attn_drop(a, pi) * load(a.dout, a.dtype, i * a.hidden + cc);
    }
  }
  store(a.dqkv, a.dtype, idx, acc);
}

// ---- values drawn on the device --------------------------------------------------------------------
// out[i] = base + (2 u_i - 1) * bound, u_i = uniform_from_u32 of value i of the Philox draw at (seed,
// offset): a parameter's initial values (models::init_values) and a step's inputs and targets
// (training::step_data), drawn where they live instead of on the host and copied up. The product
// and the sum are rounded apart, as on the host (nvcc would contract them into one FMA), so the
// values are those of the host functions bit for bit on both backends.
struct FillUniformArgs {
  int dtype = kF32;
  int64_t n = 0;
  uint64_t seed = 0, offset = 0;
  float base = 0.0f, bound = 1.0f;
  void* out = nullptr;
};

RECAP_HD inline void fill_uniform_element(const FillUniformArgs& a, int64_t i) {
  const float u = 2.0f * runtime::uniform_from_u32(runtime::philox_value(a.seed, a.offset, static_cast<uint64_t>(i))) - 1.0f;
#ifdef __CUDA_ARCH__
  const float v = __fadd_rn(a.base, __fmul_rn(u, a.bound));
#else
  const float v = a.base + u * a.bound;
#endif
  store(a.out, a.dtype, i, v);
}

// ---- loss --------------------------------------------------------------------------------------
// loss[0] = 0.5 * sum_i (y_i - t_i)^2 / n, summed in order in double, stored as fp32.
struct MseArgs {
  int dtype = kF32;
  int64_t n = 0;
  const void* y = nullptr;
  const void* target = nullptr;
  float* loss = nullptr;
};

RECAP_HD inline void mse_loss_single(const MseArgs& a) {
  double acc = 0.0;
  for (int64_t i = 0; i < a.n; ++i) {
    double d = static_cast<double>(load(a.y, a.dtype, i)) - static_cast<double>(load(a.target, a.dtype, i));
    acc += d * d;
  }
  a.loss[0] = static_cast<float>(0.5 * acc / static_cast<double>(a.n));
}

}  // namespace recap::models::math
