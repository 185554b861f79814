// Dropout masks (dropout.h): keep rate, the keep rule, packing, layout, and the device-layer
// Kernel's host body (rng_kernels.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "harness/runtime/dropout.h"
#include "harness/runtime/philox.h"
#include "harness/runtime/rng_kernels.h"

namespace recap::runtime {
namespace {

constexpr uint64_t kMillion = 1000000;

TEST(Dropout, KeepRateOfOneMillionElementsIsNearOneMinusP) {
  // Kept count ~ Binomial(n, q) with q = (2^24 - ceil(p * 2^24)) / 2^24 (within 2^-24 of 1 - p).
  // Tolerance: 6 standard deviations, sqrt(p (1 - p) / n), i.e. 1.8e-3 at p = 0.1 for n = 10^6;
  // a correct generator fails it with probability about 2e-9 per case (and the seeds are fixed).
  for (float p : {0.1f, 0.5f, 0.9f})
    for (uint64_t seed : {uint64_t{1}, uint64_t{0x5eed0000dead}}) {
      DropoutMask m = dropout_mask(seed, 4096, kMillion, p);
      double rate = static_cast<double>(m.count_kept()) / static_cast<double>(kMillion);
      double q = 1.0 - static_cast<double>(p);
      double tolerance = 6.0 * std::sqrt(q * (1.0 - q) / static_cast<double>(kMillion));
      EXPECT_NEAR(rate, q, tolerance) << "p " << p << " seed " << seed;
    }
}

TEST(Dropout, PZeroKeepsAllAndPOneDropsAll) {
  EXPECT_EQ(dropout_mask(3, 0, 100003, 0.0f).count_kept(), 100003u);
  EXPECT_EQ(dropout_mask(3, 0, 100003, 1.0f).count_kept(), 0u);
}

TEST(Dropout, KeepIffUniformAtLeastP) {
  // At the threshold: p = 0.25 is level 2^22 exactly, so level 2^22 is kept and 2^22 - 1 dropped,
  // whatever the 8 low bits that the uniform conversion drops.
  EXPECT_TRUE(dropout_keep_value(uint32_t{1} << 30, 0.25f));
  EXPECT_TRUE(dropout_keep_value((uint32_t{1} << 30) | 0xffu, 0.25f));
  EXPECT_FALSE(dropout_keep_value((uint32_t{1} << 30) - 1u, 0.25f));
  EXPECT_FALSE(dropout_keep_value(0xffffffffu, 1.0f));
  EXPECT_TRUE(dropout_keep_value(0u, 0.0f));
  // The mask follows the rule element by element, on the draw's values.
  const uint64_t n = 10000;
  DropoutMask m = dropout_mask(77, 12, n, 0.3f);
  for (uint64_t i = 0; i < n; ++i) {
    bool want = uniform_from_u32(philox_value(77, 12, i)) >= 0.3f;
    ASSERT_EQ(m.kept(i), want) << "element " << i;
    ASSERT_EQ(dropout_keep(77, 12, i, 0.3f), want) << "element " << i;
  }
}

TEST(Dropout, PackedWordsBytesAndZeroTail) {
  const uint64_t n = 100;  // 3 full words and 4 bits
  DropoutMask all = dropout_mask(5, 0, n, 0.0f);
  ASSERT_EQ(all.words.size(), 4u);
  EXPECT_EQ(all.words[0], 0xffffffffu);
  EXPECT_EQ(all.words[3], 0xfu);  // bits past n stay zero
  DropoutMask half = dropout_mask(5, 0, n, 0.5f);
  EXPECT_EQ(half.words[3] & ~0xfu, 0u);
  std::vector<uint8_t> bytes = dropout_mask_bytes(5, 0, n, 0.5f);
  ASSERT_EQ(bytes.size(), n);
  for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(bytes[i], half.kept(i) ? 1 : 0) << i;
  EXPECT_EQ(dropout_mask(5, 0, 0, 0.5f).words.size(), 0u);
}

TEST(Dropout, MaskAtOffsetPlus4kIsTheTailOfTheMaskAtOffset) {
  const uint64_t n = 5000;
  DropoutMask whole = dropout_mask(9, 64, n, 0.4f);
  for (uint64_t k : {1u, 8u, 333u}) {
    DropoutMask tail = dropout_mask(9, 64 + 4 * k, n - 4 * k, 0.4f);
    for (uint64_t j = 0; j < tail.n; ++j) ASSERT_EQ(tail.kept(j), whole.kept(4 * k + j)) << "k " << k << " j " << j;
  }
}

TEST(Dropout, NextOffsetOrOtherSeedGivesAnotherMask) {
  // Non-vacuity: the mask depends on seed and offset (two equal 1000-bit masks would be a bug).
  const uint64_t n = 1000;
  DropoutMask a = dropout_mask(1, 0, n, 0.5f);
  EXPECT_NE(a.words, dropout_mask(1, philox_increment(n), n, 0.5f).words);
  EXPECT_NE(a.words, dropout_mask(2, 0, n, 0.5f).words);
  EXPECT_EQ(a.words, dropout_mask(1, 0, n, 0.5f).words);  // and is a function of them alone
}

TEST(Dropout, RejectsPOutsideZeroOne) {
  EXPECT_THROW(dropout_mask(1, 0, 10, -0.1f), std::invalid_argument);
  EXPECT_THROW(dropout_mask(1, 0, 10, 1.5f), std::invalid_argument);
  EXPECT_THROW(dropout_mask(1, 0, 10, std::numeric_limits<float>::quiet_NaN()), std::invalid_argument);
}

// ---- device-layer Kernels (host bodies; the cuda bodies are checked by the gpu tests) --------------

TEST(RngKernels, DropoutKernelHostBodyEqualsHostMask) {
  const uint64_t n = 1000;
  std::vector<uint32_t> buf(dropout_mask_words(n) + 1, 0xabababab);  // one sentinel word past the end
  device::Kernel k = dropout_mask_kernel(buf.data(), PhiloxArgs::by_value(21, 40), n, 0.2f);
  ASSERT_EQ(k.writes.size(), 1u);
  EXPECT_EQ(k.writes[0].bytes, dropout_mask_words(n) * sizeof(uint32_t));
  EXPECT_TRUE(k.reads.empty());
#ifdef RECAP_WITH_CUDA
  EXPECT_TRUE(static_cast<bool>(k.gpu));
#else
  EXPECT_FALSE(static_cast<bool>(k.gpu));
#endif
  k.host();
  std::vector<uint32_t> want = dropout_mask(21, 40, n, 0.2f).words;
  EXPECT_EQ(std::vector<uint32_t>(buf.begin(), buf.end() - 1), want);
  EXPECT_EQ(buf.back(), 0xababababu);
}

TEST(RngKernels, GraphSafeKernelReadsStateCellsEachTimeItRuns) {
  // The same Kernel run twice (as a replayed graph would) after the offset cell was refreshed
  // draws the mask at the new offset plus its intragraph offset.
  const uint64_t n = 777;
  uint64_t seed_cell = 42, offset_cell = 0;
  std::vector<uint32_t> buf(dropout_mask_words(n));
  device::Kernel k = dropout_mask_kernel(buf.data(), PhiloxArgs::from_device(&seed_cell, &offset_cell, 8), n, 0.5f);
  EXPECT_EQ(k.reads.size(), 2u);
  k.host();
  EXPECT_EQ(buf, dropout_mask(42, 8, n, 0.5f).words);
  offset_cell = 1024;
  k.host();
  EXPECT_EQ(buf, dropout_mask(42, 1032, n, 0.5f).words);
}

TEST(RngKernels, PhiloxDrawKernelHostBodyEqualsDraw) {
  const uint64_t n = 37;
  std::vector<uint32_t> out(n);
  device::Kernel k = philox_draw_kernel(out.data(), PhiloxArgs::by_value(8, 6), n);
  k.host();
  for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], philox_value(8, 6, i)) << i;
}

}  // namespace
}  // namespace recap::runtime
