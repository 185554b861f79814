// Without libFuzzer (every build, CI): runs a fuzz target once on every file of the folders given,
// the seed corpus and every input a fuzzer ever found (tests/fuzz/found/): the regression test.
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
  for (int i = 1; i < argc; ++i) {
    if (!std::filesystem::is_directory(argv[i])) continue;
    for (const auto& e : std::filesystem::directory_iterator(argv[i])) {
      if (!e.is_regular_file() || e.path().filename().string()[0] == '.') continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  std::printf("%d inputs ran\n", n);
  return n > 0 ? 0 : 1;  // no input: the folders are wrong, not a pass
}
