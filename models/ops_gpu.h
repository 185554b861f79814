// CUDA launchers of the model ops (ops.h); defined in ops.cu, absent when recap is built without
// CUDA. Each enqueues on `stream` (a cudaStream_t) and returns a cudaError_t as an int: the launch's
// result, or for cuBLAS calls the pending CUDA error when cuBLAS failed (cudaErrorUnknown when
// there is none). Pointers are device pointers. Every kernel evaluates the RECAP_HD functions of
// op_math.h, one thread per output element (or row), so results are deterministic run to run.
#pragma once

#include <cstddef>

#include "models/op_math.h"

namespace recap::models::gpu {

int gemm(void* stream, const math::GemmArgs& a);  // the simple kernel: one thread per output
int col_sum(void* stream, const math::ColSumArgs& a);
int norm_forward(void* stream, const math::NormArgs& a);
int norm_backward_dx(void* stream, const math::NormArgs& a);
int norm_backward_params(void* stream, const math::NormArgs& a);
int elementwise(void* stream, const math::EwArgs& a);
int silu_gate_backward(void* stream, const math::SiluGateBackwardArgs& a);
int dropout_mask(void* stream, const math::DropoutMaskArgs& a);
int attn_softmax_forward(void* stream, const math::AttnArgs& a);
int attn_pv_forward(void* stream, const math::AttnArgs& a);
int attn_dp(void* stream, const math::AttnArgs& a);
int attn_softmax_backward(void* stream, const math::AttnArgs& a);
int attn_dqkv(void* stream, const math::AttnArgs& a);
int mse_loss(void* stream, const math::MseArgs& a);
int fill_uniform(void* stream, const math::FillUniformArgs& a);

// ---- cuBLAS -----------------------------------------------------------------------------------
// Whether this build links cuBLAS (RECAP_MODELS_CUBLAS); when not, gemm_cublas runs the simple
// kernel.
bool cublas_available();
// Creates the calling thread's cuBLAS handle (once per thread; math mode CUBLAS_PEDANTIC_MATH).
// cublasCreate may allocate device memory, so this must run outside any capture: layers call it
// when they are built. Returns a cudaError_t as an int.
int blas_prepare();
// The GEMM through cuBLAS on the calling thread's handle: cublasSetStream(stream), then
// cublasSetWorkspace(workspace, bytes) (cublasSetStream resets the workspace to the default
// pool, so it is set again at every launch), then cublasGemmStridedBatchedEx with fp32 compute
// (CUBLAS_COMPUTE_32F_PEDANTIC for fp32, falling back to CUBLAS_COMPUTE_32F should cuBLAS refuse
// pedantic; CUBLAS_COMPUTE_32F for bf16) and CUBLAS_GEMM_DEFAULT. A bias is broadcast into C by a
// kernel first, then the GEMM runs with beta = 1. One workspace must not serve two streams at
// once (launches of one model on one stream at a time are fine).
int gemm_cublas(void* stream, const math::GemmArgs& a, void* workspace, size_t workspace_bytes);

}  // namespace recap::models::gpu
