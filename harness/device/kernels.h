// A small library of portable kernels (a host body for `sim`, a CUDA body for `cuda`) used by the
// conformance scenarios and the device tests. Buffers hold uint32 words, so results compare exactly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "harness/device/device.h"

namespace recap::device::kernels {

Kernel fill_u32(uint32_t* buf, size_t n, uint32_t value);           // buf[i] = value
Kernel iota_u32(uint32_t* buf, size_t n, uint32_t start);           // buf[i] = start + i
Kernel add_u32(uint32_t* dst, const uint32_t* src, size_t n);       // dst[i] += src[i]
Kernel increment_u32(uint32_t* buf, size_t n);                      // buf[i] += 1
Kernel copy_u32(uint32_t* dst, const uint32_t* src, size_t n);      // dst[i] = src[i]
Kernel scale_u32(uint32_t* buf, size_t n, uint32_t factor);         // buf[i] *= factor
// A long-running kernel: spins for about `cycles` GPU clock cycles, then buf[0] += 1. On real
// hardware it keeps its stream busy so that stream_query reports NotReady; on sim it is instant.
Kernel spin_u32(uint32_t* buf, uint64_t cycles);

}  // namespace recap::device::kernels
