// make_device: picks the backend. The cuda backend exists only when built with CUDA
// (RECAP_WITH_CUDA); a binary built without it still runs everything on sim.
#include <cstdlib>
#include <string>

#include "harness/device/device.h"
#include "harness/device/sim/sim_device.h"
#ifdef RECAP_WITH_CUDA
#include "harness/device/cuda/cuda_device.h"
#endif

namespace recap::device {

bool cuda_compiled() {
#ifdef RECAP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_usable(std::string* why) {
#ifdef RECAP_WITH_CUDA
  return cuda::usable(why);
#else
  if (why) *why = "built without CUDA (RECAP_CUDA=OFF or nvcc not found)";
  return false;
#endif
}

int cuda_device_count(std::string* why) {
#ifdef RECAP_WITH_CUDA
  return cuda::device_count(why);
#else
  if (why) *why = "built without CUDA (RECAP_CUDA=OFF or nvcc not found)";
  return -1;
#endif
}

bool block_cache_wanted() {
  const char* v = std::getenv("RECAP_CUDA_BLOCK_CACHE");
  return v == nullptr || std::string(v) != "0";
}

std::unique_ptr<Device> make_device(BackendChoice choice, const DeviceOptions& opts, std::string* error) {
  if (choice == BackendChoice::Sim) return sim::make_sim_device(opts);
  std::string why;
  bool usable = cuda_usable(&why);
  if (choice == BackendChoice::Auto && !usable) return sim::make_sim_device(opts);
  if (!usable) {
    if (error) *error = "backend cuda is not usable here: " + why;
    return nullptr;
  }
#ifdef RECAP_WITH_CUDA
  return cuda::make_cuda_device(opts, error);
#else
  return nullptr;
#endif
}

}  // namespace recap::device
