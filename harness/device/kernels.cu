// CUDA bodies of the portable kernels (kernels.h). Simple grid-stride loops: these kernels exist
// to exercise stream and graph rules, not to be fast.
#include <cuda_runtime.h>

#include "harness/device/kernels_gpu.h"

namespace recap::device::kernels::gpu {
namespace {

constexpr int kBlock = 256;

int blocks_for(size_t n) {
  size_t b = (n + kBlock - 1) / kBlock;
  if (b < 1) b = 1;
  if (b > 1024) b = 1024;
  return static_cast<int>(b);
}

__global__ void k_fill(uint32_t* buf, size_t n, uint32_t value) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) buf[i] = value;
}
__global__ void k_iota(uint32_t* buf, size_t n, uint32_t start) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    buf[i] = start + static_cast<uint32_t>(i);
}
__global__ void k_add(uint32_t* dst, const uint32_t* src, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) dst[i] += src[i];
}
__global__ void k_increment(uint32_t* buf, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) buf[i] += 1;
}
__global__ void k_copy(uint32_t* dst, const uint32_t* src, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) dst[i] = src[i];
}
__global__ void k_scale(uint32_t* buf, size_t n, uint32_t factor) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) buf[i] *= factor;
}
__global__ void k_spin(uint32_t* buf, unsigned long long cycles) {
  unsigned long long start = clock64();
  while (static_cast<unsigned long long>(clock64()) - start < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) buf[0] += 1;
}

template <typename... Args>
int launch(void (*kernel)(Args...), int blocks, int threads, void* stream, Args... args) {
  void* argv[] = {&args...};
  return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(threads), argv, 0,
                                           static_cast<cudaStream_t>(stream)));
}

}  // namespace

int fill_u32(void* s, uint32_t* buf, size_t n, uint32_t value) { return launch(k_fill, blocks_for(n), kBlock, s, buf, n, value); }
int iota_u32(void* s, uint32_t* buf, size_t n, uint32_t start) { return launch(k_iota, blocks_for(n), kBlock, s, buf, n, start); }
int add_u32(void* s, uint32_t* dst, const uint32_t* src, size_t n) { return launch(k_add, blocks_for(n), kBlock, s, dst, src, n); }
int increment_u32(void* s, uint32_t* buf, size_t n) { return launch(k_increment, blocks_for(n), kBlock, s, buf, n); }
int copy_u32(void* s, uint32_t* dst, const uint32_t* src, size_t n) { return launch(k_copy, blocks_for(n), kBlock, s, dst, src, n); }
int scale_u32(void* s, uint32_t* buf, size_t n, uint32_t factor) { return launch(k_scale, blocks_for(n), kBlock, s, buf, n, factor); }
int spin_u32(void* s, uint32_t* buf, uint64_t cycles) {
  return launch(k_spin, 1, 1, s, buf, static_cast<unsigned long long>(cycles));
}

}  // namespace recap::device::kernels::gpu
