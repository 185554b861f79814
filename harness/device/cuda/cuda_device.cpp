// The `cuda` backend: every Device call is the CUDA runtime call its comment in device.h names,
// and returns that call's cudaError_t as a Status (same number, never collapsed).
//
// Handles: recap's ids map to CUDA objects through one table per kind (streams, events, graphs,
// executables). Ids are never reused, so a stale or unknown id is InvalidResourceHandle rather
// than undefined behaviour, as it is for a destroyed CUDA handle.
//
// Accounting: the MemoryLedger gets the same figures `sim` computes for the same program. Eager
// allocations are accounted when the call succeeds. Allocations and frees made on a capturing
// stream are graph memory nodes: they are recorded per capture sequence (keyed by the id
// cudaStreamGetCaptureInfo reports), move to the Graph at end of capture and to the GraphExec at
// instantiation, and are applied to the ledger (category GraphPool) when a launch succeeds.
//
// Errors found before reaching CUDA (unknown id, null out-pointer) are also made the thread's last
// error, as sim records every failing call. The allocator counters in memory_stats() are read in
// Relaxed capture mode, since those queries invalidate a Global capture otherwise.
#include "harness/device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "harness/base/profile.h"
#include "harness/device/accounting.h"

namespace recap::device::cuda {
namespace {

// cudaError_t and Status share their numbers; codes Status does not name keep their value.
Status to_status(cudaError_t e) { return static_cast<Status>(static_cast<int>(e)); }

std::string describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

// One graph memory node, in capture (issue) order.
struct MemOp {
  enum class Kind { Alloc, Free };
  Kind kind;
  void* ptr;
  int64_t bytes;  // Alloc only
};
using MemOps = std::vector<MemOp>;

// The closure behind a cudaLaunchHostFunc. An eager one deletes itself after it runs; one captured
// into a graph runs once per replay, so the device keeps it until it is destroyed.
struct HostFn {
  std::function<void()> fn;
  bool delete_after_run = false;
};

void CUDART_CB run_host_fn(void* data) {
  auto* h = static_cast<HostFn*>(data);
  h->fn();
  if (h->delete_after_run) delete h;
}

// A teardown step that failed: the destructor cannot return it, so it says so on stderr.
void teardown_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "recap cuda: teardown: %s failed: %s\n", what, describe(e).c_str());
}

// Sets the calling thread's capture mode to Relaxed for its lifetime, then restores it.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { ok_ = cudaThreadExchangeStreamCaptureMode(&saved_) == cudaSuccess; }
  ~RelaxedCaptureMode() {
    if (ok_) (void)cudaThreadExchangeStreamCaptureMode(&saved_);  // cannot fail: saved_ is valid
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;
  bool ok() const { return ok_; }

 private:
  cudaStreamCaptureMode saved_ = cudaStreamCaptureModeRelaxed;
  bool ok_ = false;
};

// Device blocks of exact sizes kept across runs of one process (DeviceOptions::block_cache).
// cudaFree waits for the whole device, and on a GPU shared by several campaign processes that
// wait was most of a case's time (issue 21: alloc_ms 39% of a case with one job, 65% with 16).
// A block enters the cache only after a device-wide synchronization that follows its free (see
// CudaDevice::pending_), so no kernel of any stream can still use it; it is handed out again only
// for the same byte count, so compute-sanitizer's bounds are those of the request. Bounded: a
// block that would take it past kCacheLimit first frees every cached block.
class BlockCache {
 public:
  static BlockCache& get() {
    static BlockCache* c = new BlockCache();  // never destroyed: the CUDA context outlives main
    return *c;
  }
  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(bytes);
    if (it == blocks_.end()) return nullptr;
    void* p = it->second;
    blocks_.erase(it);
    held_ -= bytes;
    return p;
  }
  // A block past kCacheLimit empties the cache first (sizes not asked for again must not hold it full).
  void put(void* p, size_t bytes) {
    if (bytes > kCacheLimit) return teardown_check(cudaFree(p), "cudaFree (block cache)");
    if (held() + bytes > kCacheLimit) release();
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.emplace(bytes, p);
    held_ += bytes;
  }
  // Frees every cached block (a failed cudaMalloc retries after this).
  void release() {
    std::vector<void*> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [n, p] : blocks_) all.push_back(p);
      blocks_.clear();
      held_ = 0;
    }
    for (void* p : all) teardown_check(cudaFree(p), "cudaFree (block cache)");
  }
  size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }

 private:
  static constexpr size_t kCacheLimit = size_t{2} << 30;
  std::mutex mu_;
  std::multimap<size_t, void*> blocks_;  // bytes -> block
  size_t held_ = 0;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(bool block_cache) : block_cache_(block_cache) {}
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  // Binds GPU 0 and creates the stream-ordered pool; returns an error message, empty on success.
  std::string init() {
    cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) return "cudaSetDevice(0): " + describe(e);
    cudaDeviceProp prop{};
    e = cudaGetDeviceProperties(&prop, device_);
    if (e != cudaSuccess) return "cudaGetDeviceProperties(0): " + describe(e);
    name_ = prop.name;
    // The device's identity as nvidia-smi and torch name it (--gpus: which GPU a job observed)
    char uuid[64];
    const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                  u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    uuid_ = uuid;
    char bus[32];
    std::snprintf(bus, sizeof bus, "%08x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    pci_bus_id_ = bus;
    // A pool of our own, so that its counters measure recap's stream-ordered allocations only.
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    e = cudaMemPoolCreate(&pool_, &props);
    if (e != cudaSuccess) {
      pool_ = nullptr;
      return "cudaMemPoolCreate: " + describe(e);
    }
    // Graph memory counters are device-wide: start this device's peak from what is in use now.
    RelaxedCaptureMode relaxed;  // legal even while another device's capture is open
    uint64_t zero = 0;
    e = cudaDeviceSetGraphMemAttribute(device_, cudaGraphMemAttrUsedMemHigh, &zero);
    if (e != cudaSuccess) return "cudaDeviceSetGraphMemAttribute: " + describe(e);
    // A new device starts with no pending error, as a new sim device does.
    (void)cudaGetLastError();
    ready_ = true;
    return "";
  }

  ~CudaDevice() override { teardown(); }

  Backend backend() const override { return Backend::Cuda; }
  std::string name() const override { return name_; }
  std::string uuid() const override { return uuid_; }
  std::string pci_bus_id() const override { return pci_bus_id_; }

  // ---- streams --------------------------------------------------------------------------
  Status stream_create(Stream* out, bool non_blocking) override {
    if (out == nullptr) return refuse(Status::InvalidValue);
    cudaStream_t st = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&st, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault);
    if (e != cudaSuccess) return to_status(e);
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = next_stream_id_++;
    streams_[id] = st;
    *out = Stream{id};
    return Status::Success;
  }

  Status stream_destroy(Stream s) override {
    if (s.id == Stream::kLegacy || s.id == Stream::kPerThread) return refuse(Status::InvalidResourceHandle);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    cudaError_t e = cudaStreamDestroy(st);
    if (e == cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu_);
      streams_.erase(s.id);
    }
    return to_status(e);
  }

  Status stream_synchronize(Stream s) override {
    profile::Scope prof(profile::kSync);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaStreamSynchronize(st));
  }

  Status stream_query(Stream s) override {
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaStreamQuery(st));
  }

  Status stream_wait_event(Stream s, Event ev, bool external) override {
    cudaStream_t st = nullptr;
    cudaEvent_t ce = nullptr;
    if (!find_stream(s, &st) || !find_event(ev, &ce)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaStreamWaitEvent(st, ce, external ? cudaEventWaitExternal : cudaEventWaitDefault));
  }

  Status stream_get_capture_info(Stream s, CaptureStatus* status, uint64_t* id) override {
    if (status == nullptr || id == nullptr) return refuse(Status::InvalidValue);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    unsigned long long cid = 0;
    cudaError_t e = cudaStreamGetCaptureInfo(st, &cs, &cid);
    if (e != cudaSuccess) return to_status(e);
    *status = static_cast<CaptureStatus>(static_cast<int>(cs));
    *id = cs == cudaStreamCaptureStatusNone ? 0 : static_cast<uint64_t>(cid);  // CUDA leaves it unset then
    return Status::Success;
  }

  // ---- events ---------------------------------------------------------------------------
  Status event_create(Event* out) override {
    if (out == nullptr) return refuse(Status::InvalidValue);
    cudaEvent_t ce = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ce, cudaEventDisableTiming);
    if (e != cudaSuccess) return to_status(e);
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = next_event_id_++;
    events_[id] = ce;
    *out = Event{id};
    return Status::Success;
  }

  Status timing_event_create(Event* out) override {
    if (out == nullptr) return refuse(Status::InvalidValue);
    cudaEvent_t ce = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ce, cudaEventDefault);  // timing on
    if (e != cudaSuccess) return to_status(e);
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = next_event_id_++;
    events_[id] = ce;
    *out = Event{id};
    return Status::Success;
  }

  Status event_elapsed_ms(Event start, Event end, float* ms) override {
    cudaEvent_t a = nullptr, b = nullptr;
    if (ms == nullptr) return refuse(Status::InvalidValue);
    if (!find_event(start, &a) || !find_event(end, &b)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaEventElapsedTime(ms, a, b));
  }

  Status event_destroy(Event ev) override {
    cudaEvent_t ce = nullptr;
    if (!find_event(ev, &ce)) return refuse(Status::InvalidResourceHandle);
    cudaError_t e = cudaEventDestroy(ce);
    if (e == cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.erase(ev.id);
    }
    return to_status(e);
  }

  Status event_record(Event ev, Stream s) override {
    cudaStream_t st = nullptr;
    cudaEvent_t ce = nullptr;
    if (!find_stream(s, &st) || !find_event(ev, &ce)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaEventRecord(ce, st));
  }

  Status event_query(Event ev) override {
    cudaEvent_t ce = nullptr;
    if (!find_event(ev, &ce)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaEventQuery(ce));
  }

  Status event_synchronize(Event ev) override {
    profile::Scope prof(profile::kSync);
    cudaEvent_t ce = nullptr;
    if (!find_event(ev, &ce)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaEventSynchronize(ce));
  }

  // ---- memory ---------------------------------------------------------------------------
  Status malloc(void** out, size_t bytes, MemCategory cat) override {
    profile::Scope prof(profile::kAlloc);
    if (out == nullptr) return refuse(Status::InvalidValue);
    void* p = cached_block(bytes);
    cudaError_t e = p != nullptr ? cudaSuccess : cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation && block_cache_ && BlockCache::get().held() > 0) {
      (void)cudaGetLastError();  // the cache's blocks were what filled the device: give them back, try again
      BlockCache::get().release();
      e = cudaMalloc(&p, bytes);
    }
    if (e != cudaSuccess) return to_status(e);
    // cudaMalloc(0) succeeds with a null pointer: nothing to account.
    if (p != nullptr) {
      ledger_.on_alloc(p, static_cast<int64_t>(bytes), cat);
      std::lock_guard<std::mutex> lock(mu_);
      eager_allocs_.insert(p);
    }
    *out = p;
    return Status::Success;
  }

  Status free(void* p) override {
    profile::Scope prof(profile::kAlloc);
    if (cache_free(p)) return Status::Success;
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) return to_status(e);
    // Also ends a graph allocation freed outside its graph.
    ledger_.on_free(p);
    std::lock_guard<std::mutex> lock(mu_);
    eager_allocs_.erase(p);
    return Status::Success;
  }

  Status malloc_host(void** out, size_t bytes) override {
    if (out == nullptr) return refuse(Status::InvalidValue);
    void* p = nullptr;
    cudaError_t e = cudaMallocHost(&p, bytes);
    if (e != cudaSuccess) return to_status(e);
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      host_allocs_.insert(p);
    }
    *out = p;
    return Status::Success;
  }

  Status free_host(void* p) override {
    cudaError_t e = cudaFreeHost(p);
    if (e != cudaSuccess) return to_status(e);
    std::lock_guard<std::mutex> lock(mu_);
    host_allocs_.erase(p);
    return Status::Success;
  }

  Status malloc_async(void** out, size_t bytes, Stream s, MemCategory cat) override {
    profile::Scope prof(profile::kAlloc);
    if (out == nullptr) return refuse(Status::InvalidValue);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    void* p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool_, st);
    if (e != cudaSuccess) return to_status(e);
    *out = p;
    if (p == nullptr) return Status::Success;
    unsigned long long cid = 0;
    if (capture_id(st, &cid)) {
      // A graph allocation node: live only once a launch of the graph executes.
      std::lock_guard<std::mutex> lock(mu_);
      captures_[cid].push_back(MemOp{MemOp::Kind::Alloc, p, static_cast<int64_t>(bytes)});
      graph_allocs_.insert(p);
      return Status::Success;
    }
    ledger_.on_alloc(p, static_cast<int64_t>(bytes), cat);
    std::lock_guard<std::mutex> lock(mu_);
    eager_allocs_.insert(p);
    return Status::Success;
  }

  Status free_async(void* p, Stream s) override {
    profile::Scope prof(profile::kAlloc);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    cudaError_t e = cudaFreeAsync(p, st);
    if (e != cudaSuccess) return to_status(e);
    unsigned long long cid = 0;
    if (capture_id(st, &cid)) {
      // A graph free node: takes effect when a launch of the graph executes.
      std::lock_guard<std::mutex> lock(mu_);
      captures_[cid].push_back(MemOp{MemOp::Kind::Free, p, 0});
      return Status::Success;
    }
    ledger_.on_free(p);
    std::lock_guard<std::mutex> lock(mu_);
    eager_allocs_.erase(p);
    return Status::Success;
  }

  Status memcpy(void* dst, const void* src, size_t bytes, CopyKind kind) override {
    profile::Scope prof(kind == CopyKind::HostToDevice   ? profile::kH2D
                        : kind == CopyKind::DeviceToHost ? profile::kD2H
                                                         : nullptr);
    return to_status(cudaMemcpy(dst, src, bytes, static_cast<cudaMemcpyKind>(static_cast<int>(kind))));
  }

  Status memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) override {
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaMemcpyAsync(dst, src, bytes, static_cast<cudaMemcpyKind>(static_cast<int>(kind)), st));
  }

  Status memset(void* p, int value, size_t bytes) override { return to_status(cudaMemset(p, value, bytes)); }

  Status memset_async(void* p, int value, size_t bytes, Stream s) override {
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    return to_status(cudaMemsetAsync(p, value, bytes, st));
  }

  Status mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    if (free_bytes == nullptr || total_bytes == nullptr) return refuse(Status::InvalidValue);
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    // The block cache's idle blocks are free for any run of this process: "used" stays the runs' own.
    if (e == cudaSuccess) *free_bytes = std::min(*total_bytes, *free_bytes + BlockCache::get().held());
    return to_status(e);
  }

  // ---- work -----------------------------------------------------------------------------
  Status launch(const Kernel& k, Stream s) override {
    profile::Scope prof(profile::kLaunch);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    if (!k.gpu) return refuse(Status::InvalidValue);  // a kernel with no CUDA body cannot run here
    return static_cast<Status>(k.gpu(static_cast<void*>(st)));
  }

  Status launch_host_func(Stream s, std::function<void()> fn) override {
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    // Decide ownership before enqueueing: an eager closure may run (and delete itself) at once.
    // Only a launch known to be eager deletes itself; any other is kept until teardown.
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    bool eager = cudaStreamGetCaptureInfo(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone;
    auto* h = new HostFn{std::move(fn), eager};
    cudaError_t e = cudaLaunchHostFunc(st, run_host_fn, h);
    if (e != cudaSuccess) {
      delete h;  // never enqueued
      return to_status(e);
    }
    if (!eager) {
      std::lock_guard<std::mutex> lock(mu_);
      kept_host_fns_.emplace_back(h);
    }
    return Status::Success;
  }

  // ---- capture --------------------------------------------------------------------------
  Status stream_begin_capture(Stream s, CaptureMode mode) override {
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    cudaError_t e = cudaStreamBeginCapture(st, static_cast<cudaStreamCaptureMode>(static_cast<int>(mode)));
    if (e != cudaSuccess) return to_status(e);
    // Remember the id now: once the capture is invalidated CUDA reports its id as 0.
    unsigned long long cid = 0;
    if (capture_id(st, &cid)) {
      std::lock_guard<std::mutex> lock(mu_);
      origin_capture_[s.id] = cid;
    }
    return Status::Success;
  }

  Status stream_end_capture(Stream s, Graph* out) override {
    if (out == nullptr) return refuse(Status::InvalidValue);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(st, &g);
    std::lock_guard<std::mutex> lock(mu_);
    // The memory nodes recorded under the capture begun on this stream. End on a stream that
    // did not begin a capture (cudaErrorStreamCaptureUnmatched) leaves that capture's record be.
    MemOps ops;
    auto origin = origin_capture_.find(s.id);
    if (origin != origin_capture_.end()) {
      auto it = captures_.find(origin->second);
      if (it != captures_.end()) {
        ops = std::move(it->second);
        captures_.erase(it);
      }
      origin_capture_.erase(origin);  // ended, or failed for good: no graph can come of it
    }
    if (e != cudaSuccess || g == nullptr) {
      *out = Graph{};  // CUDA returns no graph
      return to_status(e);
    }
    uint64_t id = next_graph_id_++;
    graphs_[id] = GraphEntry{g, std::move(ops)};
    *out = Graph{id};
    return Status::Success;
  }

  Status thread_exchange_capture_mode(CaptureMode* mode) override {
    if (mode == nullptr) return refuse(Status::InvalidValue);
    auto m = static_cast<cudaStreamCaptureMode>(static_cast<int>(*mode));
    cudaError_t e = cudaThreadExchangeStreamCaptureMode(&m);
    if (e == cudaSuccess) *mode = static_cast<CaptureMode>(static_cast<int>(m));
    return to_status(e);
  }

  // ---- graphs ---------------------------------------------------------------------------
  Status graph_instantiate(GraphExec* out, Graph g, unsigned flags) override {
    if (out == nullptr) return refuse(Status::InvalidValue);
    cudaGraph_t cg = nullptr;
    MemOps ops;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = graphs_.find(g.id);
      if (it == graphs_.end()) return refuse(Status::InvalidResourceHandle);
      cg = it->second.graph;
      ops = it->second.ops;
    }
    cudaGraphExec_t ce = nullptr;
    cudaError_t e = cudaGraphInstantiate(&ce, cg, static_cast<unsigned long long>(flags));
    if (e != cudaSuccess) return to_status(e);
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = next_exec_id_++;
    execs_[id] = ExecEntry{ce, std::move(ops)};
    *out = GraphExec{id};
    return Status::Success;
  }

  Status graph_launch(GraphExec ex, Stream s) override {
    profile::Scope prof(profile::kLaunch);
    cudaStream_t st = nullptr;
    if (!find_stream(s, &st)) return refuse(Status::InvalidResourceHandle);
    cudaGraphExec_t ce = nullptr;
    MemOps ops;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = execs_.find(ex.id);
      if (it == execs_.end()) return refuse(Status::InvalidResourceHandle);
      ce = it->second.exec;
      ops = it->second.ops;
    }
    cudaError_t e = cudaGraphLaunch(ce, st);
    if (e != cudaSuccess) return to_status(e);  // refused: the ledger is unchanged
    if (ops.empty()) return Status::Success;
    unsigned long long cid = 0;
    if (capture_id(st, &cid)) {
      // Launched into a capture: its memory nodes would act when that graph launches. (CUDA 13
      // refuses this for a graph with memory nodes, 900, so it is only here for completeness.)
      std::lock_guard<std::mutex> lock(mu_);
      auto& rec = captures_[cid];
      rec.insert(rec.end(), ops.begin(), ops.end());
      return Status::Success;
    }
    apply_graph_mem_ops(ops);
    return Status::Success;
  }

  Status graph_exec_update(GraphExec ex, Graph g, GraphExecUpdateResult* result) override {
    if (result == nullptr) return refuse(Status::InvalidValue);
    cudaGraphExec_t ce = nullptr;
    cudaGraph_t cg = nullptr;
    MemOps ops;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto ei = execs_.find(ex.id);
      auto gi = graphs_.find(g.id);
      if (ei == execs_.end() || gi == graphs_.end()) {
        *result = GraphExecUpdateResult::Error;
        return refuse(Status::InvalidResourceHandle);
      }
      ce = ei->second.exec;
      cg = gi->second.graph;
      ops = gi->second.ops;
    }
    cudaGraphExecUpdateResultInfo info{};
    cudaError_t e = cudaGraphExecUpdate(ce, cg, &info);
    *result = static_cast<GraphExecUpdateResult>(static_cast<int>(info.result));
    if (e == cudaSuccess) {
      // The executable now runs the new graph's nodes, memory nodes included.
      std::lock_guard<std::mutex> lock(mu_);
      auto ei = execs_.find(ex.id);
      if (ei != execs_.end()) ei->second.ops = std::move(ops);
    }
    return to_status(e);
  }

  Status graph_destroy(Graph g) override {
    cudaGraph_t cg = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = graphs_.find(g.id);
      if (it == graphs_.end()) return refuse(Status::InvalidResourceHandle);
      cg = it->second.graph;
    }
    cudaError_t e = cudaGraphDestroy(cg);
    // Allocations a launch left live stay live (CUDA keeps them until they are freed).
    if (e == cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu_);
      graphs_.erase(g.id);
    }
    return to_status(e);
  }

  Status graph_exec_destroy(GraphExec ex) override {
    cudaGraphExec_t ce = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = execs_.find(ex.id);
      if (it == execs_.end()) return refuse(Status::InvalidResourceHandle);
      ce = it->second.exec;
    }
    cudaError_t e = cudaGraphExecDestroy(ce);
    if (e == cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu_);
      execs_.erase(ex.id);
    }
    return to_status(e);
  }

  Status graph_node_count(Graph g, size_t* count) override {
    if (count == nullptr) return refuse(Status::InvalidValue);
    cudaGraph_t cg = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = graphs_.find(g.id);
      if (it == graphs_.end()) return refuse(Status::InvalidResourceHandle);
      cg = it->second.graph;
    }
    size_t n = 0;
    cudaError_t e = cudaGraphGetNodes(cg, nullptr, &n);
    if (e == cudaSuccess) *count = n;
    return to_status(e);
  }

  // ---- device-wide ----------------------------------------------------------------------
  Status device_synchronize() override {
    profile::Scope prof(profile::kSync);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) settle_pending();
    return to_status(e);
  }
  Status get_last_error() override { return to_status(cudaGetLastError()); }
  Status peek_at_last_error() override { return to_status(cudaPeekAtLastError()); }

  // ---- accounting -----------------------------------------------------------------------
  // The allocator's counters are "potentially unsafe" calls for CUDA: made from a thread whose
  // capture mode is not Relaxed while a capture is open, they fail with 900 and invalidate it
  // (seen on an H200). The queries therefore run in Relaxed mode, so that reading the stats
  // never disturbs a capture, whichever thread owns it.
  MemoryStats memory_stats() override {
    MemoryStats st = ledger_.stats();
    RelaxedCaptureMode relaxed;
    if (!relaxed.ok()) return st;  // counters stay -1 (unknown)
    uint64_t v = 0;  // the attributes' value type is cuuint64_t
    if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &v) == cudaSuccess)
      st.pool_used_bytes = static_cast<int64_t>(v);
    if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &v) == cudaSuccess)
      st.pool_peak_bytes = static_cast<int64_t>(v);
    if (cudaDeviceGetGraphMemAttribute(device_, cudaGraphMemAttrUsedMemCurrent, &v) == cudaSuccess)
      st.graph_mem_used_bytes = static_cast<int64_t>(v);
    if (cudaDeviceGetGraphMemAttribute(device_, cudaGraphMemAttrUsedMemHigh, &v) == cudaSuccess)
      st.graph_mem_peak_bytes = static_cast<int64_t>(v);
    return st;
  }

  void reset_peak_memory() override {
    ledger_.reset_peak();
    RelaxedCaptureMode relaxed;  // see memory_stats()
    if (!relaxed.ok()) return;
    // Setting a high watermark to 0 resets it to the current value.
    uint64_t zero = 0;
    cudaError_t e = cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero);
    if (e != cudaSuccess) std::fprintf(stderr, "recap cuda: reset pool peak: %s\n", describe(e).c_str());
    e = cudaDeviceSetGraphMemAttribute(device_, cudaGraphMemAttrUsedMemHigh, &zero);
    if (e != cudaSuccess) std::fprintf(stderr, "recap cuda: reset graph memory peak: %s\n", describe(e).c_str());
  }

 private:
  struct GraphEntry {
    cudaGraph_t graph = nullptr;
    MemOps ops;  // memory nodes captured into it
  };
  struct ExecEntry {
    cudaGraphExec_t exec = nullptr;
    MemOps ops;  // the memory nodes it runs at each launch
  };

  // An error found before reaching CUDA (an unknown handle, a null out-pointer). CUDA records
  // every error as the thread's last error, and sim does the same, so make the runtime record
  // this one too: repeat a harmless call that fails with the same code. Relaxed mode keeps the
  // call from disturbing a capture.
  static Status refuse(Status s) {
    RelaxedCaptureMode relaxed;
    if (s == Status::InvalidValue) (void)cudaStreamCreateWithFlags(nullptr, cudaStreamDefault);
    if (s == Status::InvalidResourceHandle) (void)cudaEventQuery(nullptr);
    return s;
  }

  bool find_stream(Stream s, cudaStream_t* out) {
    if (s.id == Stream::kLegacy) {
      *out = cudaStreamLegacy;
      return true;
    }
    if (s.id == Stream::kPerThread) {
      *out = cudaStreamPerThread;
      return true;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(s.id);
    if (it == streams_.end()) return false;
    *out = it->second;
    return true;
  }

  bool find_event(Event ev, cudaEvent_t* out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(ev.id);
    if (it == events_.end()) return false;
    *out = it->second;
    return true;
  }

  // Whether `st` is in an active capture sequence, and its id. Called after a call on `st`
  // succeeded, when the query itself cannot fail (a failed query would set the last error).
  static bool capture_id(cudaStream_t st, unsigned long long* id) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    unsigned long long cid = 0;
    if (cudaStreamGetCaptureInfo(st, &cs, &cid) != cudaSuccess) return false;
    if (cs != cudaStreamCaptureStatusActive) return false;
    *id = cid;
    return true;
  }

  // A launch of a graph executable succeeded: its memory nodes act now, in capture order.
  void apply_graph_mem_ops(const MemOps& ops) {
    // A relaunch only succeeds with an earlier launch's allocation still live when the
    // executable frees it on launch (AutoFreeOnLaunch): end it first, never count it twice.
    for (const MemOp& op : ops)
      if (op.kind == MemOp::Kind::Alloc && ledger_.is_live(op.ptr)) ledger_.on_free(op.ptr);
    std::lock_guard<std::mutex> lock(mu_);
    for (const MemOp& op : ops) {
      if (op.kind == MemOp::Kind::Alloc) {
        ledger_.on_alloc(op.ptr, op.bytes, MemCategory::GraphPool);
      } else {
        ledger_.on_free(op.ptr);
        eager_allocs_.erase(op.ptr);  // a free node may free an eager stream-ordered allocation
      }
    }
  }

  // Leaves the context usable for the next Device: ends captures, waits for all work, releases
  // every object and allocation this device made.
  // No other thread may use the device any more, so mu_ is held throughout.
  void teardown() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready_) {  // init failed part-way: only the pool can exist
      if (pool_ != nullptr) teardown_check(cudaMemPoolDestroy(pool_), "cudaMemPoolDestroy");
      pool_ = nullptr;
      return;
    }
    // A capture still open would make the synchronization below fail: end it, drop its graph.
    std::vector<cudaStream_t> all{cudaStreamPerThread};
    for (auto& [id, st] : streams_) all.push_back(st);
    for (cudaStream_t st : all) {
      cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
      teardown_check(cudaStreamIsCapturing(st, &cs), "cudaStreamIsCapturing");
      if (cs == cudaStreamCaptureStatusNone) continue;
      cudaGraph_t g = nullptr;
      cudaError_t e = cudaStreamEndCapture(st, &g);
      if (e == cudaSuccess && g != nullptr) teardown_check(cudaGraphDestroy(g), "cudaGraphDestroy");
    }
    (void)cudaGetLastError();  // an invalidated capture ends with an error; it is expected here
    teardown_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (auto& [id, ex] : execs_) teardown_check(cudaGraphExecDestroy(ex.exec), "cudaGraphExecDestroy");
    execs_.clear();
    for (auto& [id, g] : graphs_) teardown_check(cudaGraphDestroy(g.graph), "cudaGraphDestroy");
    graphs_.clear();
    // Graph allocations a launch left live belong to the context until freed. cudaFreeAsync
    // rather than cudaFree: compute-sanitizer reports a graph allocation freed by cudaFree as leaked.
    for (void* p : graph_allocs_)
      if (ledger_.is_live(p)) teardown_check(cudaFreeAsync(p, cudaStreamLegacy), "cudaFreeAsync (graph allocation)");
    graph_allocs_.clear();
    teardown_check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
    cache_blocks(std::exchange(pending_, {}));  // idle after the synchronization above; mu_ is held
    for (void* p : eager_allocs_) teardown_check(cudaFree(p), "cudaFree");
    eager_allocs_.clear();
    for (void* p : host_allocs_) teardown_check(cudaFreeHost(p), "cudaFreeHost");
    host_allocs_.clear();
    for (auto& [id, ce] : events_) teardown_check(cudaEventDestroy(ce), "cudaEventDestroy");
    events_.clear();
    for (auto& [id, st] : streams_) teardown_check(cudaStreamDestroy(st), "cudaStreamDestroy");
    streams_.clear();
    teardown_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    // Return graph memory to the OS so the next device's graph counters start from zero.
    teardown_check(cudaDeviceGraphMemTrim(device_), "cudaDeviceGraphMemTrim");
    if (pool_ != nullptr) teardown_check(cudaMemPoolDestroy(pool_), "cudaMemPoolDestroy");
    pool_ = nullptr;
    // No graph can replay any more: the kept host closures can go.
    for (HostFn* h : kept_host_fns_) delete h;
    kept_host_fns_.clear();
    captures_.clear();
    origin_capture_.clear();
  }

  // ---- the block cache (DeviceOptions::block_cache) ---------------------------------------
  // Whether the cache serves this call: on, and no capture open on this device (allocations and
  // frees inside a capture keep CUDA's own behaviour, errors and all).
  bool cache_serves() {
    if (!block_cache_) return false;
    std::lock_guard<std::mutex> lock(mu_);
    return origin_capture_.empty();
  }
  void* cached_block(size_t bytes) {
    if (bytes == 0 || !cache_serves()) return nullptr;
    return BlockCache::get().take(bytes);
  }
  // An eager block of this device freed into the cache: pending until a device-wide sync.
  bool cache_free(void* p) {
    if (p == nullptr || !cache_serves()) return false;
    int64_t bytes = ledger_.bytes_of(p);
    if (bytes <= 0) return false;
    std::lock_guard<std::mutex> lock(mu_);
    if (!eager_allocs_.count(p)) return false;
    ledger_.on_free(p);
    eager_allocs_.erase(p);
    pending_.push_back({p, static_cast<size_t>(bytes)});
    return true;
  }
  // After cudaDeviceSynchronize returned success: every pending block is idle. Takes mu_ (teardown,
  // which holds it, hands its pending blocks to cache_blocks itself).
  void settle_pending() {
    std::vector<std::pair<void*, size_t>> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done.swap(pending_);
    }
    cache_blocks(done);
  }
  static void cache_blocks(const std::vector<std::pair<void*, size_t>>& idle) {
    for (const auto& [p, n] : idle) BlockCache::get().put(p, n);
  }

  const bool block_cache_ = false;
  std::vector<std::pair<void*, size_t>> pending_;  // freed into the cache, awaiting a device sync
  const int device_ = 0;
  bool ready_ = false;  // init() completed
  std::string name_;
  std::string uuid_, pci_bus_id_;  // "GPU-8-4-4-4-12 hex", "00000000:19:00.0"
  cudaMemPool_t pool_ = nullptr;  // stream-ordered allocations (malloc_async) come from here
  MemoryLedger ledger_;

  std::mutex mu_;  // guards everything below; held across no blocking CUDA call but in teardown
  uint64_t next_stream_id_ = 2;  // 0 and 1 are the legacy and per-thread streams
  uint64_t next_event_id_ = 1;
  uint64_t next_graph_id_ = 1;
  uint64_t next_exec_id_ = 1;
  std::unordered_map<uint64_t, cudaStream_t> streams_;
  std::unordered_map<uint64_t, cudaEvent_t> events_;
  std::unordered_map<uint64_t, GraphEntry> graphs_;
  std::unordered_map<uint64_t, ExecEntry> execs_;
  std::unordered_map<unsigned long long, MemOps> captures_;  // memory nodes per capture id
  std::unordered_map<uint64_t, unsigned long long> origin_capture_;  // stream id -> capture it began
  std::unordered_set<void*> eager_allocs_;  // cudaMalloc / eager cudaMallocAsync, not yet freed
  std::unordered_set<void*> graph_allocs_;  // every graph allocation address seen at capture
  std::unordered_set<void*> host_allocs_;   // cudaMallocHost, not yet freed
  std::vector<HostFn*> kept_host_fns_;      // captured (or uncertain) host closures
};

}  // namespace

int device_count(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) (void)cudaGetLastError();  // not left pending for a later caller
  if (e == cudaErrorNoDevice) return 0;
  if (e != cudaSuccess) {
    if (why) *why = "cudaGetDeviceCount returned " + describe(e);
    return -1;
  }
  return count;
}

bool usable(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the failure pending for a later caller
    if (why) *why = "no usable CUDA device: cudaGetDeviceCount returned " + describe(e);
    return false;
  }
  if (count < 1) {
    if (why) *why = "no CUDA device: cudaGetDeviceCount found 0 devices";
    return false;
  }
  int pools = 0;
  e = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = "CUDA device 0 unusable: cudaDeviceGetAttribute returned " + describe(e);
    return false;
  }
  if (pools == 0) {
    if (why) *why = "CUDA device 0 does not support memory pools (cudaDevAttrMemoryPoolsSupported is 0)";
    return false;
  }
  return true;
}

std::unique_ptr<Device> make_cuda_device(const DeviceOptions& opts, std::string* error) {
  std::string why;
  if (!usable(&why)) {
    if (error) *error = why;
    return nullptr;
  }
  auto dev = std::make_unique<CudaDevice>(opts.block_cache);
  std::string err = dev->init();
  if (!err.empty()) {
    (void)cudaGetLastError();
    if (error) *error = err;
    return nullptr;
  }
  return dev;
}

}  // namespace recap::device::cuda
