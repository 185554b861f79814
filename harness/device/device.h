// The device layer: one interface over two backends.
//
//   sim   a CPU model of CUDA's stream, event, capture, graph and memory rules
//         (docs/cuda-capture-rules.md is its ground truth)
//   cuda  the CUDA runtime itself
//
// Calls mirror the CUDA runtime one for one (the comment on each names the call it stands for) and
// return the same error codes, so that one program run on both backends can be compared call by
// call. The device layer knows nothing of layers, training or RapidCheck.
//
// Pointers returned by malloc/malloc_async are device pointers: on `cuda` they must never be
// dereferenced by the host; move data with memcpy. Code that runs on both backends keeps to that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/base/names.h"
#include "harness/device/memory.h"
#include "harness/device/status.h"

namespace recap::device {

enum class Backend { Sim, Cuda };
inline constexpr EnumName<Backend> kBackendNames[] = {{Backend::Sim, "sim"}, {Backend::Cuda, "cuda"}};
inline std::string backend_name(Backend b) { return name_of(kBackendNames, b); }

// Values equal cudaStreamCaptureMode's.
enum class CaptureMode : int { Global = 0, ThreadLocal = 1, Relaxed = 2 };
inline constexpr EnumName<CaptureMode> kCaptureModeNames[] = {
    {CaptureMode::Global, "global"}, {CaptureMode::ThreadLocal, "thread-local"}, {CaptureMode::Relaxed, "relaxed"}};
inline std::string capture_mode_name(CaptureMode m) { return name_of(kCaptureModeNames, m); }

// Values equal cudaStreamCaptureStatus's.
enum class CaptureStatus : int { None = 0, Active = 1, Invalidated = 2 };
inline constexpr EnumName<CaptureStatus> kCaptureStatusNames[] = {
    {CaptureStatus::None, "none"}, {CaptureStatus::Active, "active"}, {CaptureStatus::Invalidated, "invalidated"}};
inline std::string capture_status_name(CaptureStatus s) { return name_of(kCaptureStatusNames, s); }

enum class CopyKind : int { HostToHost = 0, HostToDevice = 1, DeviceToHost = 2, DeviceToDevice = 3, Default = 4 };

// Values equal cudaGraphExecUpdateResult's.
enum class GraphExecUpdateResult : int {
  Success = 0,
  Error = 1,
  ErrorTopologyChanged = 2,
  ErrorNodeTypeChanged = 3,
  ErrorFunctionChanged = 4,
  ErrorParametersChanged = 5,
  ErrorNotSupported = 6,
  ErrorUnsupportedFunctionChange = 7,
  ErrorAttributesChanged = 8,
};

// Handles are plain ids, the same shape on both backends. Id 0 is never a valid created object.
struct Stream {
  uint64_t id = 0;
  static constexpr uint64_t kLegacy = 0;     // the legacy default stream (cudaStreamLegacy / 0)
  static constexpr uint64_t kPerThread = 1;  // cudaStreamPerThread
  static Stream legacy() { return Stream{kLegacy}; }
  static Stream per_thread() { return Stream{kPerThread}; }
  bool operator==(const Stream&) const = default;
};
struct Event {
  uint64_t id = 0;
  bool operator==(const Event&) const = default;
};
struct Graph {
  uint64_t id = 0;
  bool operator==(const Graph&) const = default;
};
struct GraphExec {
  uint64_t id = 0;
  bool operator==(const GraphExec&) const = default;
};

// cudaGraphInstantiate flags.
constexpr unsigned kGraphInstantiateAutoFreeOnLaunch = 1;

// A byte range a kernel reads or writes. Declared so that `sim` can check for races between
// streams and explore orders of work; the cuda backend ignores them.
struct Access {
  const void* ptr = nullptr;
  size_t bytes = 0;
};

// A kernel is a portable description of one launch: its name, the buffers it touches, and a body
// for each backend. Pointers are captured by value in the bodies, which is exactly why a graph
// replays with the pointers baked in at capture.
struct Kernel {
  std::string name;
  std::vector<Access> reads;
  std::vector<Access> writes;
  // sim: runs on the host when the launch executes (eagerly, or at each replay of a graph).
  std::function<void()> host;
  // cuda: enqueues the kernel on the given cudaStream_t and returns the launch's cudaError_t
  // (cudaLaunchKernel's result). Empty when recap was built without CUDA.
  std::function<int(void* cuda_stream)> gpu;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual Backend backend() const = 0;
  virtual std::string name() const = 0;  // "sim" or the GPU's name ("NVIDIA H200")
  // The GPU's identity (cudaDeviceProp uuid as nvidia-smi writes it, "GPU-..."; its PCI bus id,
  // "00000000:19:00.0"); "" on sim. --gpus records which GPU a job ran on from these.
  virtual std::string uuid() const { return ""; }
  virtual std::string pci_bus_id() const { return ""; }

  // ---- streams --------------------------------------------------------------------------
  // cudaStreamCreateWithFlags(cudaStreamNonBlocking or cudaStreamDefault). A blocking stream
  // synchronizes implicitly with the legacy default stream.
  virtual Status stream_create(Stream* out, bool non_blocking) = 0;
  virtual Status stream_destroy(Stream s) = 0;              // cudaStreamDestroy
  virtual Status stream_synchronize(Stream s) = 0;          // cudaStreamSynchronize
  virtual Status stream_query(Stream s) = 0;                // cudaStreamQuery (Success or NotReady)
  // cudaStreamWaitEvent; external = cudaEventWaitExternal.
  virtual Status stream_wait_event(Stream s, Event e, bool external = false) = 0;
  // cudaStreamGetCaptureInfo: status and the capture sequence id (0 when None).
  virtual Status stream_get_capture_info(Stream s, CaptureStatus* status, uint64_t* id) = 0;
  Status stream_is_capturing(Stream s, CaptureStatus* status) {  // cudaStreamIsCapturing
    uint64_t id = 0;
    return stream_get_capture_info(s, status, &id);
  }

  // ---- events ---------------------------------------------------------------------------
  virtual Status event_create(Event* out) = 0;                // cudaEventCreateWithFlags(DisableTiming)
  virtual Status event_destroy(Event e) = 0;                  // cudaEventDestroy
  virtual Status event_record(Event e, Stream s) = 0;         // cudaEventRecord
  virtual Status event_query(Event e) = 0;                    // cudaEventQuery
  virtual Status event_synchronize(Event e) = 0;              // cudaEventSynchronize
  // The GPU's own clock (recap tradeoff's step times): an event with timing (cudaEventCreate) and
  // the milliseconds between two such events once both completed (cudaEventElapsedTime). A
  // backend without a device clock (sim) answers NotSupported and callers use the host clock.
  virtual Status timing_event_create(Event* out) {
    (void)out;
    return Status::NotSupported;
  }
  virtual Status event_elapsed_ms(Event start, Event end, float* ms) {
    (void)start, (void)end, (void)ms;
    return Status::NotSupported;
  }

  // ---- memory ---------------------------------------------------------------------------
  virtual Status malloc(void** out, size_t bytes, MemCategory cat) = 0;   // cudaMalloc
  virtual Status free(void* p) = 0;                                       // cudaFree
  virtual Status malloc_host(void** out, size_t bytes) = 0;               // cudaMallocHost (pinned)
  virtual Status free_host(void* p) = 0;                                  // cudaFreeHost
  // cudaMallocAsync / cudaFreeAsync. During capture they become graph memory nodes and the
  // bytes are accounted to MemCategory::GraphPool whatever `cat` says.
  virtual Status malloc_async(void** out, size_t bytes, Stream s, MemCategory cat) = 0;
  virtual Status free_async(void* p, Stream s) = 0;
  virtual Status memcpy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;  // cudaMemcpy
  virtual Status memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) = 0;
  virtual Status memset(void* p, int value, size_t bytes) = 0;                       // cudaMemset
  virtual Status memset_async(void* p, int value, size_t bytes, Stream s) = 0;       // cudaMemsetAsync
  virtual Status mem_get_info(size_t* free_bytes, size_t* total_bytes) = 0;          // cudaMemGetInfo

  // ---- work -----------------------------------------------------------------------------
  virtual Status launch(const Kernel& k, Stream s) = 0;                              // <<<...>>>
  virtual Status launch_host_func(Stream s, std::function<void()> fn) = 0;           // cudaLaunchHostFunc

  // ---- capture --------------------------------------------------------------------------
  virtual Status stream_begin_capture(Stream s, CaptureMode mode) = 0;    // cudaStreamBeginCapture
  virtual Status stream_end_capture(Stream s, Graph* out) = 0;            // cudaStreamEndCapture
  // cudaThreadExchangeStreamCaptureMode: sets the calling thread's mode, returns the old one.
  virtual Status thread_exchange_capture_mode(CaptureMode* mode) = 0;

  // ---- graphs ---------------------------------------------------------------------------
  virtual Status graph_instantiate(GraphExec* out, Graph g, unsigned flags = 0) = 0;
  virtual Status graph_launch(GraphExec e, Stream s) = 0;
  virtual Status graph_exec_update(GraphExec e, Graph g, GraphExecUpdateResult* result) = 0;
  virtual Status graph_destroy(Graph g) = 0;
  virtual Status graph_exec_destroy(GraphExec e) = 0;
  virtual Status graph_node_count(Graph g, size_t* count) = 0;            // cudaGraphGetNodes

  // ---- device-wide ----------------------------------------------------------------------
  virtual Status device_synchronize() = 0;   // cudaDeviceSynchronize
  virtual Status get_last_error() = 0;       // cudaGetLastError: returns and clears
  virtual Status peek_at_last_error() = 0;   // cudaPeekAtLastError

  // ---- accounting -----------------------------------------------------------------------
  virtual MemoryStats memory_stats() = 0;
  virtual void reset_peak_memory() = 0;  // peaks := current live bytes
};

// ---- choosing a backend -------------------------------------------------------------------
enum class BackendChoice { Sim, Cuda, Auto };
inline constexpr EnumName<BackendChoice> kBackendChoiceNames[] = {
    {BackendChoice::Sim, "sim"}, {BackendChoice::Cuda, "cuda"}, {BackendChoice::Auto, "auto"}};
inline bool parse_backend_choice(const std::string& text, BackendChoice* out) {
  return from_name(kBackendChoiceNames, text, out);
}

// Whether this binary was built with the CUDA backend.
bool cuda_compiled();
// Whether a usable GPU is present; when not, *why says why ("built without CUDA", "no CUDA
// device: cudaErrorNoDevice", ...).
bool cuda_usable(std::string* why);
// The CUDA devices this process sees (cudaGetDeviceCount, which honours CUDA_VISIBLE_DEVICES), or
// -1 with *why when that cannot be known (built without CUDA, the driver's error).
int cuda_device_count(std::string* why);

struct DeviceOptions {
  // sim only: 0 runs work in program order as it is issued; any other value runs pending work
  // on different streams in a seeded interleaving that respects only real dependencies.
  uint64_t explore_seed = 0;
  // sim only: report unordered accesses to one buffer from different streams (one a write).
  bool race_check = false;
  // sim only: report kernels and copies that read device memory no work wrote since it was
  // allocated (compute-sanitizer initcheck's rule; harness/device/sim/initcheck.h).
  bool init_check = false;
  // cuda only: freed eager blocks are kept (after the next device-wide synchronization) and handed
  // out again for requests of the same bytes, across the devices of one process, instead of
  // cudaFree and cudaMalloc, which wait for the whole device. Allocations and frees while a
  // capture is open on the device are CUDA's own. The ledger's figures are unchanged; the process
  // holds up to 2 GiB more than the ledger says. Campaign runs turn it on (block_cache_wanted).
  bool block_cache = false;
};

// Whether campaign runs use DeviceOptions::block_cache: yes unless RECAP_CUDA_BLOCK_CACHE=0. With 16
// processes on one H200, cudaFree's device-wide waits were 65% of a case's time (docs/profile.md);
// the sanitizer's runs turn it off (initcheck and use-after-free need every block really freed).
bool block_cache_wanted();

// Makes a device. Auto picks cuda when usable, else sim. Returns nullptr and sets *error when the
// choice cannot be honoured (cuda asked for but not usable).
std::unique_ptr<Device> make_device(BackendChoice choice, const DeviceOptions& opts, std::string* error);

}  // namespace recap::device
