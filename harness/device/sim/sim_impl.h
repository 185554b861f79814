// The `sim` device: internal declarations shared by sim_device.cpp (streams, events, memory, work),
// capture.cpp (the capture state machine and the rules for calls during capture) and graph.cpp
// (graphs, executables, replay). docs/cuda-capture-rules.md is the ground truth;
// functions are named after its rules.
//
// One mutex guards everything: every public call takes it, and work bodies (kernels' host bodies,
// host functions) run under it. As in CUDA, a host function must not call the device: such a call
// returns NotSupported (CUDA's is cudaErrorNotPermitted, which Status does not name) instead of
// deadlocking.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "harness/device/accounting.h"
#include "harness/device/device.h"
#include "harness/device/sim/explore.h"
#include "harness/device/sim/initcheck.h"
#include "harness/device/sim/sim_device.h"

namespace recap::device::sim {

// A host thread's identity, never reused. ThreadKey values are recycled once a thread
// exits, which would hand a new thread the dead one's capture-interaction mode, last error and
// per-thread stream; CUDA's per-thread state dies with its thread.
using ThreadKey = uint64_t;  // 0: no thread
inline ThreadKey this_thread_key() {
  static std::atomic<ThreadKey> next{1};
  thread_local const ThreadKey key = next.fetch_add(1);
  return key;
}

// What an operation is, wherever it goes: run eagerly as a work item, or recorded as a graph node.
enum class OpKind { Kernel, Memcpy, Memset, HostFunc, EventWait, MemAlloc, MemFree, Marker };

struct Op {
  OpKind kind = OpKind::Marker;
  std::string name;  // kernel name; for markers what they mark ("event record")
  std::vector<Access> reads, writes;
  std::function<void()> body;  // what running it does (kernel host body, the copy, the host function)
  void* ptr = nullptr;         // memcpy/memset destination, memory-node address
  size_t bytes = 0;
  uint64_t event = 0;  // EventWait: the event whose last eager record each launch waits for
};

// A graph node: an operation plus its edges (indices of earlier nodes, so creation order is a
// topological order) and the stream it was captured from.
struct Node {
  Op op;
  std::vector<size_t> deps;
  uint64_t captured_on = 0;  // internal stream id
};

class SimDevice final : public Device {
 public:
  explicit SimDevice(const DeviceOptions& opts);
  ~SimDevice() override;

  Backend backend() const override { return Backend::Sim; }
  std::string name() const override { return "sim"; }

  Status stream_create(Stream* out, bool non_blocking) override;
  Status stream_destroy(Stream s) override;
  Status stream_synchronize(Stream s) override;
  Status stream_query(Stream s) override;
  Status stream_wait_event(Stream s, Event e, bool external) override;
  Status stream_get_capture_info(Stream s, CaptureStatus* status, uint64_t* id) override;

  Status event_create(Event* out) override;
  Status event_destroy(Event e) override;
  Status event_record(Event e, Stream s) override;
  Status event_query(Event e) override;
  Status event_synchronize(Event e) override;

  Status malloc(void** out, size_t bytes, MemCategory cat) override;
  Status free(void* p) override;
  Status malloc_host(void** out, size_t bytes) override;
  Status free_host(void* p) override;
  Status malloc_async(void** out, size_t bytes, Stream s, MemCategory cat) override;
  Status free_async(void* p, Stream s) override;
  Status memcpy(void* dst, const void* src, size_t bytes, CopyKind kind) override;
  Status memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) override;
  Status memset(void* p, int value, size_t bytes) override;
  Status memset_async(void* p, int value, size_t bytes, Stream s) override;
  Status mem_get_info(size_t* free_bytes, size_t* total_bytes) override;

  Status launch(const Kernel& k, Stream s) override;
  Status launch_host_func(Stream s, std::function<void()> fn) override;

  Status stream_begin_capture(Stream s, CaptureMode mode) override;
  Status stream_end_capture(Stream s, Graph* out) override;
  Status thread_exchange_capture_mode(CaptureMode* mode) override;

  Status graph_instantiate(GraphExec* out, Graph g, unsigned flags) override;
  Status graph_launch(GraphExec e, Stream s) override;
  Status graph_exec_update(GraphExec e, Graph g, GraphExecUpdateResult* result) override;
  Status graph_destroy(Graph g) override;
  Status graph_exec_destroy(GraphExec e) override;
  Status graph_node_count(Graph g, size_t* count) override;

  Status device_synchronize() override;
  Status get_last_error() override;
  Status peek_at_last_error() override;

  MemoryStats memory_stats() override;
  void reset_peak_memory() override;

  std::vector<RaceReport> races() const;
  std::optional<InitCheckSummary> init_check_summary() const;

  // The modelled device: 141 GiB (an H200), or RECAP_SIM_MEMORY_BYTES (read once; tests of what
  // running out of device memory does).
  static size_t total_bytes();

 private:
  // ---- state ----------------------------------------------------------------------------------
  struct StreamState {
    uint64_t id = 0;       // internal id: the public id, except for per-thread streams
    bool legacy = false;   // the legacy default stream
    bool blocking = false; // synchronizes implicitly with the legacy stream (created blocking, per-thread)
    std::string name;      // "stream 3", "stream 1 (thread 2)"
    WorkRef tail;          // the last eager work issued on it
    uint64_t capture = 0;  // the capture sequence it is a member of (0: none)
    uint32_t lane = 0;     // race-check lane
  };
  struct EventState {
    bool recorded = false;         // recorded at least once
    WorkRef work;                  // last eager record: the marker item it completes with
    uint64_t capture = 0;          // != 0: last recorded in that capture (captured event)
    std::vector<size_t> frontier;  // captured record: the nodes it stands for
  };
  struct CaptureState {
    uint64_t id = 0;
    uint64_t origin = 0;  // internal stream id
    CaptureMode mode = CaptureMode::Global;
    ThreadKey owner;  // the thread that began it
    bool invalidated = false;
    std::vector<uint64_t> members;  // origin first, then streams in the order they joined
    std::map<uint64_t, std::vector<size_t>> frontier;  // per member: the nodes new work depends on
    std::vector<Node> nodes;
    std::vector<void*> allocs;        // graph allocations made by this capture (alloc nodes)
    std::set<const void*> freed;      // addresses freed by free nodes of this capture
  };
  struct GraphState {
    std::vector<Node> nodes;
    std::vector<void*> allocs;  // allocations its alloc nodes make
    bool has_memory_nodes = false;
    int execs = 0;  // executables instantiated from it that still exist
  };
  struct ExecState {
    uint64_t graph = 0;  // the graph it was instantiated from
    std::vector<Node> nodes;
    unsigned flags = 0;
    std::vector<void*> allocs;      // allocations its alloc nodes make
    WorkRef last_end;               // end of its last launch: the next launch is ordered behind it
    std::map<uint64_t, uint32_t> lanes;  // race-check lane per capture stream of its nodes
  };
  enum class AllocKind { Device, StreamOrdered, Host };
  struct Allocation {  // malloc, eager malloc_async, malloc_host; present while not freed (issue order)
    size_t bytes = 0;
    AllocKind kind = AllocKind::Device;
  };
  struct GraphAllocation {  // the memory of one alloc node; its address is fixed for the graph's life
    size_t bytes = 0;
    bool freed_in_graph = false;  // a free node of the same capture frees it
    bool issued_live = false;     // a launch allocated it and no free was issued since
    int holders = 0;              // the graph and executables carrying its alloc node
  };

  // ---- plumbing (sim_device.cpp) --------------------------------------------------------------
  template <class F>
  Status call(F&& f);  // locks, runs, records a failure as the thread's last error
  StreamState* find_stream(Stream s);  // legacy, this thread's per-thread stream, or a created one
  EventState* find_event(Event e);
  std::vector<WorkRef> stream_order(const StreamState& s) const;  // what new work on s waits for
  std::vector<WorkRef> sync_targets(const StreamState& s) const;  // what synchronizing s waits for
  // The host waits until `refs` have run (a synchronize, a synchronous copy): runs pending work in
  // the scheduler's order, then records that everything issued from now on happens after them.
  void host_waits_for(const std::vector<WorkRef>& refs);
  void host_waits_for_everything();  // device-wide: every stream and every executable's launches
  // A query found `refs` complete: the host has observed them, as after a synchronize.
  void host_observed(const std::vector<WorkRef>& refs);
  bool all_done(const std::vector<WorkRef>& refs) const;
  WorkRef issue(const std::vector<WorkRef>& deps, uint32_t lane, const Op& op, const std::string& where,
                std::function<void()> body);
  void issue_on_stream(StreamState& s, const Op& op, std::vector<WorkRef> extra_deps = {});
  Status issue_on_legacy_and_wait(const Op& op);
  Status enqueue(StreamState& s, Op op);  // eager work item, or a node when s captures
  Status check_copy_args(const void* dst, const void* src, size_t bytes, CopyKind kind) const;
  bool fits(size_t bytes) const;
  // Execution-time memory effects (run inside work items, in stream order).
  void run_free(void* p, size_t bytes, bool stream_ordered);  // a device allocation ends
  void run_graph_alloc(void* p);
  void run_graph_free(void* p);
  void maybe_release_graph_allocation(const void* p);
  static std::string what(const Op& op);

  // ---- capture rules (capture.cpp) -------------------------------------------------------------
  CaptureState* capture_of(const StreamState& s);
  // An event last recorded in a capture that has ended or been invalidated: query, synchronize and
  // wait return InvalidValue (checked before the barred-thread rule; measured on the H200).
  bool event_unusable(const EventState& ev) const;
  CaptureState* active_capture_of(const EventState& ev);  // the Active capture it was recorded in
  Status allocate_device_block(void** out, size_t bytes, AllocKind kind, MemCategory cat);
  Status check_host_event_access(EventState* ev);
  Status check_host_stream_access(StreamState* st);
  CaptureMode thread_mode() const;
  // The reference's "who may make potentially unsafe calls": the captures that bar the calling
  // thread (empty when it may make the call).
  std::vector<uint64_t> captures_barring_unsafe_call() const;
  // Returns 900 and invalidates the barring captures when the calling thread is barred.
  Status refuse_unsafe_call();
  // Captures with a blocking member: legacy-stream work would implicitly depend on them.
  std::vector<uint64_t> captures_with_blocking_member() const;
  // Returns 906 and invalidates those captures for work on the legacy stream while one exists.
  Status refuse_implicit_legacy_dependency();
  // Work on `s`: refuse_implicit_legacy_dependency() when `s` is the legacy stream, else Success.
  Status refuse_if_legacy(const StreamState& s) {
    return s.legacy ? refuse_implicit_legacy_dependency() : Status::Success;
  }
  void invalidate(uint64_t capture_id);
  void invalidate_all_captures();
  // Ends a capture sequence: every member leaves; without a graph its allocations are released.
  void terminate(uint64_t capture_id, bool graph_made);
  bool all_forks_joined(const CaptureState& c) const;
  void add_node(CaptureState& c, StreamState& s, Op op);
  Status capture_event_wait(StreamState& s, uint64_t event_id, EventState& ev, bool external);
  Status capture_malloc_async(CaptureState& c, StreamState& s, void** out, size_t bytes);
  Status capture_free_async(CaptureState& c, StreamState& s, void* p);

  // ---- graphs (graph.cpp) ----------------------------------------------------------------------
  Status launch_exec(ExecState& ex, uint64_t exec_id, StreamState& s);
  static std::optional<GraphExecUpdateResult> update_mismatch(const std::vector<Node>& have,
                                                              const std::vector<Node>& want);
  void hold_allocations(const std::vector<void*>& allocs);
  void drop_allocations(const std::vector<void*>& allocs);

  // ---- members ---------------------------------------------------------------------------------
  mutable std::mutex mu_;
  std::atomic<ThreadKey> running_work_on_{0};  // the thread running a work body, if any
  bool inside_work() const { return running_work_on_.load() == this_thread_key(); }
  DeviceOptions opts_;
  Scheduler sched_;
  std::unique_ptr<RaceChecker> race_;  // null unless opts_.race_check
  VectorClock host_clock_;             // race check: the work the host has seen complete
  std::unique_ptr<InitChecker> init_;  // null unless opts_.init_check
  HostArena arena_;
  MemoryLedger ledger_;

  std::map<uint64_t, StreamState> streams_;  // by internal id; legacy is 0
  std::map<ThreadKey, uint64_t> per_thread_stream_;
  std::map<uint64_t, EventState> events_;
  std::map<uint64_t, CaptureState> captures_;  // captures in progress (Active or Invalidated)
  std::map<uint64_t, GraphState> graphs_;
  std::map<uint64_t, ExecState> execs_;
  std::unordered_map<const void*, Allocation> allocations_;
  std::unordered_map<const void*, GraphAllocation> graph_allocs_;
  std::map<ThreadKey, CaptureMode> thread_modes_;  // absent: Global (CUDA's default)
  std::map<ThreadKey, Status> last_error_;         // cudaGetLastError is per host thread

  uint64_t next_stream_ = 2;  // 0 legacy, 1 per-thread
  uint64_t next_per_thread_ = 0;
  uint64_t next_event_ = 1, next_capture_ = 1, next_graph_ = 1, next_exec_ = 1;
  int64_t pool_live_ = 0, pool_peak_ = 0;    // stream-ordered (eager malloc_async) bytes
  int64_t graph_live_ = 0, graph_peak_ = 0;  // graph memory-node bytes
};

}  // namespace recap::device::sim

namespace recap::device::sim {

template <class F>
Status SimDevice::call(F&& f) {
  if (inside_work()) return Status::NotSupported;  // a host function calling the device
  std::lock_guard<std::mutex> lock(mu_);
  Status s = f();
  // Every failing call sets the thread's last error, sticky until read; NotReady is not an error.
  if (s != Status::Success && s != Status::NotReady) last_error_[this_thread_key()] = s;
  return s;
}

}  // namespace recap::device::sim
