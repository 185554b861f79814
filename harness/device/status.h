// Error codes of the device layer, numbered and named exactly as the CUDA runtime names them, so
// that a report from `sim` and one from `cuda` can be compared code for code.
#pragma once

#include <string>

namespace recap::device {

enum class Status : int {
  Success = 0,
  InvalidValue = 1,                  // cudaErrorInvalidValue
  MemoryAllocation = 2,              // cudaErrorMemoryAllocation
  InsufficientDriver = 35,           // cudaErrorInsufficientDriver
  NoDevice = 100,                    // cudaErrorNoDevice
  InvalidResourceHandle = 400,       // cudaErrorInvalidResourceHandle
  IllegalState = 401,                // cudaErrorIllegalState
  NotReady = 600,                    // cudaErrorNotReady
  NotSupported = 801,                // cudaErrorNotSupported
  StreamCaptureUnsupported = 900,    // cudaErrorStreamCaptureUnsupported
  StreamCaptureInvalidated = 901,    // cudaErrorStreamCaptureInvalidated
  StreamCaptureMerge = 902,          // cudaErrorStreamCaptureMerge
  StreamCaptureUnmatched = 903,      // cudaErrorStreamCaptureUnmatched
  StreamCaptureUnjoined = 904,       // cudaErrorStreamCaptureUnjoined
  StreamCaptureIsolation = 905,      // cudaErrorStreamCaptureIsolation
  StreamCaptureImplicit = 906,       // cudaErrorStreamCaptureImplicit
  CapturedEvent = 907,               // cudaErrorCapturedEvent
  StreamCaptureWrongThread = 908,    // cudaErrorStreamCaptureWrongThread
  GraphExecUpdateFailure = 910,      // cudaErrorGraphExecUpdateFailure
  Unknown = 999,                     // cudaErrorUnknown
};

// "cudaErrorStreamCaptureUnsupported" (as cudaGetErrorName). Unknown codes: "cudaError<N>".
std::string error_name(Status s);
// "operation not permitted when stream is capturing" (as cudaGetErrorString).
std::string error_string(Status s);
// The inverse of error_name; returns false for a name it does not know.
bool status_from_name(const std::string& name, Status* out);

inline bool ok(Status s) { return s == Status::Success; }

}  // namespace recap::device
