// Philox4x32-10: published known answers, the uniform conversion, and the draw layout (philox.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "harness/runtime/philox.h"

namespace recap::runtime {
namespace {

struct Kat {
  PhiloxCtr ctr;
  PhiloxKey key;
  PhiloxCtr expect;
};

void expect_ctr_eq(const PhiloxCtr& got, const PhiloxCtr& want, const char* what) {
  for (int j = 0; j < 4; ++j) EXPECT_EQ(got.v[j], want.v[j]) << what << ", word " << j;
}

// Random123 tests/kat_vectors (github.com/DEShawResearch/random123), the "philox4x32 10" lines:
//   philox4x32 10 CTR(4 words) KEY(2 words)   EXPECTED(4 words)
const Kat kKat10[] = {
    {{{0x00000000, 0x00000000, 0x00000000, 0x00000000}}, {{0x00000000, 0x00000000}},
     {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
};

// The same file's "philox4x32 7" lines: they pin the round count and key schedule separately
// from the 10-round answers (a schedule off by one round fails one set or the other).
const Kat kKat7[] = {
    {{{0x00000000, 0x00000000, 0x00000000, 0x00000000}}, {{0x00000000, 0x00000000}},
     {{0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
     {{0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
     {{0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}}},
};

TEST(Philox, Random123KnownAnswers10Rounds) {
  for (const Kat& k : kKat10) expect_ctr_eq(philox4x32_10(k.ctr, k.key), k.expect, "philox4x32_10");
  for (const Kat& k : kKat10) expect_ctr_eq(philox4x32<10>(k.ctr, k.key), k.expect, "philox4x32<10>");
}

TEST(Philox, Random123KnownAnswers7Rounds) {
  for (const Kat& k : kKat7) expect_ctr_eq(philox4x32<7>(k.ctr, k.key), k.expect, "philox4x32<7>");
}

TEST(Philox, RoundsComposeWithTheKeySchedule) {
  // R rounds = R-1 rounds, then the key bumped R-1 times, then one more round.
  PhiloxCtr c{{1, 2, 3, 4}};
  PhiloxKey k{{5, 6}};
  PhiloxKey k9 = k;
  for (int r = 0; r < 9; ++r) k9 = philox_bump_key(k9);
  expect_ctr_eq(philox4x32<10>(c, k), philox_round(philox4x32<9>(c, k), k9), "10 = 9 + 1");
  EXPECT_EQ(k9.v[0], 5u + 9u * kPhiloxW0);  // mod 2^32, as unsigned arithmetic wraps
  EXPECT_EQ(k9.v[1], 6u + 9u * kPhiloxW1);
}

// ---- uniform conversion ------------------------------------------------------------------------

TEST(PhiloxUniform, EndpointsAndSpacing) {
  EXPECT_EQ(uniform_from_u32(0u), 0.0f);
  EXPECT_EQ(uniform_from_u32(0xffu), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(uniform_from_u32(0x100u), 0x1p-24f);
  EXPECT_EQ(uniform_from_u32(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_LT(uniform_from_u32(0xffffffffu), 1.0f);
  EXPECT_EQ(uniform_from_u32(0x80000000u), 0.5f);
}

TEST(PhiloxUniform, ExhaustiveOverAll2To24Levels) {
  // Every level k maps to exactly k * 2^-24 (computed in double), whatever the dropped low bits,
  // so the values are strictly increasing in k and lie in [0, 1).
  uint64_t bad = 0;
  float previous = -1.0f;
  for (uint32_t k = 0; k < (1u << 24); ++k) {
    double want = std::ldexp(static_cast<double>(k), -24);
    float lo = uniform_from_u32(k << 8);
    float hi = uniform_from_u32((k << 8) | 0xffu);
    if (static_cast<double>(lo) != want || static_cast<double>(hi) != want || !(lo > previous) || !(lo < 1.0f)) ++bad;
    previous = lo;
  }
  EXPECT_EQ(bad, 0u);
}

TEST(PhiloxUniform, MeanOfOneMillionDrawsNearOneHalf) {
  // Mean of the 2^24 levels is 0.5 - 2^-25; the sample mean of n draws has standard deviation
  // sqrt(1/12 / n) = 2.9e-4 for n = 2^20. Tolerance: 6 standard deviations.
  const uint64_t n = 1u << 20;
  PhiloxStream s(20240607u, 0);
  double sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += uniform_from_u32(s.next());
  double mean = sum / static_cast<double>(n);
  EXPECT_NEAR(mean, 0.5 - 0x1p-25, 6.0 * std::sqrt(1.0 / 12.0 / static_cast<double>(n)));
}

// ---- the draw layout ---------------------------------------------------------------------------

// The layout written out a second way: counter words and key words built by hand.
uint32_t layout_reference(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t block = offset / 4 + (offset % 4 + i) / 4;
  uint64_t lane = (offset % 4 + i) % 4;
  PhiloxCtr c{{static_cast<uint32_t>(block & 0xffffffffu), static_cast<uint32_t>(block >> 32), 0, 0}};
  PhiloxKey k{{static_cast<uint32_t>(seed & 0xffffffffu), static_cast<uint32_t>(seed >> 32)}};
  return philox4x32_10(c, k).v[lane];
}

const uint64_t kSeeds[] = {0u, 1u, 0xdeadbeefcafef00dull, 0xffffffffffffffffull};
const uint64_t kOffsets[] = {0u, 4u, 8u, 4096u, (uint64_t{1} << 34) + 12u, 0xfffffffffffff000ull};

TEST(PhiloxLayout, ValueIComesFromBlockOffsetOver4PlusIOver4LaneIMod4) {
  for (uint64_t seed : kSeeds)
    for (uint64_t offset : kOffsets)
      for (uint64_t i = 0; i < 64; ++i)
        ASSERT_EQ(philox_value(seed, offset, i), layout_reference(seed, offset, i))
            << "seed " << seed << " offset " << offset << " i " << i;
  // Aligned offsets: value i is lane i % 4 of block offset / 4 + i / 4, as the contract says.
  PhiloxCtr block = philox4x32_10(PhiloxCtr{{2, 0, 0, 0}}, PhiloxKey{{7, 0}});
  for (uint64_t lane = 0; lane < 4; ++lane) EXPECT_EQ(philox_value(7u, 4u, 4u + lane), block.v[lane]);
}

TEST(PhiloxLayout, UnalignedOffsetContinuesTheSameStream) {
  // Offsets count values, so (seed, o + d) starts d values into the draw at (seed, o).
  for (uint64_t d = 0; d < 8; ++d)
    for (uint64_t i = 0; i < 40; ++i) ASSERT_EQ(philox_value(99u, 16u + d, i), philox_value(99u, 16u, d + i));
}

TEST(PhiloxLayout, DrawAtOffsetPlus4kIsTheTailOfTheDrawAtOffset) {
  const uint64_t n = 1000;
  for (uint64_t seed : kSeeds)
    for (uint64_t offset : {uint64_t{0}, uint64_t{40}, (uint64_t{1} << 33) + 4u}) {
      std::vector<uint32_t> whole(n);
      for (uint64_t i = 0; i < n; ++i) whole[i] = philox_value(seed, offset, i);
      for (uint64_t k : {1u, 2u, 25u, 249u})
        for (uint64_t j = 0; j + 4 * k < n; ++j)
          ASSERT_EQ(philox_value(seed, offset + 4 * k, j), whole[4 * k + j]) << "k " << k << " j " << j;
    }
}

TEST(PhiloxLayout, IncrementRoundsUpToAMultipleOf4) {
  EXPECT_EQ(philox_increment(0), 0u);
  EXPECT_EQ(philox_increment(1), 4u);
  EXPECT_EQ(philox_increment(3), 4u);
  EXPECT_EQ(philox_increment(4), 4u);
  EXPECT_EQ(philox_increment(5), 8u);
  EXPECT_EQ(philox_increment(1000001), 1000004u);
  EXPECT_EQ(philox_increment(uint64_t{1} << 40), uint64_t{1} << 40);
}

TEST(PhiloxLayout, ConsecutiveDrawsNeverShareACounterBlock) {
  // A generator advancing by philox_increment hands out aligned offsets and disjoint blocks.
  std::set<uint64_t> used;
  uint64_t offset = 0;
  for (uint64_t n : {1u, 5u, 4u, 7u, 3u, 8u, 1u, 2u, 64u, 13u}) {
    ASSERT_EQ(offset % 4, 0u);
    for (uint64_t i = 0; i < n; ++i) used.insert(offset / 4 + i / 4);
    uint64_t blocks = (n + 3) / 4;
    offset += philox_increment(n);
    EXPECT_EQ(used.size(), offset / 4) << "after a draw of " << n << " (" << blocks << " blocks)";
  }
}

TEST(PhiloxLayout, SeedHighWordAndCounterHighWordAreUsed) {
  // Seeds differing only above bit 31 feed key word 1; offsets past 2^34 feed counter word 1.
  EXPECT_NE(philox_value(1u, 0u, 0u), philox_value(1u + (uint64_t{1} << 32), 0u, 0u));
  PhiloxCtr high = philox4x32_10(PhiloxCtr{{0, 1, 0, 0}}, PhiloxKey{{3, 0}});
  EXPECT_EQ(philox_value(3u, uint64_t{4} << 32, 0u), high.v[0]);
  EXPECT_NE(philox_value(3u, uint64_t{4} << 32, 0u), philox_value(3u, 0u, 0u));
}

TEST(PhiloxStream, EqualsPhiloxValueFromAnyStart) {
  for (uint64_t offset = 0; offset < 8; ++offset)
    for (uint64_t first = 0; first < 6; ++first) {
      PhiloxStream s(0x1234u, offset, first);
      for (uint64_t i = 0; i < 40; ++i) ASSERT_EQ(s.next(), philox_value(0x1234u, offset, first + i));
    }
}

TEST(PhiloxArgs, UnpackByValueAndGraphSafe) {
  PhiloxSeedOffset v = philox_unpack(PhiloxArgs::by_value(11u, 20u));
  EXPECT_EQ(v.seed, 11u);
  EXPECT_EQ(v.offset, 20u);
  // Graph-safe: the cells are read at unpack time (the kernel's run), not when the args are made.
  uint64_t seed_cell = 5, offset_cell = 100;
  PhiloxArgs a = PhiloxArgs::from_device(&seed_cell, &offset_cell, 8u);
  seed_cell = 6;
  offset_cell = 200;
  PhiloxSeedOffset g = philox_unpack(a);
  EXPECT_EQ(g.seed, 6u);
  EXPECT_EQ(g.offset, 208u);
}

}  // namespace
}  // namespace recap::runtime
