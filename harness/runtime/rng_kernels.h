// The runtime's RNG kernels as device-layer Kernels: one description, a host body for `sim` and
// the CUDA launcher (runtime_gpu.h) for `cuda`. Both bodies unpack PhiloxArgs when the kernel
// runs, so a graph-safe launch captured into a graph reads the seed/offset buffers at each replay.
#pragma once

#include <cstdint>

#include "harness/device/device.h"
#include "harness/runtime/philox.h"

namespace recap::runtime {

// words[0 .. dropout_mask_words(n)) = the packed dropout mask of n elements (dropout.h).
device::Kernel dropout_mask_kernel(uint32_t* words, PhiloxArgs args, uint64_t n, float p);

// out[i] = value i of the draw of n values (philox.h).
device::Kernel philox_draw_kernel(uint32_t* out, PhiloxArgs args, uint64_t n);

}  // namespace recap::runtime
