// The model ops as device-layer Kernels: a host body for `sim` (a loop over op_math.h's element
// functions) and a CUDA body for `cuda` (ops_gpu.h). Each builder takes raw device pointers and
// declares what the kernel reads and writes; pointers are captured by value, so a graph captured
// from these kernels replays with the addresses it saw at capture.
//
// Every op is deterministic (see op_math.h): the same inputs give the same bits on every run of
// one backend, eagerly or from a graph.
#pragma once

#include <cstddef>

#include "harness/device/device.h"
#include "harness/runtime/tensor.h"
#include "models/op_math.h"

namespace recap::models::ops {

// The op_math.h dtype code (kF32, kBF16) of a tensor's dtype.
inline int dtype_code(runtime::DType d) { return d == runtime::DType::BF16 ? math::kBF16 : math::kF32; }

// How a GEMM runs on the cuda backend. Linear layers use Cublas; the simple kernel (one thread per
// output, sequential K loop) is the fallback and what builds without cuBLAS use.
enum class GemmImpl { Simple, Cublas };

// A cuBLAS workspace (device memory, MemCategory::Workspace), set on the handle at every launch.
struct BlasWorkspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

device::Kernel gemm(const math::GemmArgs& a, GemmImpl impl = GemmImpl::Simple, BlasWorkspace ws = {});
device::Kernel col_sum(const math::ColSumArgs& a);
device::Kernel norm_forward(const math::NormArgs& a);
device::Kernel norm_backward_dx(const math::NormArgs& a);
device::Kernel norm_backward_params(const math::NormArgs& a);
device::Kernel elementwise(const math::EwArgs& a);
device::Kernel silu_gate_backward(const math::SiluGateBackwardArgs& a);
// The packed dropout mask at philox_unpack(a.philox), read when the kernel runs; writes the
// realized (seed, offset) to a.record when non-null.
device::Kernel dropout_mask(const math::DropoutMaskArgs& a);
// a.n values base + (2u - 1) * bound of the Philox draw at (a.seed, a.offset) into a.out.
device::Kernel fill_uniform(const math::FillUniformArgs& a);
device::Kernel attn_softmax_forward(const math::AttnArgs& a);
device::Kernel attn_pv_forward(const math::AttnArgs& a);
device::Kernel attn_dp(const math::AttnArgs& a);
device::Kernel attn_softmax_backward(const math::AttnArgs& a);
device::Kernel attn_dqkv(const math::AttnArgs& a);
device::Kernel mse_loss(const math::MseArgs& a);

// Prepares the calling thread's cuBLAS handle (cuda builds with cuBLAS; a no-op otherwise).
// Must run outside capture. Returns a device status code as an int (0 = success).
int blas_prepare();
// Whether GemmImpl::Cublas is cuBLAS (a cuda build with cuBLAS), not the simple kernel standing in.
bool blas_available();

}  // namespace recap::models::ops
