#include "harness/runtime/dropout.h"

#include <bit>
#include <stdexcept>
#include <string>

namespace recap::runtime {
namespace {

void check_p(float p) {
  // Written so that NaN fails too.
  if (!(p >= 0.0f && p <= 1.0f)) throw std::invalid_argument("dropout probability must be in [0, 1], got " + std::to_string(p));
}

}  // namespace

uint64_t DropoutMask::count_kept() const {
  uint64_t kept = 0;
  for (uint32_t w : words) kept += static_cast<uint64_t>(std::popcount(w));
  return kept;
}

void dropout_mask_into(uint32_t* words, uint64_t seed, uint64_t offset, uint64_t n, float p) {
  uint64_t count = dropout_mask_words(n);
  for (uint64_t w = 0; w < count; ++w) words[w] = dropout_mask_word(seed, offset, n, p, w);
}

DropoutMask dropout_mask(uint64_t seed, uint64_t offset, uint64_t n, float p) {
  check_p(p);
  DropoutMask mask;
  mask.n = n;
  mask.words.resize(dropout_mask_words(n));
  dropout_mask_into(mask.words.data(), seed, offset, n, p);
  return mask;
}

std::vector<uint8_t> dropout_mask_bytes(uint64_t seed, uint64_t offset, uint64_t n, float p) {
  DropoutMask mask = dropout_mask(seed, offset, n, p);
  std::vector<uint8_t> bytes(n);
  for (uint64_t i = 0; i < n; ++i) bytes[i] = mask.kept(i) ? 1 : 0;
  return bytes;
}

}  // namespace recap::runtime
