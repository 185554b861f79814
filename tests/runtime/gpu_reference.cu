#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include "harness/runtime/bf16.h"
#include "tests/runtime/gpu_reference.h"

namespace recap::runtime::testing {
namespace {

__global__ void k_curand_per_index(uint32_t* out, size_t n, unsigned long long seed, unsigned long long offset) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    curandStatePhilox4_32_10_t state;
    curand_init(seed, 0ull, offset + i, &state);
    out[i] = curand(&state);
  }
}

__global__ void k_curand_sequential(uint32_t* out, size_t n, unsigned long long seed, unsigned long long offset) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  curandStatePhilox4_32_10_t state;
  curand_init(seed, 0ull, offset, &state);
  for (size_t j = 0; j < n; ++j) out[j] = curand(&state);
}

__global__ void k_bf16_vs_cuda(unsigned long long* mismatches, uint32_t* first_mismatch, unsigned long long* checked) {
  unsigned long long local = 0, seen = 0;
  const unsigned long long total = 1ull << 32;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    uint32_t u = static_cast<uint32_t>(i);
    ++seen;
    uint16_t ours = float_bits_to_bf16_bits(u);
    uint16_t theirs = __bfloat16_as_ushort(__float2bfloat16_rn(__uint_as_float(u)));
    bool input_nan = (u & 0x7fffffffu) > 0x7f800000u;
    bool same = input_nan ? ((ours & 0x7fffu) > 0x7f80u && (theirs & 0x7fffu) > 0x7f80u) : ours == theirs;
    if (!same) {
      ++local;
      atomicMin(first_mismatch, u);
    }
  }
  if (local) atomicAdd(mismatches, local);
  atomicAdd(checked, seen);
}

}  // namespace

int curand_philox_values(void* stream, uint32_t* per_index, size_t n, uint32_t* sequential, size_t n_sequential,
                         uint64_t seed, uint64_t offset) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  k_curand_per_index<<<1024, 256, 0, s>>>(per_index, n, seed, offset);
  k_curand_sequential<<<1, 1, 0, s>>>(sequential, n_sequential, seed, offset);
  return static_cast<int>(cudaGetLastError());
}

int bf16_vs_cuda_all_floats(void* stream, unsigned long long* mismatches, uint32_t* first_mismatch,
                            unsigned long long* checked) {
  k_bf16_vs_cuda<<<132 * 16, 256, 0, static_cast<cudaStream_t>(stream)>>>(mismatches, first_mismatch, checked);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace recap::runtime::testing
