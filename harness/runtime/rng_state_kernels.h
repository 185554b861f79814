// Small runtime kernels around the RNG state, as device-layer Kernels (a host body for `sim`, a
// CUDA body for `cuda`; see rng_kernels.h for the pattern):
//  - the replay prologue's write of a generator's (seed, offset) into its device pair, so that it
//    is ordered on the replay stream before the graph that reads the pair;
//  - the ledger record: the realized (seed, offset) of a draw, unpacked when the kernel runs
//    (inside a replay: from the device pair as the prologue left it), written to a ledger slot.
#pragma once

#include <cstdint>

#include "harness/device/device.h"
#include "harness/runtime/philox.h"

namespace recap::runtime {

// *seed_dev = seed; *offset_dev = offset (values passed by value, device pointers).
device::Kernel write_rng_state_kernel(uint64_t* seed_dev, uint64_t* offset_dev, uint64_t seed, uint64_t offset);

// record[0], record[1] = philox_unpack(args).seed, .offset. Launched on the stream of the draw's
// own kernel (right before or after it) it records exactly what that kernel used.
device::Kernel record_draw_kernel(uint64_t* record, PhiloxArgs args);

}  // namespace recap::runtime
