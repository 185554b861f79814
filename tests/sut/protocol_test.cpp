// recap.worker/1 framing (harness/sut/protocol.h): round trip, and every malformed input a
// ProtocolError with one line, within the readers' bounds.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness/sut/protocol.h"

namespace recap::sut {
namespace {

// A FILE* over the given bytes.
FILE* stream_of(const std::string& bytes) {
  FILE* f = std::tmpfile();
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::rewind(f);
  return f;
}

std::string error_of(const std::string& bytes, const Limits& limits = {}) {
  FILE* f = stream_of(bytes);
  Message m;
  std::string what;
  try {
    read_message(f, &m, limits);
  } catch (const ProtocolError& e) {
    what = e.what();
  }
  std::fclose(f);
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  return what;
}

TEST(Protocol, RoundTripKeepsHeaderAndFramesBitForBit) {
  Message m;
  m.header = {{"op", "observation"}, {"id", 7}};
  m.frames.push_back(f32_frame("grad 0 1", {1.5f, -0.0f, 3.25f}));
  Frame mask;
  mask.name = "mask";
  mask.dtype = "u8";
  mask.shape = {2, 2};
  mask.bytes = std::string("\x01\n\x00\x01", 4);  // a newline inside a payload is data
  m.frames.push_back(mask);
  FILE* f = std::tmpfile();
  write_message(f, m);
  write_message(f, m);
  std::rewind(f);
  for (int i = 0; i < 2; ++i) {
    Message r;
    ASSERT_TRUE(read_message(f, &r));
    EXPECT_EQ(r.header, m.header);
    ASSERT_EQ(r.frames.size(), 2u);
    EXPECT_EQ(f32_values(*r.frame("grad 0 1")), (std::vector<float>{1.5f, -0.0f, 3.25f}));
    EXPECT_EQ(r.frame("mask")->bytes, mask.bytes);
    EXPECT_EQ(r.frame("mask")->shape, (std::vector<int64_t>{2, 2}));
  }
  Message end;
  EXPECT_FALSE(read_message(f, &end));  // a clean end between messages
  std::fclose(f);
}

TEST(Protocol, MalformedInputIsAOneLineError) {
  EXPECT_NE(error_of("not json\n").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of("[1,2]\n").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{\"op\":\"run\"").find("ended inside a header"), std::string::npos);
  EXPECT_NE(error_of("{\"frames\":[{\"name\":\"x\",\"nbytes\":-1}]}\n").find("nbytes must be"), std::string::npos);
  EXPECT_NE(error_of("{\"frames\":[{\"name\":\"x\",\"dtype\":\"f64\",\"nbytes\":8}]}\n").find("unknown dtype"),
            std::string::npos);
  EXPECT_NE(error_of("{\"frames\":[{\"name\":\"x\",\"shape\":[3],\"nbytes\":8}]}\n").find("does not match its shape"),
            std::string::npos);
  EXPECT_EQ(error_of("{\"frames\":[{\"name\":\"x\",\"shape\":[2],\"nbytes\":8}]}\nabc"),
            "truncated frame 'x': expected 8 bytes, got 3");
}

TEST(Protocol, ReadersAreBounded) {
  Limits small;
  small.max_header_bytes = 64;
  small.max_frame_bytes = 16;
  EXPECT_NE(error_of(std::string(100, ' ') + "{}\n", small).find("header line over 64 bytes"), std::string::npos);
  // A frame that claims more than the limit is refused before anything is allocated for it.
  EXPECT_NE(error_of("{\"frames\":[{\"name\":\"big\",\"dtype\":\"u8\",\"nbytes\":1000000000000}]}\n", small)
                .find("over the limit"),
            std::string::npos);
  // Control bytes are echoed escaped: the error stays one line.
  EXPECT_NE(error_of("\x01\x02garbage\r\n").find("\\x01\\x02garbage\\x0d"), std::string::npos);
}

}  // namespace
}  // namespace recap::sut
