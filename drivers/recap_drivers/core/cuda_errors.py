"""CUDA errors by name: the cudaError enumerator a failure's message names (or implies), the CUDA
API it names, and the errors after which the context is unusable (sticky)."""

from __future__ import annotations

import re

_CUDA_ERROR_STRINGS = {
    "operation not permitted when stream is capturing": "cudaErrorStreamCaptureUnsupported",
    "operation failed due to a previous error during capture": "cudaErrorStreamCaptureInvalidated",
    "capture was not initiated in this stream": "cudaErrorStreamCaptureUnmatched",
    "capture sequence contains a merge of two independent capture sequences": "cudaErrorStreamCaptureMerge",
    "the capture sequence contains a fork that was not joined to the primary stream": "cudaErrorStreamCaptureUnjoined",
    "contains a fork that was not joined": "cudaErrorStreamCaptureUnjoined",
    "dependency created on uncaptured work in another stream": "cudaErrorStreamCaptureIsolation",
    "would make the legacy stream depend on a capturing blocking stream": "cudaErrorStreamCaptureImplicit",
    "not permitted on an event last recorded in a capturing stream": "cudaErrorCapturedEvent",
    "attempt to terminate a thread-local capture sequence from another thread": "cudaErrorStreamCaptureWrongThread",
    "an illegal memory access was encountered": "cudaErrorIllegalAddress",
    "out of memory": "cudaErrorMemoryAllocation",
    "invalid argument": "cudaErrorInvalidValue",
    "device-side assert triggered": "cudaErrorAssert",
}
STICKY = {"cudaErrorIllegalAddress", "cudaErrorAssert", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
           "cudaErrorMisalignedAddress"}


def one_line(s: str, limit: int = 1000) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def cuda_error_name(message: str) -> str:
    m = re.search(r"\b(cudaError[A-Za-z]+)\b", message)
    if m:
        return m.group(1)
    low = message.lower()
    for k, v in _CUDA_ERROR_STRINGS.items():
        if k in low and ("cuda" in low or "captur" in low):
            return v
    return ""


# What a worker reports as an exhausted allocator besides cudaErrorMemoryAllocation (PROTOCOL.md,
# "observation"): torch's class for it; the CPU allocator raises a RuntimeError with this text.
OUT_OF_MEMORY = ("cudaErrorMemoryAllocation", "OutOfMemoryError")


def host_out_of_memory(message: str) -> str:
    """"OutOfMemoryError" when torch's CPU allocator refused an allocation (a RuntimeError, torch
    2.11: "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes. Error code 12
    (Cannot allocate memory)"), else ""."""
    return "OutOfMemoryError" if "DefaultCPUAllocator: can't allocate memory" in message else ""


def cuda_api_name(message: str) -> str:
    for m in re.finditer(r"\b(cuda[A-Z][A-Za-z]+)\b", message):
        if not m.group(1).startswith("cudaError"):
            return m.group(1)
    return ""


def root_exception(e: BaseException) -> BaseException:
    """The first exception of an implicit chain (a failed capture's capture_end in __exit__ raises
    a second one whose __context__ is the cause)."""
    seen = set()
    while e.__context__ is not None and not e.__suppress_context__ and id(e) not in seen:
        seen.add(id(e))
        e = e.__context__
    return e
