// The one hash recap uses: FNV-1a 64. It names parameters' random streams (models), digests
// gradients and masks (training, drivers) and names corpus files by their content (reports), so
// its values are part of recap's file formats: never change it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace recap {

// The offset basis is 1469598103934665603, not FNV's 14695981039346656037: recap's first version
// lost the last digit, and parameter values and corpus file names have depended on it since.
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// Continues the hash `h` over `n` bytes (start with kFnvOffset).
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnvOffset) { return fnv1a64(s.data(), s.size(), h); }

// 16 lower-case hex digits.
inline std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace recap
