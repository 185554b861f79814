// Philox4x32-10, the counter-based generator PyTorch's CUDA generator and cuRAND use (Salmon et
// al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; reference code: Random123). Every
// function is RECAP_HD, so host code and kernels share one implementation and agree bit for bit.
//
// ## Draw layout (the contract every recap kernel and host model follows)
//
// A draw of n 32-bit values at Philox state (seed, offset) is:
//   key      = (seed & 0xffffffff, seed >> 32)                       (key words 0, 1)
//   value i  = word (g % 4) of philox4x32_10(counter(g / 4), key),   g = offset + i (64-bit)
//   counter(b) = (b & 0xffffffff, b >> 32, 0, 0)                      (counter words 0..3)
// so `offset` counts 32-bit values from the start of the seed's stream. The generator then
// advances the offset by philox_increment(n) = n rounded up to a multiple of 4, as PyTorch does
// (philox_cuda_state), so offsets it hands out are multiples of 4 and a draw starts on a fresh
// counter block: value i comes from block offset/4 + i/4, lane i%4, and no two draws share a block.
//
// Why this layout: it is exactly cuRAND's Philox stream for subsequence 0. curand_init(seed,
// /*subsequence=*/0, offset, &state) followed by n calls of curand(&state) yields values 0..n-1
// of the draw above, for any offset (aligned or not); the GPU test checks that. PyTorch's own
// dropout kernel additionally gives each CUDA thread its own subsequence (counter words 2..3 =
// thread index), which ties the values to the launch configuration; recap deliberately does not,
// so that a value depends on (seed, offset, i) alone and a host loop reproduces any kernel.
//
// Uniform floats: uniform_from_u32(x) = (x >> 8) * 2^-24, the 2^24 evenly spaced floats
// k * 2^-24, k = 0 .. 2^24-1, in [0, 1): 0 is possible, 1 is not. Every step is exact in float.
#pragma once

#include <cstdint>

#include "harness/runtime/hd.h"

namespace recap::runtime {

// Random123's constants for 4x32 Philox: the round multipliers and the Weyl key increments
// (golden ratio and sqrt(3)-1).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

struct PhiloxCtr {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t v[2];
};

// Returns the low 32 bits of a * b and stores the high 32 bits in *hi.
RECAP_HD inline uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// One Philox round: two 32x32->64 products, the high halves mixed with the other words and the key.
RECAP_HD inline PhiloxCtr philox_round(PhiloxCtr c, PhiloxKey k) {
  uint32_t hi0 = 0, hi1 = 0;
  uint32_t lo0 = philox_mulhilo(kPhiloxM0, c.v[0], &hi0);
  uint32_t lo1 = philox_mulhilo(kPhiloxM1, c.v[2], &hi1);
  return PhiloxCtr{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}

// Key schedule: round r (0-based) uses key + r * (W0, W1), each word mod 2^32.
RECAP_HD inline PhiloxKey philox_bump_key(PhiloxKey k) {
  return PhiloxKey{{k.v[0] + kPhiloxW0, k.v[1] + kPhiloxW1}};
}

// Philox4x32 with R rounds (Random123 publishes vectors for R = 7 and 10).
template <int R>
RECAP_HD inline PhiloxCtr philox4x32(PhiloxCtr c, PhiloxKey k) {
  static_assert(R >= 1 && R <= 16, "Philox4x32 is defined for 1..16 rounds");
  c = philox_round(c, k);
  for (int r = 1; r < R; ++r) {
    k = philox_bump_key(k);
    c = philox_round(c, k);
  }
  return c;
}

RECAP_HD inline PhiloxCtr philox4x32_10(PhiloxCtr c, PhiloxKey k) { return philox4x32<10>(c, k); }

// ---- the draw layout ------------------------------------------------------------------------

RECAP_HD inline PhiloxKey philox_key(uint64_t seed) {
  return PhiloxKey{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
}

// Counter block b: its 64-bit index in words 0..1 (the part curand's skipahead advances);
// words 2..3 (curand's subsequence) stay zero.
RECAP_HD inline PhiloxCtr philox_counter(uint64_t block) {
  return PhiloxCtr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
}

// How far a draw of n values advances the offset: n rounded up to a multiple of 4, so that the
// next draw starts on an unused counter block (PyTorch rounds the same way).
RECAP_HD inline uint64_t philox_increment(uint64_t n) { return (n + 3u) / 4u * 4u; }

// Value i of the draw at (seed, offset). Costs one Philox call; loops use PhiloxStream.
RECAP_HD inline uint32_t philox_value(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t g = offset + i;
  return philox4x32_10(philox_counter(g >> 2), philox_key(seed)).v[g & 3u];
}

// Reads the values of a draw in order, one Philox call per counter block (what curand's state does).
struct PhiloxStream {
  PhiloxKey key;
  uint64_t next_index;                   // g = offset + i of the next value
  uint64_t cached_block = ~uint64_t{0};  // no block index reaches this (they are < 2^62)
  PhiloxCtr cached{};

  // Positioned at value `first` of the draw at (seed, offset).
  RECAP_HD PhiloxStream(uint64_t seed, uint64_t offset, uint64_t first = 0)
      : key(philox_key(seed)), next_index(offset + first) {}

  RECAP_HD uint32_t next() {
    uint64_t block = next_index >> 2;
    if (block != cached_block) {
      cached = philox4x32_10(philox_counter(block), key);
      cached_block = block;
    }
    return cached.v[next_index++ & 3u];
  }
};

// The uniform float of a 32-bit value: (x >> 8) * 2^-24, in [0, 1 - 2^-24]. The top 24 bits
// are used because a float holds 24 significant bits, so the conversion and product are exact.
RECAP_HD inline float uniform_from_u32(uint32_t x) { return static_cast<float>(x >> 8) * 0x1p-24f; }

// ---- how a kernel receives its state ---------------------------------------------------------

// Mirrors PyTorch's PhiloxCudaState. Eager ("host" generator mode): seed and offset by value.
// Graph-safe (captured kernels): pointers to the seed and base offset in device memory, which each
// replay's prologue refreshes, plus the offset within the graph fixed at capture time; the
// kernel's offset is *offset_ptr + offset (the intragraph part). On sim the pointers are the sim
// device's buffers, read when the kernel body runs, so replays see refreshed values there too.
struct PhiloxArgs {
  uint64_t seed = 0;                    // by value only
  uint64_t offset = 0;                  // by value: the offset; graph-safe: the intragraph offset
  const uint64_t* seed_ptr = nullptr;   // graph-safe only
  const uint64_t* offset_ptr = nullptr; // graph-safe only
  bool graph_safe = false;

  RECAP_HD static PhiloxArgs by_value(uint64_t seed, uint64_t offset) {
    PhiloxArgs a;
    a.seed = seed;
    a.offset = offset;
    return a;
  }
  RECAP_HD static PhiloxArgs from_device(const uint64_t* seed_ptr, const uint64_t* offset_ptr,
                                         uint64_t offset_intragraph) {
    PhiloxArgs a;
    a.seed_ptr = seed_ptr;
    a.offset_ptr = offset_ptr;
    a.offset = offset_intragraph;
    a.graph_safe = true;
    return a;
  }
};

struct PhiloxSeedOffset {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The realized (seed, offset) a kernel draws with (PyTorch's at::cuda::philox::unpack). Graph-safe
// pointers must be readable where this runs: device memory inside a kernel, host memory on sim.
RECAP_HD inline PhiloxSeedOffset philox_unpack(const PhiloxArgs& a) {
  if (a.graph_safe) return PhiloxSeedOffset{*a.seed_ptr, *a.offset_ptr + a.offset};
  return PhiloxSeedOffset{a.seed, a.offset};
}

}  // namespace recap::runtime
