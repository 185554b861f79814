#include "harness/device/kernels.h"

#include "harness/device/kernels_gpu.h"

namespace recap::device::kernels {
namespace {

Access span(const uint32_t* p, size_t n) { return Access{p, n * sizeof(uint32_t)}; }

}  // namespace

#ifdef RECAP_WITH_CUDA
#define RECAP_GPU(call) [=](void* st) { return gpu::call; }
#else
#define RECAP_GPU(call) nullptr
#endif

Kernel fill_u32(uint32_t* buf, size_t n, uint32_t value) {
  return Kernel{"fill_u32", {}, {span(buf, n)},
                [=] { for (size_t i = 0; i < n; ++i) buf[i] = value; },
                RECAP_GPU(fill_u32(st, buf, n, value))};
}

Kernel iota_u32(uint32_t* buf, size_t n, uint32_t start) {
  return Kernel{"iota_u32", {}, {span(buf, n)},
                [=] { for (size_t i = 0; i < n; ++i) buf[i] = start + static_cast<uint32_t>(i); },
                RECAP_GPU(iota_u32(st, buf, n, start))};
}

Kernel add_u32(uint32_t* dst, const uint32_t* src, size_t n) {
  return Kernel{"add_u32", {span(src, n), span(dst, n)}, {span(dst, n)},
                [=] { for (size_t i = 0; i < n; ++i) dst[i] += src[i]; },
                RECAP_GPU(add_u32(st, dst, src, n))};
}

Kernel increment_u32(uint32_t* buf, size_t n) {
  return Kernel{"increment_u32", {span(buf, n)}, {span(buf, n)},
                [=] { for (size_t i = 0; i < n; ++i) buf[i] += 1; },
                RECAP_GPU(increment_u32(st, buf, n))};
}

Kernel copy_u32(uint32_t* dst, const uint32_t* src, size_t n) {
  return Kernel{"copy_u32", {span(src, n)}, {span(dst, n)},
                [=] { for (size_t i = 0; i < n; ++i) dst[i] = src[i]; },
                RECAP_GPU(copy_u32(st, dst, src, n))};
}

Kernel scale_u32(uint32_t* buf, size_t n, uint32_t factor) {
  return Kernel{"scale_u32", {span(buf, n)}, {span(buf, n)},
                [=] { for (size_t i = 0; i < n; ++i) buf[i] *= factor; },
                RECAP_GPU(scale_u32(st, buf, n, factor))};
}

Kernel spin_u32(uint32_t* buf, uint64_t cycles) {
  (void)cycles;
  return Kernel{"spin_u32", {span(buf, 1)}, {span(buf, 1)},
                [=] { buf[0] += 1; },
                RECAP_GPU(spin_u32(st, buf, cycles))};
}

}  // namespace recap::device::kernels
