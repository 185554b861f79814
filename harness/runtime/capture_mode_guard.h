// RAII over cudaThreadExchangeStreamCaptureMode, as PyTorch's CUDAStreamCaptureModeGuard: sets the
// calling thread's capture-interaction mode for a scope and restores the previous one after.
//
// The runtime wraps every cudaMalloc/cudaFree it makes on behalf of a graph (pool growth, device
// RNG pairs allocated in capture_begin) and every cudaFree of a tensor in a Relaxed guard, exactly
// as PyTorch's caching allocator does (cudaMallocMaybeCapturing), so that these calls are legal
// while this thread (or another, in Global mode) captures. A plain cudaMalloc there returns 900
// and invalidates the capture (docs/cuda-capture-rules.md).
#pragma once

#include "harness/device/device.h"

namespace recap::runtime {

class CaptureModeGuard {
 public:
  CaptureModeGuard(device::Device& dev, device::CaptureMode mode) : dev_(dev), previous_(mode) {
    status_ = dev_.thread_exchange_capture_mode(&previous_);
  }
  ~CaptureModeGuard() {
    if (device::ok(status_)) dev_.thread_exchange_capture_mode(&previous_);
  }
  CaptureModeGuard(const CaptureModeGuard&) = delete;
  CaptureModeGuard& operator=(const CaptureModeGuard&) = delete;

  // The exchange's own status (Success unless the device refused the mode).
  device::Status status() const { return status_; }

 private:
  device::Device& dev_;
  device::CaptureMode previous_;
  device::Status status_;
};

}  // namespace recap::runtime
