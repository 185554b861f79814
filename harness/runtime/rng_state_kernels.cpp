#include "harness/runtime/rng_state_kernels.h"

#ifdef RECAP_WITH_CUDA
#include "harness/runtime/rng_state_gpu.h"
#endif

namespace recap::runtime {

device::Kernel write_rng_state_kernel(uint64_t* seed_dev, uint64_t* offset_dev, uint64_t seed, uint64_t offset) {
  device::Kernel k;
  k.name = "rng_replay_prologue";
  k.writes = {device::Access{seed_dev, sizeof(uint64_t)}, device::Access{offset_dev, sizeof(uint64_t)}};
  k.host = [=] {
    *seed_dev = seed;
    *offset_dev = offset;
  };
#ifdef RECAP_WITH_CUDA
  k.gpu = [=](void* stream) { return gpu::write_u64_pair(stream, seed_dev, offset_dev, seed, offset); };
#endif
  return k;
}

device::Kernel record_draw_kernel(uint64_t* record, PhiloxArgs args) {
  device::Kernel k;
  k.name = "rng_ledger_record";
  if (args.graph_safe)
    k.reads = {device::Access{args.seed_ptr, sizeof(uint64_t)}, device::Access{args.offset_ptr, sizeof(uint64_t)}};
  k.writes = {device::Access{record, 2 * sizeof(uint64_t)}};
  k.host = [=] {
    PhiloxSeedOffset so = philox_unpack(args);
    record[0] = so.seed;
    record[1] = so.offset;
  };
#ifdef RECAP_WITH_CUDA
  k.gpu = [=](void* stream) { return gpu::record_philox(stream, record, args); };
#endif
  return k;
}

}  // namespace recap::runtime
