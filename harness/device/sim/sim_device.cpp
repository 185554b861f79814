// The `sim` device: streams, events, memory, work submission, last error and accounting.
// Capture rules live in capture.cpp, graphs in graph.cpp, ordering and the race check in explore.cpp.
#include "harness/device/sim/sim_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "harness/base/profile.h"
#include "harness/device/sim/sim_impl.h"

namespace recap::device::sim {
namespace {

// Per-thread default streams get internal ids from here up; they are never valid handles.
constexpr uint64_t kPerThreadBase = uint64_t{1} << 62;

// An op that writes `bytes` bytes at dst by `body` (a copy also reads as many at a non-null src);
// with no bytes it accesses nothing and has no body.
Op write_op(OpKind kind, void* dst, size_t bytes, const void* src, std::function<void()> body) {
  Op op;
  op.kind = kind;
  op.ptr = dst;
  op.bytes = bytes;
  if (bytes > 0) {
    if (src != nullptr) op.reads = {Access{src, bytes}};
    op.writes = {Access{dst, bytes}};
    op.body = std::move(body);
  }
  return op;
}

Op copy_op(void* dst, const void* src, size_t bytes) {
  return write_op(OpKind::Memcpy, dst, bytes, src, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

Op set_op(void* p, int value, size_t bytes) {
  return write_op(OpKind::Memset, p, bytes, nullptr, [p, value, bytes] { std::memset(p, value, bytes); });
}

}  // namespace

SimDevice::SimDevice(const DeviceOptions& opts) : opts_(opts), sched_(opts.explore_seed) {
  if (opts.race_check) race_ = std::make_unique<RaceChecker>();
  if (opts.init_check) init_ = std::make_unique<InitChecker>();
  StreamState legacy;
  legacy.id = Stream::kLegacy;
  legacy.legacy = true;
  legacy.name = "stream 0";
  legacy.lane = race_ ? race_->new_lane() : 0;
  streams_.emplace(legacy.id, legacy);
}

// Pending work is dropped, not run: nobody can observe it any more, and host functions may refer to
// objects that are gone.
SimDevice::~SimDevice() { sched_.discard(); }

std::vector<RaceReport> SimDevice::races() const {
  if (inside_work()) return {};
  std::lock_guard<std::mutex> lock(mu_);
  return race_ ? race_->reports() : std::vector<RaceReport>{};
}

std::optional<InitCheckSummary> SimDevice::init_check_summary() const {
  if (inside_work() || !init_) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return init_->summary();
}

// ---- plumbing -------------------------------------------------------------------------------

SimDevice::StreamState* SimDevice::find_stream(Stream s) {
  if (s.id == Stream::kPerThread) {
    auto tid = this_thread_key();
    auto it = per_thread_stream_.find(tid);
    if (it == per_thread_stream_.end()) {
      uint64_t n = next_per_thread_++;
      StreamState st;
      st.id = kPerThreadBase + n;
      st.blocking = true;  // the per-thread stream synchronizes with the legacy stream
      st.name = "stream 1 (per-thread, thread " + std::to_string(n) + ")";
      st.lane = race_ ? race_->new_lane() : 0;
      streams_.emplace(st.id, st);
      it = per_thread_stream_.emplace(tid, st.id).first;
    }
    return &streams_.at(it->second);
  }
  if (s.id >= kPerThreadBase) return nullptr;
  auto it = streams_.find(s.id);
  return it == streams_.end() ? nullptr : &it->second;
}

SimDevice::EventState* SimDevice::find_event(Event e) {
  auto it = events_.find(e.id);
  return it == events_.end() ? nullptr : &it->second;
}

// Implicit synchronization: work on the legacy stream waits for all blocking streams; work on a
// blocking stream waits for the legacy stream; a non-blocking stream waits only for itself.
std::vector<WorkRef> SimDevice::stream_order(const StreamState& s) const {
  std::vector<WorkRef> deps{s.tail};
  if (s.legacy) {
    for (const auto& [id, t] : streams_)
      if (t.blocking) deps.push_back(t.tail);
  } else if (s.blocking) {
    deps.push_back(streams_.at(Stream::kLegacy).tail);
  }
  return deps;
}

std::vector<WorkRef> SimDevice::sync_targets(const StreamState& s) const {
  return s.legacy ? stream_order(s) : std::vector<WorkRef>{s.tail};
}

bool SimDevice::all_done(const std::vector<WorkRef>& refs) const {
  return std::all_of(refs.begin(), refs.end(), [&](const WorkRef& r) { return sched_.done(r.id); });
}

void SimDevice::host_observed(const std::vector<WorkRef>& refs) {
  if (!race_) return;
  for (const WorkRef& r : refs) {
    if (!r.clock) continue;
    if (host_clock_.size() < r.clock->size()) host_clock_.resize(r.clock->size(), 0);
    for (size_t i = 0; i < r.clock->size(); ++i) host_clock_[i] = std::max(host_clock_[i], (*r.clock)[i]);
  }
}

void SimDevice::host_waits_for(const std::vector<WorkRef>& refs) {
  std::vector<ItemId> ids;
  for (const WorkRef& r : refs) ids.push_back(r.id);
  sched_.run_until(ids);
  host_observed(refs);
}

void SimDevice::host_waits_for_everything() {
  sched_.run_all();
  std::vector<WorkRef> all;
  for (const auto& [id, st] : streams_) all.push_back(st.tail);
  for (const auto& [id, ex] : execs_) all.push_back(ex.last_end);
  host_observed(all);
}

std::string SimDevice::what(const Op& op) {
  switch (op.kind) {
    case OpKind::Kernel: return "kernel " + op.name;
    case OpKind::Memcpy: return "memcpy";
    case OpKind::Memset: return "memset";
    case OpKind::HostFunc: return "host func";
    case OpKind::EventWait: return "event wait";
    case OpKind::MemAlloc: return "mem alloc";
    case OpKind::MemFree: return "mem free";
    case OpKind::Marker: return op.name;
  }
  return "work";
}

WorkRef SimDevice::issue(const std::vector<WorkRef>& deps, uint32_t lane, const Op& op, const std::string& where,
                         std::function<void()> body) {
  WorkRef ref;
  ref.id = sched_.next_id();
  std::vector<ItemId> ids;
  std::vector<const VectorClock*> clocks;
  for (const WorkRef& d : deps) {
    if (d.id != 0) ids.push_back(d.id);
    if (d.clock) clocks.push_back(d.clock.get());
  }
  if (race_) {
    // Happens-before comes from the declared dependencies at issue time, not from the order the
    // scheduler later picks, so every seed (and seed 0) finds the same races.
    clocks.push_back(&host_clock_);  // after whatever the host has waited for
    ref.clock = race_->stamp(clocks, lane);
    if (!op.reads.empty() || !op.writes.empty())
      race_->on_access(*ref.clock, lane, AccessSite{what(op), where, ref.id}, op.reads, op.writes);
  }
  if (body && init_ && (op.kind == OpKind::Kernel || op.kind == OpKind::Memcpy || op.kind == OpKind::Memset)) {
    const char* kind = op.kind == OpKind::Kernel ? "kernel " : op.kind == OpKind::Memcpy ? "memcpy" : "memset";
    if (!sched_.exploring()) {
      // program order: the item runs inside sched_.issue below, so checking now is checking as it runs
      init_->on_run(kind, op.name, where, op.reads, op.writes);  // a copy's or memset's name is empty
    } else {
      body = [this, run = std::move(body), kind, name = op.name, where, reads = op.reads, writes = op.writes] {
        init_->on_run(kind, name, where, reads, writes);
        run();
      };
    }
  }
  if (body) {
    body = [this, run = std::move(body)] {
      profile::Scope prof(profile::kSimWork);  // sim runs the device's work on the host thread that waits
      running_work_on_ = this_thread_key();
      run();
      running_work_on_ = 0;
    };
  }
  sched_.issue(ref.id, ids, std::move(body));
  return ref;
}

void SimDevice::issue_on_stream(StreamState& s, const Op& op, std::vector<WorkRef> extra_deps) {
  std::vector<WorkRef> deps = stream_order(s);
  deps.insert(deps.end(), extra_deps.begin(), extra_deps.end());
  s.tail = issue(deps, s.lane, op, s.name, op.body);
}

// Work on a stream: refused on the legacy stream while a blocking stream captures (906); recorded as
// a node when the stream is a capture member (901 once the capture is invalidated); otherwise issued
// eagerly, which includes work on streams outside a capture while it is in progress.
Status SimDevice::enqueue(StreamState& s, Op op) {
  if (Status r = refuse_if_legacy(s); !ok(r)) return r;
  if (CaptureState* c = capture_of(s)) {
    if (c->invalidated) return Status::StreamCaptureInvalidated;
    add_node(*c, s, std::move(op));
    return Status::Success;
  }
  issue_on_stream(s, op);
  return Status::Success;
}

Status SimDevice::check_copy_args(const void* dst, const void* src, size_t bytes, CopyKind kind) const {
  int k = static_cast<int>(kind);
  if (k < 0 || k > static_cast<int>(CopyKind::Default)) return Status::InvalidValue;
  if (bytes > 0 && (dst == nullptr || src == nullptr)) return Status::InvalidValue;
  return Status::Success;
}

size_t SimDevice::total_bytes() {
  static const size_t total = [] {
    const char* e = std::getenv("RECAP_SIM_MEMORY_BYTES");
    char* end = nullptr;
    const unsigned long long v = e ? std::strtoull(e, &end, 10) : 0;
    return e && *e && end && *end == '\0' && v > 0 ? static_cast<size_t>(v) : size_t{141} << 30;
  }();
  return total;
}

bool SimDevice::fits(size_t bytes) const {
  int64_t live = ledger_.stats().live_bytes;
  return bytes <= total_bytes() && static_cast<int64_t>(bytes) <= static_cast<int64_t>(total_bytes()) - live;
}

// ---- execution-time memory effects ----------------------------------------------------------

void SimDevice::run_free(void* p, size_t bytes, bool stream_ordered) {
  if (ledger_.on_free(p) >= 0 && stream_ordered) pool_live_ -= static_cast<int64_t>(bytes);
  if (init_) init_->released(p, bytes);
  arena_.release(p);
}

void SimDevice::run_graph_alloc(void* p) {
  auto it = graph_allocs_.find(p);
  if (it == graph_allocs_.end()) return;
  int64_t bytes = static_cast<int64_t>(it->second.bytes);
  // Still live from the previous launch: only reachable with AutoFreeOnLaunch (launch refuses
  // otherwise), which frees it first and re-allocates it at the same address.
  if (ledger_.on_free(p) >= 0) graph_live_ -= bytes;
  ledger_.on_alloc(p, bytes, MemCategory::GraphPool);
  if (init_) init_->undefined(p, it->second.bytes);  // an alloc node's bytes are undefined at every launch
  graph_live_ += bytes;
  graph_peak_ = std::max(graph_peak_, graph_live_);
}

void SimDevice::run_graph_free(void* p) {
  auto it = graph_allocs_.find(p);
  if (it == graph_allocs_.end()) return;
  if (ledger_.on_free(p) >= 0) graph_live_ -= static_cast<int64_t>(it->second.bytes);
  maybe_release_graph_allocation(p);
}

// The backing goes back to the arena once no graph or executable carries the alloc node and the
// allocation is neither live nor about to be.
void SimDevice::maybe_release_graph_allocation(const void* p) {
  auto it = graph_allocs_.find(p);
  if (it == graph_allocs_.end()) return;
  if (it->second.holders > 0 || it->second.issued_live || ledger_.is_live(p)) return;
  if (init_) init_->released(p, it->second.bytes);
  arena_.release(const_cast<void*>(p));
  graph_allocs_.erase(it);
}

// ---- streams --------------------------------------------------------------------------------

Status SimDevice::stream_create(Stream* out, bool non_blocking) {
  return call([&] {
    if (out == nullptr) return Status::InvalidValue;
    StreamState st;
    st.id = next_stream_++;
    st.blocking = !non_blocking;
    st.name = "stream " + std::to_string(st.id);
    st.lane = race_ ? race_->new_lane() : 0;
    streams_.emplace(st.id, st);
    *out = Stream{st.id};
    return Status::Success;
  });
}

Status SimDevice::stream_destroy(Stream s) {
  return call([&] {
    if (s.id == Stream::kLegacy || s.id == Stream::kPerThread) return Status::InvalidResourceHandle;
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    // Measured on the H200: destroying the origin terminates its capture (no graph); a joined member
    // may be destroyed, and its captured work stays in the capture (End then finds it unjoined).
    if (CaptureState* c = capture_of(*st); c != nullptr && c->origin == st->id) terminate(c->id, false);
    host_waits_for({st->tail});  // destruction: the stream's work completes
    streams_.erase(st->id);
    return Status::Success;
  });
}

// The rules a host query or synchronize of a stream passes first.
Status SimDevice::check_host_stream_access(StreamState* st) {
  if (st == nullptr) return Status::InvalidResourceHandle;
  // "stream query/sync on the capturing stream": 900 in every mode, from any thread.
  if (CaptureState* c = capture_of(*st)) {
    invalidate(c->id);
    return Status::StreamCaptureUnsupported;
  }
  // cudaStreamQuery(0) / cudaStreamSynchronize(0) with a blocking capture stream: 906.
  if (Status r = refuse_if_legacy(*st); !ok(r)) return r;
  return refuse_unsafe_call();
}

Status SimDevice::stream_synchronize(Stream s) {
  profile::Scope prof(profile::kSync);
  return call([&] {
    StreamState* st = find_stream(s);
    if (Status r = check_host_stream_access(st); !ok(r)) return r;
    host_waits_for(sync_targets(*st));
    return Status::Success;
  });
}

Status SimDevice::stream_query(Stream s) {
  return call([&] {
    StreamState* st = find_stream(s);
    if (Status r = check_host_stream_access(st); !ok(r)) return r;
    std::vector<WorkRef> targets = sync_targets(*st);
    if (!all_done(targets)) sched_.run_some();
    if (!all_done(targets)) return Status::NotReady;
    host_observed(targets);
    return Status::Success;
  });
}

// ---- events ---------------------------------------------------------------------------------

Status SimDevice::event_create(Event* out) {
  return call([&] {
    if (out == nullptr) return Status::InvalidValue;
    uint64_t id = next_event_++;
    events_.emplace(id, EventState{});
    *out = Event{id};
    return Status::Success;
  });
}

Status SimDevice::event_destroy(Event e) {
  return call([&] { return events_.erase(e.id) ? Status::Success : Status::InvalidResourceHandle; });
}

Status SimDevice::event_record(Event e, Stream s) {
  return call([&] {
    EventState* ev = find_event(e);
    StreamState* st = find_stream(s);
    if (ev == nullptr || st == nullptr) return Status::InvalidResourceHandle;
    if (Status r = refuse_if_legacy(*st); !ok(r)) return r;
    // Recording on a member stream makes a captured event: it stands for the stream's frontier.
    if (CaptureState* c = capture_of(*st)) {
      if (c->invalidated) return Status::StreamCaptureInvalidated;
      ev->recorded = true;
      ev->capture = c->id;
      ev->frontier = c->frontier[st->id];
      ev->work = WorkRef{};
      return Status::Success;
    }
    Op marker;
    marker.name = "event record";
    issue_on_stream(*st, marker);
    ev->recorded = true;
    ev->capture = 0;
    ev->frontier.clear();
    ev->work = st->tail;
    return Status::Success;
  });
}

// The rules a host query or synchronize of an event passes first, in the order measured.
Status SimDevice::check_host_event_access(EventState* ev) {
  if (ev == nullptr) return Status::InvalidResourceHandle;
  if (event_unusable(*ev)) return Status::InvalidValue;  // before the barred-thread rule (measured)
  // An event recorded in an Active capture: 907 in every mode, and the capture is invalidated.
  if (CaptureState* c = active_capture_of(*ev)) {
    invalidate(c->id);
    return Status::CapturedEvent;
  }
  return refuse_unsafe_call();
}

Status SimDevice::event_query(Event e) {
  return call([&] {
    EventState* ev = find_event(e);
    if (Status r = check_host_event_access(ev); !ok(r)) return r;
    if (!sched_.done(ev->work.id)) sched_.run_some();
    if (!sched_.done(ev->work.id)) return Status::NotReady;
    host_observed({ev->work});
    return Status::Success;
  });
}

Status SimDevice::event_synchronize(Event e) {
  profile::Scope prof(profile::kSync);
  return call([&] {
    EventState* ev = find_event(e);
    if (Status r = check_host_event_access(ev); !ok(r)) return r;
    host_waits_for({ev->work});
    return Status::Success;
  });
}

// ---- memory ---------------------------------------------------------------------------------

// Device memory for cudaMalloc and eager cudaMallocAsync: host memory from the arena, recorded
// and accounted under `cat`. Zero bytes succeed with a null pointer (measured).
Status SimDevice::allocate_device_block(void** out, size_t bytes, AllocKind kind, MemCategory cat) {
  if (bytes == 0) {
    *out = nullptr;
    return Status::Success;
  }
  if (!fits(bytes)) return Status::MemoryAllocation;
  void* p = arena_.allocate(bytes);
  if (p == nullptr) return Status::MemoryAllocation;
  allocations_[p] = Allocation{bytes, kind};
  ledger_.on_alloc(p, static_cast<int64_t>(bytes), cat);
  if (init_)
    init_->allocated(p, bytes, "a " + std::to_string(bytes) + "-byte " +
                                   (kind == AllocKind::StreamOrdered ? "cudaMallocAsync" : "cudaMalloc") + " block (" +
                                   category_name(cat) + ")");
  *out = p;
  return Status::Success;
}

Status SimDevice::malloc(void** out, size_t bytes, MemCategory cat) {
  return call([&] {
    if (out == nullptr) return Status::InvalidValue;
    if (static_cast<int>(cat) < 0 || static_cast<int>(cat) >= kNumCategories) return Status::InvalidValue;
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;
    return allocate_device_block(out, bytes, AllocKind::Device, cat);
  });
}

Status SimDevice::free(void* p) {
  return call([&] {
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;
    if (p == nullptr) return Status::Success;
    auto it = allocations_.find(p);
    if (it != allocations_.end() && it->second.kind != AllocKind::Host) {
      host_waits_for_everything();  // cudaFree synchronizes the device
      Allocation a = it->second;
      allocations_.erase(it);
      if (race_) race_->forget(p, a.bytes);
      run_free(p, a.bytes, a.kind == AllocKind::StreamOrdered);
      return Status::Success;
    }
    // A graph allocation that a launch left live: freeing it outside the graph ends it.
    auto git = graph_allocs_.find(p);
    if (git != graph_allocs_.end() && git->second.issued_live) {
      host_waits_for_everything();
      git->second.issued_live = false;
      if (race_) race_->forget(p, git->second.bytes);
      run_graph_free(p);
      return Status::Success;
    }
    return Status::InvalidValue;
  });
}

Status SimDevice::malloc_host(void** out, size_t bytes) {
  return call([&] {
    if (out == nullptr) return Status::InvalidValue;
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;
    if (bytes == 0) {
      *out = nullptr;
      return Status::Success;
    }
    void* p = arena_.allocate(bytes);  // pinned host memory: not device memory, not in the ledger
    if (p == nullptr) return Status::MemoryAllocation;
    allocations_[p] = Allocation{bytes, AllocKind::Host};
    *out = p;
    return Status::Success;
  });
}

Status SimDevice::free_host(void* p) {
  return call([&] {
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;
    if (p == nullptr) return Status::Success;
    auto it = allocations_.find(p);
    if (it == allocations_.end() || it->second.kind != AllocKind::Host) return Status::InvalidValue;
    host_waits_for_everything();  // copies in flight may still use it
    if (race_) race_->forget(p, it->second.bytes);
    allocations_.erase(it);
    arena_.release(p);
    return Status::Success;
  });
}

Status SimDevice::malloc_async(void** out, size_t bytes, Stream s, MemCategory cat) {
  return call([&] {
    if (out == nullptr) return Status::InvalidValue;
    if (static_cast<int>(cat) < 0 || static_cast<int>(cat) >= kNumCategories) return Status::InvalidValue;
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    if (Status r = refuse_if_legacy(*st); !ok(r)) return r;
    // On a capture member it becomes an alloc node (GraphPool, whatever `cat` says).
    if (CaptureState* c = capture_of(*st)) {
      if (c->invalidated) return Status::StreamCaptureInvalidated;
      return capture_malloc_async(*c, *st, out, bytes);
    }
    // Outside capture it is a potentially unsafe call (measured on the H200, legacy or not).
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;
    // Stream-ordered allocation: accounted when issued (the pool hands out the address now).
    Status r = allocate_device_block(out, bytes, AllocKind::StreamOrdered, cat);
    if (ok(r) && *out != nullptr) {
      pool_live_ += static_cast<int64_t>(bytes);
      pool_peak_ = std::max(pool_peak_, pool_live_);
    }
    return r;
  });
}

Status SimDevice::free_async(void* p, Stream s) {
  return call([&] {
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    if (Status r = refuse_if_legacy(*st); !ok(r)) return r;
    if (CaptureState* c = capture_of(*st)) {
      if (c->invalidated) return Status::StreamCaptureInvalidated;
      return capture_free_async(*c, *st, p);
    }
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;  // as malloc_async (measured)
    if (p == nullptr) return Status::Success;
    Op op;
    op.kind = OpKind::MemFree;
    op.ptr = p;
    // A stream-ordered allocation, or (measured on the H200) one from cudaMalloc.
    auto it = allocations_.find(p);
    if (it != allocations_.end() && it->second.kind != AllocKind::Host) {
      size_t bytes = it->second.bytes;
      bool pooled = it->second.kind == AllocKind::StreamOrdered;
      allocations_.erase(it);
      op.bytes = bytes;
      op.writes = {Access{p, bytes}};  // a use on another stream not ordered before the free races with it
      op.body = [this, p, bytes, pooled] { run_free(p, bytes, pooled); };
      issue_on_stream(*st, op);
      if (race_) race_->forget(p, bytes);  // the next owner of these bytes starts afresh
      return Status::Success;
    }
    // A graph allocation left live by a launch: the free ends it, in stream order.
    auto git = graph_allocs_.find(p);
    if (git != graph_allocs_.end() && git->second.issued_live) {
      git->second.issued_live = false;
      op.bytes = git->second.bytes;
      op.writes = {Access{p, op.bytes}};
      op.body = [this, p] { run_graph_free(p); };
      issue_on_stream(*st, op);
      if (race_) race_->forget(p, op.bytes);
      return Status::Success;
    }
    return Status::InvalidValue;
  });
}

// Synchronous copies and sets go to the legacy stream, and the host waits for them.
Status SimDevice::issue_on_legacy_and_wait(const Op& op) {
  StreamState& legacy = streams_.at(Stream::kLegacy);
  issue_on_stream(legacy, op);
  host_waits_for({legacy.tail});
  return Status::Success;
}

Status SimDevice::memcpy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  profile::Scope prof(kind == CopyKind::HostToDevice ? profile::kH2D : kind == CopyKind::DeviceToHost ? profile::kD2H : nullptr);
  return call([&] {
    if (Status r = check_copy_args(dst, src, bytes, kind); !ok(r)) return r;
    // Eager during a capture, unless a blocking stream captures (906).
    if (Status r = refuse_implicit_legacy_dependency(); !ok(r)) return r;
    if (bytes == 0) return Status::Success;
    return issue_on_legacy_and_wait(copy_op(dst, src, bytes));
  });
}

Status SimDevice::memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) {
  return call([&] {
    if (Status r = check_copy_args(dst, src, bytes, kind); !ok(r)) return r;
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    return enqueue(*st, copy_op(dst, src, bytes));
  });
}

Status SimDevice::memset(void* p, int value, size_t bytes) {
  return call([&] {
    if (bytes > 0 && p == nullptr) return Status::InvalidValue;
    if (Status r = refuse_implicit_legacy_dependency(); !ok(r)) return r;
    if (bytes == 0) return Status::Success;
    return issue_on_legacy_and_wait(set_op(p, value, bytes));
  });
}

Status SimDevice::memset_async(void* p, int value, size_t bytes, Stream s) {
  return call([&] {
    if (bytes > 0 && p == nullptr) return Status::InvalidValue;
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    return enqueue(*st, set_op(p, value, bytes));
  });
}

Status SimDevice::mem_get_info(size_t* free_bytes, size_t* total_bytes) {
  return call([&] {
    if (free_bytes == nullptr || total_bytes == nullptr) return Status::InvalidValue;
    *total_bytes = SimDevice::total_bytes();
    *free_bytes = SimDevice::total_bytes() - static_cast<size_t>(ledger_.stats().live_bytes);
    return Status::Success;
  });
}

// ---- work -----------------------------------------------------------------------------------

Status SimDevice::launch(const Kernel& k, Stream s) {
  return call([&] {
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    if (!k.host) return Status::InvalidValue;  // sim runs kernels through their host body
    Op op;
    op.kind = OpKind::Kernel;
    op.name = k.name;
    op.reads = k.reads;
    op.writes = k.writes;
    op.body = k.host;  // a copy: pointers captured by value are what a replay will use
    return enqueue(*st, std::move(op));
  });
}

Status SimDevice::launch_host_func(Stream s, std::function<void()> fn) {
  return call([&] {
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    if (!fn) return Status::InvalidValue;
    Op op;
    op.kind = OpKind::HostFunc;
    op.body = std::move(fn);
    return enqueue(*st, std::move(op));
  });
}

// ---- device-wide ----------------------------------------------------------------------------

Status SimDevice::device_synchronize() {
  profile::Scope prof(profile::kSync);
  return call([&] {
    // 900 in every mode, from any thread, while any capture is in progress; all are invalidated.
    if (!captures_.empty()) {
      invalidate_all_captures();
      return Status::StreamCaptureUnsupported;
    }
    host_waits_for_everything();
    return Status::Success;
  });
}

Status SimDevice::get_last_error() {
  if (inside_work()) return Status::NotSupported;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_error_.find(this_thread_key());
  if (it == last_error_.end()) return Status::Success;
  Status s = it->second;
  last_error_.erase(it);
  return s;
}

Status SimDevice::peek_at_last_error() {
  if (inside_work()) return Status::NotSupported;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_error_.find(this_thread_key());
  return it == last_error_.end() ? Status::Success : it->second;
}

// ---- accounting -----------------------------------------------------------------------------

MemoryStats SimDevice::memory_stats() {
  if (inside_work()) return MemoryStats{};
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats s = ledger_.stats();
  s.pool_used_bytes = pool_live_;
  s.pool_peak_bytes = pool_peak_;
  s.graph_mem_used_bytes = graph_live_;
  s.graph_mem_peak_bytes = graph_peak_;
  return s;
}

void SimDevice::reset_peak_memory() {
  if (inside_work()) return;
  std::lock_guard<std::mutex> lock(mu_);
  ledger_.reset_peak();
  pool_peak_ = pool_live_;
  graph_peak_ = graph_live_;
}

// ---- public entry points --------------------------------------------------------------------

std::unique_ptr<Device> make_sim_device(const DeviceOptions& opts) { return std::make_unique<SimDevice>(opts); }

std::vector<RaceReport> races(Device& dev) {
  auto* sim = dynamic_cast<SimDevice*>(&dev);
  return sim ? sim->races() : std::vector<RaceReport>{};
}

std::optional<InitCheckSummary> init_check_summary(Device& dev) {
  auto* sim = dynamic_cast<SimDevice*>(&dev);
  return sim ? sim->init_check_summary() : std::nullopt;
}

}  // namespace recap::device::sim
