// bfloat16 storage and conversions, bit-identical on host and GPU (RECAP_HD).
//
// bf16 is the top 16 bits of an IEEE binary32: sign, 8 exponent bits, 7 mantissa bits.
// - bf16 -> float is exact (the 16 bits move to the top of the float).
// - float -> bf16 rounds to nearest, ties to even (RNE) on the bit pattern: add 0x7fff plus the
//   lowest kept bit, then drop the low 16 bits. That one integer rule gives IEEE RNE for normal
//   and subnormal values alike (a carry out of the mantissa correctly bumps the exponent),
//   rounds +-inf to +-inf, and rounds finite values at or beyond bf16 max + half an ulp
//   (0x7f7f8000, a tie whose even neighbour is 0x7f80) to +-inf, as RNE with overflow dictates.
// - NaN stays NaN: sign and the top 7 payload bits are kept and the quiet bit (0x0040) is set,
//   so a signalling NaN whose payload sits in the low 16 bits cannot truncate to inf.
// Nothing depends on the floating-point environment: no flush-to-zero, no rounding mode.
// This matches CUDA's __float2bfloat16_rn on every non-NaN input (CUDA returns a canonical NaN
// 0x7fff for every NaN; recap keeps the sign and payload instead; the GPU test checks the rest).
#pragma once

#include <cstdint>
#include <cstring>

#include "harness/runtime/hd.h"

namespace recap::runtime {

struct bf16 {
  uint16_t bits = 0;

  RECAP_HD static constexpr bf16 from_bits(uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  RECAP_HD friend constexpr bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }  // bits, not value
  RECAP_HD friend constexpr bool operator!=(bf16 a, bf16 b) { return a.bits != b.bits; }
};

RECAP_HD inline uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

RECAP_HD inline float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Round-to-nearest-even on the bit pattern (see the file comment).
RECAP_HD inline uint16_t float_bits_to_bf16_bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  uint32_t lowest_kept = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lowest_kept) >> 16);
}

RECAP_HD inline bf16 float_to_bf16(float f) { return bf16::from_bits(float_bits_to_bf16_bits(float_to_bits(f))); }

RECAP_HD inline float bf16_to_float(bf16 h) { return bits_to_float(static_cast<uint32_t>(h.bits) << 16); }

// float -> bf16 -> float: f rounded to the nearest bf16 value.
RECAP_HD inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

RECAP_HD inline bool bf16_is_nan(bf16 h) { return (h.bits & 0x7fffu) > 0x7f80u; }

}  // namespace recap::runtime
