// Helpers shared by the sim unit tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/device/device.h"
#include "harness/device/kernels.h"
#include "harness/device/sim/sim_device.h"
#include "harness/device/status.h"

namespace recap::device::simtest {

// Compares statuses by their CUDA names, so a failure reads "cudaErrorStreamCaptureImplicit".
#define EXPECT_STATUS(expected, call) EXPECT_EQ(::recap::device::error_name(call), ::recap::device::error_name(expected))
#define ASSERT_STATUS(expected, call) ASSERT_EQ(::recap::device::error_name(call), ::recap::device::error_name(expected))
#define ASSERT_OK(call) ASSERT_STATUS(::recap::device::Status::Success, call)

inline std::unique_ptr<Device> make_sim(uint64_t seed = 0, bool race_check = false) {
  DeviceOptions opts;
  opts.explore_seed = seed;
  opts.race_check = race_check;
  return sim::make_sim_device(opts);
}

inline CaptureStatus capture_status(Device& dev, Stream s) {
  CaptureStatus st = CaptureStatus::None;
  EXPECT_STATUS(Status::Success, dev.stream_is_capturing(s, &st));
  return st;
}

inline uint64_t capture_id(Device& dev, Stream s) {
  CaptureStatus st = CaptureStatus::None;
  uint64_t id = 0;
  EXPECT_STATUS(Status::Success, dev.stream_get_capture_info(s, &st, &id));
  return id;
}

inline Stream new_stream(Device& dev, bool non_blocking = true) {
  Stream s;
  EXPECT_STATUS(Status::Success, dev.stream_create(&s, non_blocking));
  return s;
}

inline Event new_event(Device& dev) {
  Event e;
  EXPECT_STATUS(Status::Success, dev.event_create(&e));
  return e;
}

// A device buffer of n uint32 words, zeroed.
inline uint32_t* new_buffer(Device& dev, size_t n, MemCategory cat = MemCategory::Other) {
  void* p = nullptr;
  EXPECT_STATUS(Status::Success, dev.malloc(&p, n * sizeof(uint32_t), cat));
  EXPECT_STATUS(Status::Success, dev.memset(p, 0, n * sizeof(uint32_t)));
  return static_cast<uint32_t*>(p);
}

// Reads a device buffer back with a synchronous copy (as portable code must).
inline std::vector<uint32_t> read_back(Device& dev, const uint32_t* p, size_t n) {
  std::vector<uint32_t> host(n, 0xDEADBEEF);
  EXPECT_STATUS(Status::Success, dev.memcpy(host.data(), p, n * sizeof(uint32_t), CopyKind::DeviceToHost));
  return host;
}

inline uint32_t read_word(Device& dev, const uint32_t* p) { return read_back(dev, p, 1)[0]; }

// Records a fresh event on `from` and makes `to` wait on it: `to` joins `from`'s capture, if any.
// Returns the first call that did not succeed, so a caller can ASSERT_OK the whole step.
inline Status fork_stream(Device& dev, Stream from, Stream to) {
  Event e = new_event(dev);
  Status st = dev.event_record(e, from);
  return st == Status::Success ? dev.stream_wait_event(to, e) : st;
}

// The fixture of most sim tests: a fresh sim device and two non-blocking streams on it.
class TwoStreams : public ::testing::Test {
 protected:
  std::unique_ptr<Device> dev = make_sim();
  Stream s1 = new_stream(*dev);
  Stream s2 = new_stream(*dev);
};

inline size_t node_count(Device& dev, Graph g) {
  size_t n = 0;
  EXPECT_STATUS(Status::Success, dev.graph_node_count(g, &n));
  return n;
}

}  // namespace recap::device::simtest
