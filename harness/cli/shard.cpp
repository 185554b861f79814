// Sharding a campaign: --shard i/n, or gtest's sharding environment variables, so that a CI
// system that shards gtest binaries shards recap the same way.
#include <cstdlib>
#include <fstream>

#include "harness/cli/campaign.h"
#include "harness/cli/cli.h"

namespace recap::cli {

void parse_shard(const std::string& text, int* index, int* count) {
  auto bad = [&] { throw UsageError("--shard must be i/n with 0 <= i < n, got '" + text + "'"); };
  size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 >= text.size()) bad();
  try {
    size_t p1 = 0, p2 = 0;
    long i = std::stol(text.substr(0, slash), &p1);
    long n = std::stol(text.substr(slash + 1), &p2);
    if (p1 != slash || p2 != text.size() - slash - 1 || n < 1 || n > 1000000 || i < 0 || i >= n) bad();
    *index = static_cast<int>(i);
    *count = static_cast<int>(n);
  } catch (const std::logic_error&) {
    bad();
  }
}

void resolve_shard(const std::string& flag, int* index, int* count) {
  *index = 0;
  *count = 1;
  if (!flag.empty()) {
    parse_shard(flag, index, count);
    return;
  }
  const char* i = std::getenv("GTEST_SHARD_INDEX");
  const char* n = std::getenv("GTEST_TOTAL_SHARDS");
  if (i && n && *i && *n) {
    try {
      parse_shard(std::string(i) + "/" + n, index, count);
    } catch (const UsageError&) {
      throw UsageError(std::string("GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS must be i and n with 0 <= i < n, got ") + i +
                       " and " + n);
    }
    if (const char* status = std::getenv("GTEST_SHARD_STATUS_FILE")) std::ofstream{status};
  }
}

// How many of `cases` shard i of n runs: fuzz() deals chunks of `chunk` cases, chunk c to shard c % n.
int shard_cases(int cases, int chunk, int i, int n) {
  chunk = std::max(1, chunk);
  int total = 0;
  for (int c = 0; c * chunk < cases; ++c)
    if (c % n == i) total += std::min(chunk, cases - c * chunk);
  return total;
}

}  // namespace recap::cli
