// Test-only GPU references that recap's own code must agree with: cuRAND's Philox stream and
// CUDA's bf16 conversion intrinsic. Defined in gpu_reference.cu (built only with CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

namespace recap::runtime::testing {

// cuRAND's curandStatePhilox4_32_10_t:
//   per_index[i]  = the first curand() after curand_init(seed, 0, offset + i), i < n;
//   sequential[j] = the j-th curand() after one curand_init(seed, 0, offset), j < n_sequential.
// Returns the launch's cudaError_t.
int curand_philox_values(void* stream, uint32_t* per_index, size_t n, uint32_t* sequential, size_t n_sequential,
                         uint64_t seed, uint64_t offset);

// Converts all 2^32 float bit patterns with recap's float_to_bf16 and with CUDA's
// __float2bfloat16_rn. Adds to *mismatches the number of inputs where they differ (for NaN
// inputs: where either result is not a NaN) and lowers *first_mismatch (device memory, start it
// at 0xffffffff) to the smallest such input; adds to *checked the number of inputs compared
// (2^32 when the kernel ran to the end). Returns the launch's cudaError_t.
int bf16_vs_cuda_all_floats(void* stream, unsigned long long* mismatches, uint32_t* first_mismatch,
                            unsigned long long* checked);

}  // namespace recap::runtime::testing
