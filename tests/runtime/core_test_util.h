// Shared fixture and helpers for the runtime core tests (allocator, generator, tracker, ledger,
// context). Every test is parameterized on the backend: runtime_core_test instantiates them on
// `sim` (label unit), runtime_core_gpu_test on `cuda` (label gpu; each case skips where no GPU is
// usable). The tests only touch device memory through the device API (memcpy), so they mean the
// same thing on both backends.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "harness/device/device.h"
#include "harness/device/status.h"
#include "harness/runtime/philox.h"

namespace recap::device {
// Names the backend in gtest's messages ("where GetParam() = sim").
inline void PrintTo(BackendChoice b, std::ostream* os) {
  *os << (b == BackendChoice::Sim ? "sim" : b == BackendChoice::Cuda ? "cuda" : "auto");
}
}  // namespace recap::device

namespace recap::runtime::coretest {

#define CORE_EXPECT_STATUS(expected, call) \
  EXPECT_EQ(::recap::device::error_name(call), ::recap::device::error_name(expected))
#define CORE_ASSERT_STATUS(expected, call) \
  ASSERT_EQ(::recap::device::error_name(call), ::recap::device::error_name(expected))
#define CORE_ASSERT_OK(call) CORE_ASSERT_STATUS(::recap::device::Status::Success, call)
#define CORE_EXPECT_OK(call) CORE_EXPECT_STATUS(::recap::device::Status::Success, call)

// The first n values of Philox stream (seed, offset): what a generator at that state draws.
inline std::vector<uint32_t> philox_values(uint64_t seed, uint64_t offset, size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = philox_value(seed, offset, i);
  return v;
}

class CoreTest : public ::testing::TestWithParam<device::BackendChoice> {
 public:  // helpers are used by free functions of the tests too
  void SetUp() override {
    if (GetParam() == device::BackendChoice::Cuda) {
      std::string why;
      if (!device::cuda_usable(&why)) GTEST_SKIP() << "no GPU: " << why;
    }
    std::string error;
    dev_ = device::make_device(GetParam(), device::DeviceOptions{}, &error);
    ASSERT_NE(dev_, nullptr) << error;
    CORE_ASSERT_OK(dev_->stream_create(&stream_, /*non_blocking=*/true));
  }
  void TearDown() override {
    if (dev_) {
      dev_->device_synchronize();
      dev_->stream_destroy(stream_);
    }
  }

  device::Device& dev() { return *dev_; }
  device::Stream stream() const { return stream_; }

  // The calling thread's capture-interaction mode (exchanged and put back).
  device::CaptureMode thread_mode() {
    device::CaptureMode m = device::CaptureMode::Global;
    EXPECT_TRUE(device::ok(dev_->thread_exchange_capture_mode(&m)));
    device::CaptureMode back = m;
    EXPECT_TRUE(device::ok(dev_->thread_exchange_capture_mode(&back)));
    return m;
  }

  device::CaptureStatus capture_status() {
    device::CaptureStatus st = device::CaptureStatus::None;
    EXPECT_TRUE(device::ok(dev_->stream_is_capturing(stream_, &st)));
    return st;
  }

  // Captures body() on the fixture's stream (Global mode) and instantiates it. Fails the test
  // (and returns an empty exec) if any step fails.
  device::GraphExec capture(const std::function<void()>& body) {
    device::GraphExec exec;
    if (!device::ok(dev_->stream_begin_capture(stream_, device::CaptureMode::Global))) {
      ADD_FAILURE() << "begin capture failed";
      return exec;
    }
    body();
    device::Graph g;
    device::Status s = dev_->stream_end_capture(stream_, &g);
    if (!device::ok(s)) {
      ADD_FAILURE() << "end capture: " << device::error_name(s);
      return exec;
    }
    s = dev_->graph_instantiate(&exec, g);
    if (!device::ok(s)) ADD_FAILURE() << "instantiate: " << device::error_name(s);
    graphs_.push_back(g);
    return exec;
  }

  // A device buffer of n T's (freed by the device at teardown of the fixture's device).
  template <typename T>
  T* buffer(size_t n) {
    void* p = nullptr;
    EXPECT_TRUE(device::ok(dev_->malloc(&p, n * sizeof(T), device::MemCategory::Other)));
    EXPECT_TRUE(device::ok(dev_->memset(p, 0, n * sizeof(T))));
    return static_cast<T*>(p);
  }

  template <typename T>
  std::vector<T> read(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(device::ok(dev_->memcpy(v.data(), p, n * sizeof(T), device::CopyKind::DeviceToHost)));
    return v;
  }

  std::unique_ptr<device::Device> dev_;
  device::Stream stream_;
  std::vector<device::Graph> graphs_;
};

}  // namespace recap::runtime::coretest
