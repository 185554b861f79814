#include "harness/sut/protocol.h"

#include "harness/base/json_read.h"

#include <cstring>

namespace recap::sut {

namespace {

size_t element_size(const std::string& dtype) {
  if (dtype == "f32") return 4;
  if (dtype == "u8") return 1;
  return 0;
}

// A short, escaped excerpt of what was received, for error messages (json_read.h's one rule).
std::string excerpt(const std::string& s) { return one_line(s, 63); }

Frame frame_descriptor(const Json& d, size_t index, const Limits& limits) {
  const std::string at = "frame " + std::to_string(index);
  if (!d.is_object()) throw ProtocolError(at + ": a descriptor must be an object");
  Frame f;
  if (!d.contains("name") || !d["name"].is_string()) throw ProtocolError(at + ": missing name");
  f.name = d["name"].get<std::string>();
  if (d.contains("dtype") && !d["dtype"].is_string())  // d.value() would throw nlohmann's type_error (tests/libfuzzer)
    throw ProtocolError("frame '" + excerpt(f.name) + "': dtype must be a string");
  f.dtype = d.value("dtype", std::string("f32"));
  const size_t es = element_size(f.dtype);
  if (es == 0) throw ProtocolError("frame '" + excerpt(f.name) + "': unknown dtype '" + excerpt(f.dtype) + "'");
  if (!d.contains("nbytes") || !d["nbytes"].is_number_unsigned())
    throw ProtocolError("frame '" + excerpt(f.name) + "': nbytes must be a non-negative integer");
  const uint64_t nbytes = d["nbytes"].get<uint64_t>();
  if (nbytes > limits.max_frame_bytes)
    throw ProtocolError("frame '" + excerpt(f.name) + "': " + std::to_string(nbytes) + " bytes, over the limit of " +
                        std::to_string(limits.max_frame_bytes));
  uint64_t elements = 1;
  if (d.contains("shape")) {
    if (!d["shape"].is_array()) throw ProtocolError("frame '" + excerpt(f.name) + "': shape must be an array");
    for (const auto& n : d["shape"]) {
      if (!n.is_number_unsigned()) throw ProtocolError("frame '" + excerpt(f.name) + "': shape must hold sizes");
      f.shape.push_back(n.get<int64_t>());
      elements *= n.get<uint64_t>();
      if (elements > limits.max_frame_bytes) break;
    }
  } else {
    f.shape = {static_cast<int64_t>(nbytes / es)};
    elements = nbytes / es;
  }
  if (elements * es != nbytes)
    throw ProtocolError("frame '" + excerpt(f.name) + "': nbytes " + std::to_string(nbytes) + " does not match its shape");
  f.bytes.resize(nbytes);
  return f;
}

}  // namespace

const Frame* Message::frame(const std::string& name) const {
  for (const Frame& f : frames)
    if (f.name == name) return &f;
  return nullptr;
}

bool read_message(FILE* in, Message* out, const Limits& limits) {
  std::string line;
  for (;;) {
    int c = std::fgetc(in);
    if (c == EOF) {
      if (line.empty()) return false;
      throw ProtocolError("the input ended inside a header: '" + excerpt(line) + "'");
    }
    if (c == '\n') break;
    if (line.size() >= limits.max_header_bytes)
      throw ProtocolError("a header line over " + std::to_string(limits.max_header_bytes) + " bytes");
    line += static_cast<char>(c);
  }
  Json h;
  // strict and bounded in depth (json_read.h): a worker's header is input like any file
  if (!parse_json_strict(line, &h).empty()) throw ProtocolError("a header that is not JSON: '" + excerpt(line) + "'");
  if (!h.is_object()) throw ProtocolError("a header that is not a JSON object: '" + excerpt(line) + "'");
  *out = Message{};
  if (h.contains("frames")) {
    if (!h["frames"].is_array()) throw ProtocolError("frames must be an array");
    if (h["frames"].size() > limits.max_frames) throw ProtocolError("too many frames");
    size_t total = 0;
    for (size_t i = 0; i < h["frames"].size(); ++i) {
      out->frames.push_back(frame_descriptor(h["frames"][i], i, limits));
      total += out->frames.back().bytes.size();
      if (total > limits.max_message_bytes) throw ProtocolError("the frames of one message are over the limit");
    }
    h.erase("frames");
    for (Frame& f : out->frames) {
      size_t got = f.bytes.empty() ? 0 : std::fread(f.bytes.data(), 1, f.bytes.size(), in);
      if (got != f.bytes.size())
        throw ProtocolError("truncated frame '" + excerpt(f.name) + "': expected " + std::to_string(f.bytes.size()) +
                            " bytes, got " + std::to_string(got));
    }
  }
  out->header = std::move(h);
  return true;
}

void write_message(FILE* out, const Message& m) {
  Json h = m.header;
  if (!m.frames.empty()) {
    Json d = Json::array();
    for (const Frame& f : m.frames)
      d.push_back({{"name", f.name}, {"dtype", f.dtype}, {"shape", f.shape}, {"nbytes", f.bytes.size()}});
    h["frames"] = d;
  }
  const std::string line = h.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  bool ok = std::fwrite(line.data(), 1, line.size(), out) == line.size();
  for (const Frame& f : m.frames) ok = ok && std::fwrite(f.bytes.data(), 1, f.bytes.size(), out) == f.bytes.size();
  ok = ok && std::fflush(out) == 0;
  if (!ok) throw ProtocolError(std::string("cannot write to the peer: ") + std::strerror(errno));
}

Frame f32_frame(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
  Frame f;
  f.name = name;
  f.dtype = "f32";
  f.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(v.size())} : std::move(shape);
  f.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));  // x86-64/aarch64: little-endian
  return f;
}

std::vector<float> f32_values(const Frame& f) {
  if (f.dtype != "f32") throw ProtocolError("frame '" + f.name + "' is " + f.dtype + ", expected f32");
  std::vector<float> v(f.bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), f.bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace recap::sut
