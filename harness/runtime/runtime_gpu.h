// CUDA launchers for the runtime's numeric kernels; defined in runtime_gpu.cu, absent when recap
// is built without CUDA. Each enqueues on `stream` (a cudaStream_t; nullptr is the legacy default
// stream) and returns the launch's cudaError_t as an int, so that the device layer can wrap it in
// a Kernel. Pointers are device pointers. Every kernel body calls the same RECAP_HD functions as
// the host code, so its results equal the host's bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "harness/runtime/philox.h"

namespace recap::runtime::gpu {

// out[4i..4i+3] = philox4x32_10(ctr[4i..4i+3], key[2i..2i+1]) for i < n.
int philox4x32_10_batch(void* stream, const uint32_t* ctr, const uint32_t* key, uint32_t* out, size_t n);

// out[i] = value i of the draw of n values at philox_unpack(args), for i < n.
int philox_draw_u32(void* stream, uint32_t* out, PhiloxArgs args, size_t n);

// The packed dropout mask (dropout.h) of n elements at philox_unpack(args): writes
// dropout_mask_words(n) words. p in [0, 1].
int dropout_mask_bits(void* stream, uint32_t* words, PhiloxArgs args, uint64_t n, float p);

// out[i] = float_to_bf16(in[i]).bits for i < n.
int float_to_bf16_bits(void* stream, const float* in, uint16_t* out, size_t n);

}  // namespace recap::runtime::gpu
