// Reading JSON that comes from outside (case files, a worker's headers, shard results): bounded and
// total. Any input gives a value or one short line saying what is wrong; never an exception that
// escapes, a signal, or memory that grows with a hostile input. The rules, and why:
//  - size: a file is read up to a limit (a case is a few KB; /dev/zero must not fill memory);
//  - only regular files: a directory, device or fifo is refused by name (a fifo could block);
//  - depth: at most 64 levels (nlohmann parses iteratively but dumps and copies recursively: a
//    50,000-level value overflowed the stack when a report was written);
//  - no duplicate keys (the last would win silently: a typo must not change a case), no NUL byte
//    (bytes after it were ignored), no number outside double's range (nlohmann throws
//    out_of_range, not parse_error, and that aborted recap), UTF-8 only (nlohmann's own check).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "harness/base/json.h"

namespace recap {

struct JsonLimits {
  size_t max_bytes = size_t{1} << 20;  // 1 MiB: a case file is a few KB
  int max_depth = 64;
};

// s on one line of at most `max` bytes: control and non-ASCII bytes as \xNN, the rest cut with
// "..." (error messages echo input; a newline in it would break the one-line contract).
inline std::string one_line(const std::string& s, size_t max = 300) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char b[8];
    if (c >= 0x20 && c < 0x7f) {
      b[0] = static_cast<char>(c);
      b[1] = '\0';
    } else {
      std::snprintf(b, sizeof b, "\\x%02x", c);
    }
    if (out.size() + std::strlen(b) > (max > 3 ? max - 3 : 0)) return out + "...";
    out += b;
  }
  return out;
}

// "" and *out, or one line (without the source's name) saying why `text` is refused.
inline std::string parse_json_strict(const std::string& text, Json* out, const JsonLimits& lim = {}) {
  if (size_t nul = text.find('\0'); nul != std::string::npos)
    return "malformed JSON: a NUL byte at offset " + std::to_string(nul);
  std::string err;
  std::vector<std::set<std::string>> keys;  // per open object
  auto cb = [&](int depth, Json::parse_event_t ev, Json& parsed) -> bool {
    if (!err.empty()) return false;
    if (depth >= lim.max_depth) {  // depth counts from 0: n levels reach n - 1
      err = "malformed JSON: nested deeper than " + std::to_string(lim.max_depth) + " levels";
      return false;
    }
    if (ev == Json::parse_event_t::object_start) keys.emplace_back();
    if (ev == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (ev == Json::parse_event_t::key && !keys.empty()) {
      const std::string k = parsed.get<std::string>();
      if (!keys.back().insert(k).second) {
        err = "malformed JSON: duplicate key '" + one_line(k, 60) + "'";
        return false;
      }
    }
    return true;
  };
  try {
    Json j = Json::parse(text, cb);
    if (!err.empty()) return err;
    *out = std::move(j);
  } catch (const Json::exception& e) {
    if (!err.empty()) return err;
    // "[json.exception.parse_error.101] parse error at line 3, column 1: ..." without its prefix
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) what = "the file is empty";
    if (e.id == 406) what = "a number out of range: " + what;  // out_of_range.406: 1e400
    return "malformed JSON: " + one_line(what, 160);
  }
  return "";
}

// Reads all of `path` into *text: a regular file of at most max_bytes. "" or one line that names
// the path (directories, devices, fifos and larger files are refused before anything is read).
inline std::string read_bounded_file(const std::string& path, size_t max_bytes, std::string* text) {
  const std::string name = one_line(path, 120);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "cannot open '" + name + "': " + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "'" + name + "' is a directory, not a file";
  if (!S_ISREG(st.st_mode)) return "'" + name + "' is not a regular file (a device, fifo or socket)";
  if (static_cast<size_t>(st.st_size) > max_bytes)
    return "'" + name + "' is " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
           " it may have";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open '" + name + "': " + std::strerror(errno);
  text->clear();
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      return "cannot read '" + name + "': " + std::strerror(saved);
    }
    if (n == 0) break;
    text->append(buf, static_cast<size_t>(n));
    if (text->size() > max_bytes) {  // a file that grows, or one whose size stat does not know (/proc)
      ::close(fd);
      return "'" + name + "' is more than the " + std::to_string(max_bytes) + " bytes it may have";
    }
  }
  ::close(fd);
  return "";
}

// Reads `path` (read_bounded_file, lim.max_bytes) and parses it strictly. "" or one line that
// starts with the path.
inline std::string read_json_file(const std::string& path, Json* out, const JsonLimits& lim = {}) {
  std::string text;
  if (std::string err = read_bounded_file(path, lim.max_bytes, &text); !err.empty()) return err;
  std::string err = parse_json_strict(text, out, lim);
  return err.empty() ? "" : one_line(path, 120) + ": " + err;
}

}  // namespace recap
