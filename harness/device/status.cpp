#include "harness/device/status.h"

#include <array>

namespace recap::device {
namespace {

struct Entry {
  Status status;
  const char* name;
  const char* text;
};

// Names and strings as cudaGetErrorName / cudaGetErrorString return them (CUDA 13).
constexpr std::array<Entry, 20> kEntries{{
    {Status::Success, "cudaSuccess", "no error"},
    {Status::InvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {Status::MemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {Status::InsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {Status::NoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {Status::InvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {Status::IllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {Status::NotReady, "cudaErrorNotReady", "device not ready"},
    {Status::NotSupported, "cudaErrorNotSupported", "operation not supported"},
    {Status::StreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {Status::StreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {Status::StreamCaptureMerge, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {Status::StreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {Status::StreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {Status::StreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {Status::StreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {Status::CapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {Status::StreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {Status::GraphExecUpdateFailure, "cudaErrorGraphExecUpdateFailure",
     "the graph update was not performed because it included changes which violated constraints specific to "
     "instantiated graph update"},
    {Status::Unknown, "cudaErrorUnknown", "unknown error"},
}};

}  // namespace

std::string error_name(Status s) {
  for (const auto& e : kEntries)
    if (e.status == s) return e.name;
  return "cudaError" + std::to_string(static_cast<int>(s));
}

std::string error_string(Status s) {
  for (const auto& e : kEntries)
    if (e.status == s) return e.text;
  return "unrecognized error code";
}

bool status_from_name(const std::string& name, Status* out) {
  for (const auto& e : kEntries)
    if (name == e.name) {
      *out = e.status;
      return true;
    }
  return false;
}

}  // namespace recap::device
