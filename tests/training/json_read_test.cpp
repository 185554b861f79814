// The bounded, strict JSON reader every outside input goes through (harness/base/json_read.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "harness/base/json_read.h"

namespace recap {
namespace {

std::string strict(const std::string& text) {
  Json j;
  return parse_json_strict(text, &j);
}

TEST(JsonRead, RefusesWhatNlohmannWouldAcceptOrThrow) {
  EXPECT_EQ(strict(R"({"a": 1, "b": [1, 2]})"), "");
  EXPECT_EQ(strict(R"({"a": 1, "a": 2})"), "malformed JSON: duplicate key 'a'");
  EXPECT_EQ(strict(R"({"x": {"a": 1}, "y": {"a": 2}})"), "");  // the same key in two objects is fine
  EXPECT_EQ(strict(std::string("{\"a\": 1}\0tail", 13)), "malformed JSON: a NUL byte at offset 8");
  EXPECT_EQ(strict(R"({"lr": 1e400})").rfind("malformed JSON: a number out of range", 0), 0u);
  EXPECT_EQ(strict(std::string(65, '[') + std::string(65, ']')), "malformed JSON: nested deeper than 64 levels");
  EXPECT_EQ(strict(std::string(64, '[') + std::string(64, ']')), "");
  EXPECT_EQ(strict(std::string(200000, '[')), "malformed JSON: nested deeper than 64 levels");
  EXPECT_EQ(strict("  "), "malformed JSON: the file is empty");
  EXPECT_EQ(strict("{\"a\": \"\xff\"}").rfind("malformed JSON: ", 0), 0u);
}

TEST(JsonRead, OneLineEscapesAndCuts) {
  EXPECT_EQ(one_line("a\nb\x01"), "a\\x0ab\\x01");
  const std::string cut = one_line(std::string(1000, 'x'), 50);
  EXPECT_EQ(cut.size(), 50u);
  EXPECT_EQ(cut.substr(47), "...");
}

TEST(JsonRead, FilesMustBeRegularAndSmall) {
  Json j;
  EXPECT_EQ(read_json_file("/tmp", &j), "'/tmp' is a directory, not a file");
  EXPECT_EQ(read_json_file("/dev/zero", &j), "'/dev/zero' is not a regular file (a device, fifo or socket)");
  EXPECT_EQ(read_json_file("/no/such/file.json", &j), "cannot open '/no/such/file.json': No such file or directory");
  const std::string path = ::testing::TempDir() + "/json_read_big.json";
  {
    std::ofstream out(path);
    out << "\"" << std::string(100, 'x') << "\"";
  }
  JsonLimits small;
  small.max_bytes = 50;
  EXPECT_NE(read_json_file(path, &j, small).find("is 102 bytes, more than the 50"), std::string::npos);
  EXPECT_EQ(read_json_file(path, &j), "");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace recap
