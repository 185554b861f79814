// libFuzzer target: the worker protocol's reader (harness/sut/protocol.h), what recap does with a
// worker's output: messages until the end, each a header and its frames, or a ProtocolError with
// one line. Nothing else may escape, crash or allocate past the limits.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "harness/sut/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  FILE* in = fmemopen(const_cast<uint8_t*>(data), size, "rb");
  if (in == nullptr) return 0;
  recap::sut::Limits limits;
  limits.max_frame_bytes = 1 << 16;  // the fuzzer's inputs are small; the rule is the same
  limits.max_message_bytes = 1 << 18;
  try {
    recap::sut::Message m;
    for (int i = 0; i < 64 && recap::sut::read_message(in, &m, limits); ++i) (void)m.header.dump();
  } catch (const recap::sut::ProtocolError& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) __builtin_trap();
  }
  std::fclose(in);
  return 0;
}
