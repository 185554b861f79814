// bf16 (bf16.h) against references computed another way: decoding by ldexp, and rounding by
// scaling to an integer in double and calling nearbyint (the FPU's round-half-even), rather
// than the implementation's integer trick on the bit pattern.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>

#include "harness/runtime/bf16.h"

namespace recap::runtime {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The value of a non-NaN bf16 pattern, decoded field by field.
double decode_reference(uint16_t b) {
  int sign = b >> 15, exponent = (b >> 7) & 0xff, mantissa = b & 0x7f;
  double magnitude;
  if (exponent == 0xff) magnitude = INFINITY;
  else if (exponent == 0) magnitude = std::ldexp(mantissa, -133);  // subnormal: m * 2^-126 * 2^-7
  else magnitude = std::ldexp(128 + mantissa, exponent - 134);     // (1 + m/128) * 2^(e-127)
  return sign ? -magnitude : magnitude;
}

// RNE of a non-NaN float to bf16 in double arithmetic: scale so that bf16's quantum (ulp) at
// f's binade is 1, round to an integer with nearbyint (ties to even in the default rounding
// mode), scale back. bf16 subnormals share the quantum 2^-133 of the lowest normal binade.
// With an unbounded exponent the next value past bf16 max is 2^128, so a result of magnitude
// 2^128 or more is an overflow to inf, as IEEE defines it.
uint16_t rne_reference(float f) {
  if (std::isinf(f)) return std::signbit(f) ? 0xff80 : 0x7f80;
  double x = f;
  if (x == 0.0) return std::signbit(f) ? 0x8000 : 0x0000;
  int e = std::ilogb(x);
  if (e < -126) e = -126;
  double quantum = std::ldexp(1.0, e - 7);
  double r = std::nearbyint(x / quantum) * quantum;  // both steps exact but the rounding
  if (std::fabs(r) >= 0x1p128) return std::signbit(f) ? 0xff80 : 0x7f80;
  uint32_t u = to_bits(static_cast<float>(r));  // r has at most 8 significant bits: exact
  EXPECT_EQ(u & 0xffffu, 0u) << "reference produced a non-bf16 value for " << f;
  return static_cast<uint16_t>(u >> 16);
}

bool is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

TEST(Bf16, ReferenceRunsInRoundToNearest) { ASSERT_EQ(std::fegetround(), FE_TONEAREST); }

TEST(Bf16, AllPatternsDecodeExactlyAndRoundTrip) {
  int nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16 h = bf16::from_bits(static_cast<uint16_t>(b));
    float f = bf16_to_float(h);
    ASSERT_EQ(to_bits(f), b << 16) << std::hex << b;  // bits move to the top, nothing else changes
    if (bf16_is_nan(h)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(float_to_bf16(f).bits, b | 0x40u) << std::hex << b;  // quietened, sign and payload kept
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), decode_reference(static_cast<uint16_t>(b))) << std::hex << b;
    ASSERT_EQ(float_to_bf16(f).bits, b) << std::hex << b;  // a bf16 value rounds to itself
  }
  EXPECT_EQ(nans, 2 * 127);  // exponent all ones, mantissa nonzero, either sign
}

TEST(Bf16, EveryTieRoundsToEven) {
  // For every upper half h: h.8000 is a tie and goes to the even neighbour; h.7fff goes down;
  // h.8001 goes up (a carry into the exponent included, and past bf16 max into inf).
  uint64_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 7) & 0xff) == 0xff) continue;  // inf/NaN upper halves: not ties
    uint32_t tie = (h << 16) | 0x8000u, below = (h << 16) | 0x7fffu, above = (h << 16) | 0x8001u;
    uint16_t even = static_cast<uint16_t>((h & 1u) ? h + 1 : h);
    const std::pair<uint32_t, uint16_t> checks[] = {
        {tie, even}, {below, static_cast<uint16_t>(h)}, {above, static_cast<uint16_t>(h + 1)}};
    for (auto [u, want] : checks) {
      uint16_t got = float_to_bf16(from_bits(u)).bits, ref = rne_reference(from_bits(u));
      if (got != want || ref != want) {
        if (++bad <= 5) ADD_FAILURE() << std::hex << "input " << u << " got " << got << " reference " << ref << " want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(Bf16, NamedCases) {
  struct Case {
    uint32_t in;
    uint16_t out;
    const char* why;
  };
  const Case cases[] = {
      {0x3f800000, 0x3f80, "1.0 exact"},
      {0x3f808000, 0x3f80, "1 + 2^-8: tie between 1.0 (even) and 1.0078125"},
      {0x3f818000, 0x3f82, "tie whose lower neighbour is odd rounds up"},
      {0x3f7fffff, 0x3f80, "just below 1 rounds up across the binade"},
      {0x80000000, 0x8000, "-0 keeps its sign"},
      {0x00000001, 0x0000, "smallest float subnormal rounds to +0"},
      {0x80000001, 0x8000, "and its negative to -0"},
      {0x00008000, 0x0000, "half the smallest bf16 subnormal: tie to even zero"},
      {0x00018000, 0x0002, "1.5 bf16 subnormal quanta: tie to even 2"},
      {0x00010000, 0x0001, "smallest bf16 subnormal, 2^-133"},
      {0x007fffff, 0x0080, "largest float subnormal rounds up to the smallest normal"},
      {0x7f7f0000, 0x7f7f, "bf16 max"},
      {0x7f7f7fff, 0x7f7f, "just below max + half ulp stays finite"},
      {0x7f7f8000, 0x7f80, "max + half ulp is a tie; the even neighbour is inf"},
      {0x7f7fffff, 0x7f80, "float max overflows to inf"},
      {0xff7fffff, 0xff80, "-float max overflows to -inf"},
      {0x7f800000, 0x7f80, "inf"},
      {0xff800000, 0xff80, "-inf"},
      {0x7fc00000, 0x7fc0, "quiet NaN"},
      {0xffc00000, 0xffc0, "negative quiet NaN keeps its sign"},
      {0x7f800001, 0x7fc0, "signalling NaN with a low payload: quietened, not inf"},
      {0x7fa00000, 0x7fe0, "signalling NaN: top payload kept, quiet bit set"},
      {0xff812345, 0xffc1, "negative signalling NaN"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_bf16(from_bits(c.in)).bits, c.out) << c.why;
    if (!is_nan_bits(c.in)) {
      EXPECT_EQ(rne_reference(from_bits(c.in)), c.out) << "reference: " << c.why;
    }
  }
}

TEST(Bf16, NaNStaysQuietNaNForEveryPayloadPattern) {
  // Every NaN upper half, with low halves that are zero, a tie and all ones.
  for (uint32_t h = 0; h < 65536; ++h)
    for (uint32_t low : {0x0000u, 0x0001u, 0x8000u, 0xffffu}) {
      uint32_t u = (h << 16) | low;
      if (!is_nan_bits(u)) continue;
      bf16 r = float_to_bf16(from_bits(u));
      ASSERT_TRUE(bf16_is_nan(r)) << std::hex << u;
      ASSERT_TRUE(r.bits & 0x40u) << std::hex << u;           // quiet
      ASSERT_EQ(r.bits & 0x8000u, (u >> 16) & 0x8000u);      // sign kept
    }
}

TEST(Bf16, AllFloatSubnormalsAgainstReference) {
  uint64_t bad = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m)
    for (uint32_t sign : {0u, 0x80000000u}) {
      float f = from_bits(sign | m);
      if (float_to_bf16(f).bits != rne_reference(f) && ++bad <= 5)
        ADD_FAILURE() << std::hex << "input " << (sign | m) << " got " << float_to_bf16(f).bits << " reference "
                      << rne_reference(f);
    }
  EXPECT_EQ(bad, 0u);
}

TEST(Bf16, NearOverflowAgainstReference) {
  // Every float from bf16 max's binade top up to inf, both signs.
  uint64_t bad = 0;
  for (uint32_t u = 0x7f7f0000u; u <= 0x7f800000u; ++u)
    for (uint32_t sign : {0u, 0x80000000u}) {
      float f = from_bits(sign | u);
      if (float_to_bf16(f).bits != rne_reference(f)) ++bad;
    }
  EXPECT_EQ(bad, 0u);
}

TEST(Bf16, RandomFloatsAgainstReference) {
  // 4M random bit patterns (every binade, both signs) and 1M random values in [-4, 4].
  std::mt19937_64 rng(0xbf16);
  uint64_t bad = 0, checked = 0;
  for (int i = 0; i < (1 << 22); ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (is_nan_bits(u)) continue;
    ++checked;
    float f = from_bits(u);
    if (float_to_bf16(f).bits != rne_reference(f) && ++bad <= 5)
      ADD_FAILURE() << std::hex << "input " << u << " got " << float_to_bf16(f).bits << " reference " << rne_reference(f);
  }
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (int i = 0; i < (1 << 20); ++i) {
    float f = dist(rng);
    ++checked;
    if (float_to_bf16(f).bits != rne_reference(f)) ++bad;
    float r = round_to_bf16(f);
    // The rounded value is within half a bf16 ulp (2^-8 relative) of f.
    if (std::fabs(static_cast<double>(r) - f) > std::ldexp(std::fabs(static_cast<double>(f)), -8)) ++bad;
  }
  EXPECT_GT(checked, 5000000u);
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace recap::runtime
