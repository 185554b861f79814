// CUDA bodies of rng_state_kernels.h (one thread each: they move two words).
#include <cuda_runtime.h>

#include "harness/runtime/philox.h"
#include "harness/runtime/rng_state_gpu.h"

namespace recap::runtime::gpu {
namespace {

__global__ void k_write_u64_pair(uint64_t* a, uint64_t* b, uint64_t va, uint64_t vb) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *a = va;
    *b = vb;
  }
}

__global__ void k_record_philox(uint64_t* record, PhiloxArgs args) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    PhiloxSeedOffset so = philox_unpack(args);
    record[0] = so.seed;
    record[1] = so.offset;
  }
}

template <typename... Args>
int launch1(void (*kernel)(Args...), void* stream, Args... args) {
  void* argv[] = {&args...};
  return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(1), dim3(1), argv, 0,
                                           static_cast<cudaStream_t>(stream)));
}

}  // namespace

int write_u64_pair(void* stream, uint64_t* a, uint64_t* b, uint64_t va, uint64_t vb) {
  return launch1(k_write_u64_pair, stream, a, b, va, vb);
}

int record_philox(void* stream, uint64_t* record, PhiloxArgs args) {
  return launch1(k_record_philox, stream, record, args);
}

}  // namespace recap::runtime::gpu
