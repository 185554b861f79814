// CUDA bodies of the runtime's numeric kernels (runtime_gpu.h). Grid-stride loops; each element's
// result comes from the shared RECAP_HD functions, never from GPU-specific arithmetic.
#include <cuda_runtime.h>

#include "harness/runtime/bf16.h"
#include "harness/runtime/dropout.h"
#include "harness/runtime/philox.h"
#include "harness/runtime/runtime_gpu.h"

namespace recap::runtime::gpu {
namespace {

constexpr int kBlock = 256;

int blocks_for(uint64_t n) {
  uint64_t b = (n + kBlock - 1) / kBlock;
  if (b < 1) b = 1;
  if (b > 4096) b = 4096;
  return static_cast<int>(b);
}

__device__ uint64_t global_index() { return uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ uint64_t global_stride() { return uint64_t(gridDim.x) * blockDim.x; }

__global__ void k_philox_batch(const uint32_t* ctr, const uint32_t* key, uint32_t* out, size_t n) {
  for (uint64_t i = global_index(); i < n; i += global_stride()) {
    PhiloxCtr c{{ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3]}};
    PhiloxKey k{{key[2 * i], key[2 * i + 1]}};
    PhiloxCtr r = philox4x32_10(c, k);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = r.v[j];
  }
}

__global__ void k_philox_draw(uint32_t* out, PhiloxArgs args, size_t n) {
  PhiloxSeedOffset so = philox_unpack(args);
  for (uint64_t i = global_index(); i < n; i += global_stride()) out[i] = philox_value(so.seed, so.offset, i);
}

__global__ void k_dropout_mask(uint32_t* words, PhiloxArgs args, uint64_t n, float p) {
  PhiloxSeedOffset so = philox_unpack(args);
  uint64_t count = dropout_mask_words(n);
  for (uint64_t w = global_index(); w < count; w += global_stride())
    words[w] = dropout_mask_word(so.seed, so.offset, n, p, w);
}

__global__ void k_float_to_bf16(const float* in, uint16_t* out, size_t n) {
  for (uint64_t i = global_index(); i < n; i += global_stride()) out[i] = float_to_bf16(in[i]).bits;
}

template <typename... Args>
int launch(void (*kernel)(Args...), int blocks, void* stream, Args... args) {
  void* argv[] = {&args...};
  return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(kBlock), argv, 0,
                                           static_cast<cudaStream_t>(stream)));
}

}  // namespace

int philox4x32_10_batch(void* s, const uint32_t* ctr, const uint32_t* key, uint32_t* out, size_t n) {
  return launch(k_philox_batch, blocks_for(n), s, ctr, key, out, n);
}
int philox_draw_u32(void* s, uint32_t* out, PhiloxArgs args, size_t n) {
  return launch(k_philox_draw, blocks_for(n), s, out, args, n);
}
int dropout_mask_bits(void* s, uint32_t* words, PhiloxArgs args, uint64_t n, float p) {
  return launch(k_dropout_mask, blocks_for(dropout_mask_words(n)), s, words, args, n, p);
}
int float_to_bf16_bits(void* s, const float* in, uint16_t* out, size_t n) {
  return launch(k_float_to_bf16, blocks_for(n), s, in, out, n);
}

}  // namespace recap::runtime::gpu
