#include "harness/runtime/rng_kernels.h"

#include "harness/runtime/dropout.h"
#ifdef RECAP_WITH_CUDA
#include "harness/runtime/runtime_gpu.h"
#endif

namespace recap::runtime {
namespace {

// What the kernel reads besides its own output: the seed/offset cells of a graph-safe launch.
std::vector<device::Access> state_reads(const PhiloxArgs& args) {
  if (!args.graph_safe) return {};
  return {device::Access{args.seed_ptr, sizeof(uint64_t)}, device::Access{args.offset_ptr, sizeof(uint64_t)}};
}

}  // namespace

device::Kernel dropout_mask_kernel(uint32_t* words, PhiloxArgs args, uint64_t n, float p) {
  device::Kernel k;
  k.name = "dropout_mask";
  k.reads = state_reads(args);
  k.writes = {device::Access{words, dropout_mask_words(n) * sizeof(uint32_t)}};
  k.host = [=] {
    PhiloxSeedOffset so = philox_unpack(args);
    dropout_mask_into(words, so.seed, so.offset, n, p);
  };
#ifdef RECAP_WITH_CUDA
  k.gpu = [=](void* stream) { return gpu::dropout_mask_bits(stream, words, args, n, p); };
#endif
  return k;
}

device::Kernel philox_draw_kernel(uint32_t* out, PhiloxArgs args, uint64_t n) {
  device::Kernel k;
  k.name = "philox_draw";
  k.reads = state_reads(args);
  k.writes = {device::Access{out, n * sizeof(uint32_t)}};
  k.host = [=] {
    PhiloxSeedOffset so = philox_unpack(args);
    PhiloxStream stream(so.seed, so.offset);
    for (uint64_t i = 0; i < n; ++i) out[i] = stream.next();
  };
#ifdef RECAP_WITH_CUDA
  k.gpu = [=](void* stream) { return gpu::philox_draw_u32(stream, out, args, n); };
#endif
  return k;
}

}  // namespace recap::runtime
