// Without libFuzzer (every build, CI): runs a fuzz target once on every input given, each a file or
// a folder of files (the seeds and every input a fuzzer ever found, tests/libfuzzer/found/): the
// regression test.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int n = 0;
  const auto run_one = [&n](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++n;
  };
  for (int i = 1; i < argc; ++i) {
    if (std::filesystem::is_regular_file(argv[i])) {
      run_one(argv[i]);
      continue;
    }
    if (!std::filesystem::is_directory(argv[i])) {
      std::fprintf(stderr, "no such input: %s\n", argv[i]);  // a moved seed must fail the test, not shrink it
      return 1;
    }
    for (const auto& e : std::filesystem::directory_iterator(argv[i]))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.') run_one(e.path());
  }
  std::printf("%d inputs ran\n", n);
  return n > 0 ? 0 : 1;  // no input: the arguments are wrong, not a pass
}
