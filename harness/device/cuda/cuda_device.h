// The `cuda` backend: the CUDA runtime itself, behind the Device interface.
#pragma once

#include <memory>
#include <string>

#include "harness/device/device.h"

namespace recap::device::cuda {

// Whether a CUDA device can be used; when not, *why says why (the CUDA error name).
bool usable(std::string* why);
// cudaGetDeviceCount, or -1 with *why (the error) when it fails.
int device_count(std::string* why);

// Makes a device on GPU 0; nullptr with *error set when that fails.
std::unique_ptr<Device> make_cuda_device(const DeviceOptions& opts, std::string* error);

}  // namespace recap::device::cuda
