// Dropout masks from Philox draws, identical on host and GPU.
//
// A dropout of n elements with drop probability p at Philox state (seed, offset) is one draw of
// n values (philox.h, "Draw layout"): element i is kept iff uniform_from_u32(value i) >= p, and
// the generator's offset then advances by philox_increment(n). Consequences of the rule: p = 0
// keeps every element (u >= 0 always), p = 1 drops every element (u < 1 always), and the keep
// probability is (2^24 - ceil(p * 2^24)) / 2^24, within 2^-24 of 1 - p. p is a float and must
// lie in [0, 1]. Callers scale kept elements by 1 / (1 - p); the mask carries no scale.
//
// Packed layout: bit (i % 32) of word i / 32 is set iff element i is kept; bits past n in the
// last word are zero. Word w is computed by dropout_mask_word(), the one function both the host
// loop and the CUDA kernel call, so they cannot disagree.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/runtime/hd.h"
#include "harness/runtime/philox.h"

namespace recap::runtime {

RECAP_HD inline bool dropout_keep_value(uint32_t philox_value_i, float p) { return uniform_from_u32(philox_value_i) >= p; }

// Whether element i of the dropout at (seed, offset) is kept.
RECAP_HD inline bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
  return dropout_keep_value(philox_value(seed, offset, i), p);
}

RECAP_HD inline uint64_t dropout_mask_words(uint64_t n) { return (n + 31u) / 32u; }

// Word w of the packed mask of n elements.
RECAP_HD inline uint32_t dropout_mask_word(uint64_t seed, uint64_t offset, uint64_t n, float p, uint64_t w) {
  uint64_t first = w * 32u;
  if (first >= n) return 0u;
  uint64_t left = n - first;
  uint32_t count = left < 32u ? static_cast<uint32_t>(left) : 32u;
  PhiloxStream stream(seed, offset, first);
  uint32_t bits = 0u;
  for (uint32_t j = 0; j < count; ++j)
    if (dropout_keep_value(stream.next(), p)) bits |= 1u << j;
  return bits;
}

// ---- host API --------------------------------------------------------------------------------

struct DropoutMask {
  uint64_t n = 0;
  std::vector<uint32_t> words;  // dropout_mask_words(n) words, packed as above

  bool kept(uint64_t i) const { return (words[i / 32u] >> (i % 32u)) & 1u; }
  uint64_t count_kept() const;
};

// The mask on the host. Throws std::invalid_argument when p is not in [0, 1] (NaN included).
DropoutMask dropout_mask(uint64_t seed, uint64_t offset, uint64_t n, float p);

// The same mask unpacked: one byte per element, 1 kept, 0 dropped.
std::vector<uint8_t> dropout_mask_bytes(uint64_t seed, uint64_t offset, uint64_t n, float p);

// Writes dropout_mask_words(n) words into `words` (host memory): the body that the sim backend
// runs for the dropout kernel. No argument check.
void dropout_mask_into(uint32_t* words, uint64_t seed, uint64_t offset, uint64_t n, float p);

}  // namespace recap::runtime
