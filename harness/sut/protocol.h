// recap.worker/1, the protocol between recap and a worker process that runs cases on a system
// under test (drivers/PROTOCOL.md is its specification, drivers/schema/recap.worker.schema.json
// its schema). A message is one JSON header line; a header may name binary frames
// ("frames": [{name, dtype, shape, nbytes}]) whose bytes follow the newline, in order.
//
// Readers are bounded (a header line, a frame, the frames of one message) so a worker that talks
// garbage costs an error, never unbounded memory; every failure is a ProtocolError with one line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/base/json.h"

namespace recap::sut {

constexpr const char* kProtocol = "recap.worker/1";

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Frame {
  std::string name;
  std::string dtype = "f32";  // "f32" or "u8"
  std::vector<int64_t> shape;
  std::string bytes;          // little-endian payload, product(shape) * element size bytes
};

struct Message {
  Json header;                // without "frames": read_message moves them into `frames`
  std::vector<Frame> frames;
  const Frame* frame(const std::string& name) const;  // null when absent
};

struct Limits {
  size_t max_header_bytes = 1 << 20;          // one header line
  size_t max_frame_bytes = size_t(1) << 30;   // one frame
  size_t max_message_bytes = size_t(4) << 30; // all frames of one message
  size_t max_frames = 1 << 20;
};

// Reads one message. false at a clean end of input (before a header starts); ProtocolError for a
// malformed header, a bad frame descriptor or input that ends inside a message.
bool read_message(FILE* in, Message* out, const Limits& limits = {});
// Writes header + frames (the header's "frames" is set from `frames`) and flushes; ProtocolError
// when the stream refuses (the peer is gone).
void write_message(FILE* out, const Message& m);

// f32 frames from and to float vectors.
Frame f32_frame(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape = {});
std::vector<float> f32_values(const Frame& f);

}  // namespace recap::sut
