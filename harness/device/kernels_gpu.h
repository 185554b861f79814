// CUDA launchers behind kernels.h; defined in kernels.cu, absent when built without CUDA.
// Each enqueues on `stream` (a cudaStream_t) and returns cudaLaunchKernel's result.
#pragma once

#include <cstddef>
#include <cstdint>

namespace recap::device::kernels::gpu {

int fill_u32(void* stream, uint32_t* buf, size_t n, uint32_t value);
int iota_u32(void* stream, uint32_t* buf, size_t n, uint32_t start);
int add_u32(void* stream, uint32_t* dst, const uint32_t* src, size_t n);
int increment_u32(void* stream, uint32_t* buf, size_t n);
int copy_u32(void* stream, uint32_t* dst, const uint32_t* src, size_t n);
int scale_u32(void* stream, uint32_t* buf, size_t n, uint32_t factor);
int spin_u32(void* stream, uint32_t* buf, uint64_t cycles);

}  // namespace recap::device::kernels::gpu
