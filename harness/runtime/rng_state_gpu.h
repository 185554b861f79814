// CUDA launchers for rng_state_kernels.h; defined in rng_state_gpu.cu, absent without CUDA. Each
// enqueues one single-thread kernel on `stream` (a cudaStream_t) and returns cudaLaunchKernel's
// cudaError_t as an int.
#pragma once

#include <cstdint>

#include "harness/runtime/philox.h"

namespace recap::runtime::gpu {

int write_u64_pair(void* stream, uint64_t* a, uint64_t* b, uint64_t va, uint64_t vb);
int record_philox(void* stream, uint64_t* record, PhiloxArgs args);

}  // namespace recap::runtime::gpu
