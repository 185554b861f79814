// Names of the device layer's enums, and backend choice.
#include <string>

#include "harness/device/device.h"
#include "harness/device/memory.h"

namespace recap::device {

std::string backend_name(Backend b) { return b == Backend::Sim ? "sim" : "cuda"; }

std::string capture_mode_name(CaptureMode m) {
  switch (m) {
    case CaptureMode::Global: return "global";
    case CaptureMode::ThreadLocal: return "thread-local";
    case CaptureMode::Relaxed: return "relaxed";
  }
  return "unknown";
}

std::string capture_status_name(CaptureStatus s) {
  switch (s) {
    case CaptureStatus::None: return "none";
    case CaptureStatus::Active: return "active";
    case CaptureStatus::Invalidated: return "invalidated";
  }
  return "unknown";
}

namespace {
constexpr const char* kCategoryNames[kNumCategories] = {"parameters", "gradients", "activations",
                                                        "workspace",  "graph_pool", "other"};
}

std::string category_name(MemCategory c) {
  int i = static_cast<int>(c);
  return (i >= 0 && i < kNumCategories) ? kCategoryNames[i] : "unknown";
}

bool category_from_name(const std::string& name, MemCategory* out) {
  for (int i = 0; i < kNumCategories; ++i)
    if (name == kCategoryNames[i]) {
      *out = static_cast<MemCategory>(i);
      return true;
    }
  return false;
}

bool parse_backend_choice(const std::string& text, BackendChoice* out) {
  if (text == "sim") *out = BackendChoice::Sim;
  else if (text == "cuda") *out = BackendChoice::Cuda;
  else if (text == "auto") *out = BackendChoice::Auto;
  else return false;
  return true;
}

}  // namespace recap::device
