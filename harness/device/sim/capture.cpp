// Stream capture: the state machine of docs/cuda-capture-rules.md and the rules for
// calls made while a capture is in progress.
#include <algorithm>

#include "harness/device/sim/sim_impl.h"

namespace recap::device::sim {

// ---- rules ----------------------------------------------------------------------------------

SimDevice::CaptureState* SimDevice::capture_of(const StreamState& s) {
  if (s.capture == 0) return nullptr;
  auto it = captures_.find(s.capture);
  return it == captures_.end() ? nullptr : &it->second;
}

CaptureMode SimDevice::thread_mode() const {
  auto it = thread_modes_.find(this_thread_key());
  return it == thread_modes_.end() ? CaptureMode::Global : it->second;
}

// "Thread T is barred iff T's capture-interaction mode is not Relaxed and either T owns a
// non-Relaxed active capture, or T's mode is Global and another thread owns an active Global
// capture." A capture counts while it is in progress, invalidated or not (it has not ended).
std::vector<uint64_t> SimDevice::captures_barring_unsafe_call() const {
  std::vector<uint64_t> barring;
  CaptureMode mine = thread_mode();
  if (mine == CaptureMode::Relaxed) return barring;
  ThreadKey me = this_thread_key();
  for (const auto& [id, c] : captures_) {
    bool own = c.owner == me;
    if (own && c.mode != CaptureMode::Relaxed)
      barring.push_back(id);
    else if (!own && mine == CaptureMode::Global && c.mode == CaptureMode::Global)
      barring.push_back(id);
  }
  return barring;
}

Status SimDevice::refuse_unsafe_call() {
  std::vector<uint64_t> barring = captures_barring_unsafe_call();
  if (barring.empty()) return Status::Success;
  for (uint64_t id : barring) invalidate(id);
  return Status::StreamCaptureUnsupported;
}

std::vector<uint64_t> SimDevice::captures_with_blocking_member() const {
  std::vector<uint64_t> out;
  for (const auto& [id, c] : captures_)
    for (uint64_t m : c.members) {
      auto st = streams_.find(m);
      if (st != streams_.end() && st->second.blocking) {
        out.push_back(id);
        break;
      }
    }
  return out;
}

// Legacy-stream work (synchronous memcpy/memset, kernels and async work on stream 0, querying or
// synchronizing stream 0) would make the legacy stream depend on a capturing blocking stream: 906,
// in every mode and from any thread, and the capture is invalidated.
Status SimDevice::refuse_implicit_legacy_dependency() {
  std::vector<uint64_t> blocking = captures_with_blocking_member();
  if (blocking.empty()) return Status::Success;
  for (uint64_t id : blocking) invalidate(id);
  return Status::StreamCaptureImplicit;
}

void SimDevice::invalidate(uint64_t capture_id) {
  auto it = captures_.find(capture_id);
  if (it != captures_.end()) it->second.invalidated = true;
}

void SimDevice::invalidate_all_captures() {
  for (auto& [id, c] : captures_) c.invalidated = true;
}

void SimDevice::terminate(uint64_t capture_id, bool graph_made) {
  auto it = captures_.find(capture_id);
  if (it == captures_.end()) return;
  CaptureState& c = it->second;
  for (uint64_t m : c.members) {
    auto st = streams_.find(m);
    if (st != streams_.end() && st->second.capture == capture_id) st->second.capture = 0;
  }
  if (!graph_made) {  // no graph: the addresses its alloc nodes handed out are not kept
    for (void* p : c.allocs) {
      if (init_) init_->released(p, graph_allocs_.at(p).bytes);
      graph_allocs_.erase(p);
      arena_.release(p);
    }
  }
  // Events recorded in it stay "last recorded in a capture" (their capture id no longer names a
  // capture in progress): unusable until re-recorded outside capture.
  captures_.erase(it);
}

// Unjoined fork: every member's frontier must be reachable from (or part of) the origin's.
bool SimDevice::all_forks_joined(const CaptureState& c) const {
  std::vector<bool> joined(c.nodes.size(), false);
  std::vector<size_t> todo = c.frontier.at(c.origin);
  while (!todo.empty()) {
    size_t n = todo.back();
    todo.pop_back();
    if (joined[n]) continue;
    joined[n] = true;
    for (size_t d : c.nodes[n].deps) todo.push_back(d);
  }
  for (const auto& [stream, frontier] : c.frontier) {
    if (stream == c.origin) continue;
    for (size_t n : frontier)
      if (!joined[n]) return false;
  }
  return true;
}

// Enqueue on a member stream: a node depending on that stream's frontier, which it then becomes.
void SimDevice::add_node(CaptureState& c, StreamState& s, Op op) {
  Node n;
  n.op = std::move(op);
  n.deps = c.frontier[s.id];
  n.captured_on = s.id;
  c.nodes.push_back(std::move(n));
  c.frontier[s.id] = {c.nodes.size() - 1};
}

// ---- begin / end / status -------------------------------------------------------------------

Status SimDevice::stream_begin_capture(Stream s, CaptureMode mode) {
  return call([&] {
    int m = static_cast<int>(mode);
    if (m < 0 || m > static_cast<int>(CaptureMode::Relaxed)) return Status::InvalidValue;
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    if (st->legacy) return Status::StreamCaptureUnsupported;  // begin on the legacy stream: 900
    if (st->capture != 0) return Status::IllegalState;       // already capturing; not invalidated
    CaptureState c;
    c.id = next_capture_++;
    c.origin = st->id;
    c.mode = mode;
    c.owner = this_thread_key();
    c.members = {st->id};
    c.frontier[st->id] = {};
    st->capture = c.id;
    captures_.emplace(c.id, std::move(c));
    return Status::Success;
  });
}

Status SimDevice::stream_end_capture(Stream s, Graph* out) {
  return call([&] {
    if (out == nullptr) return Status::InvalidValue;
    *out = Graph{};  // no graph unless the capture ends well
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    CaptureState* c = capture_of(*st);
    if (c == nullptr) return Status::IllegalState;  // not capturing
    // Not on the origin: 903 and invalidation; the origin stays Invalidated until ended there.
    if (st->id != c->origin) {
      invalidate(c->id);
      return Status::StreamCaptureUnmatched;
    }
    // From another thread when the mode is not Relaxed: 908, capture terminated, no graph.
    if (c->mode != CaptureMode::Relaxed && c->owner != this_thread_key()) {
      terminate(c->id, false);
      return Status::StreamCaptureWrongThread;
    }
    if (c->invalidated) {
      terminate(c->id, false);
      return Status::StreamCaptureInvalidated;
    }
    if (!all_forks_joined(*c)) {
      terminate(c->id, false);
      return Status::StreamCaptureUnjoined;
    }
    GraphState g;
    g.nodes = std::move(c->nodes);
    g.allocs = c->allocs;
    g.has_memory_nodes = std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
      return n.op.kind == OpKind::MemAlloc || n.op.kind == OpKind::MemFree;
    });
    hold_allocations(g.allocs);
    uint64_t id = next_graph_++;
    graphs_.emplace(id, std::move(g));
    terminate(c->id, true);
    *out = Graph{id};
    return Status::Success;
  });
}

Status SimDevice::stream_get_capture_info(Stream s, CaptureStatus* status, uint64_t* id) {
  return call([&] {
    if (status == nullptr || id == nullptr) return Status::InvalidValue;
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    // cudaStreamIsCapturing's documentation: on the legacy stream while a blocking stream captures,
    // 906, and "the blocking stream capture is not invalidated".
    if (st->legacy && !captures_with_blocking_member().empty()) return Status::StreamCaptureImplicit;
    CaptureState* c = capture_of(*st);
    *status = c == nullptr ? CaptureStatus::None : c->invalidated ? CaptureStatus::Invalidated : CaptureStatus::Active;
    // Measured on the H200: an invalidated capture reports id 0 (the sequence is gone; only the
    // stream's status remembers it).
    *id = (c == nullptr || c->invalidated) ? 0 : c->id;
    return Status::Success;
  });
}

Status SimDevice::thread_exchange_capture_mode(CaptureMode* mode) {
  return call([&] {
    if (mode == nullptr) return Status::InvalidValue;
    int m = static_cast<int>(*mode);
    if (m < 0 || m > static_cast<int>(CaptureMode::Relaxed)) return Status::InvalidValue;
    CaptureMode old = thread_mode();
    thread_modes_[this_thread_key()] = *mode;
    *mode = old;
    return Status::Success;
  });
}

// ---- cross-stream dependencies --------------------------------------------------------------

Status SimDevice::stream_wait_event(Stream s, Event e, bool external) {
  return call([&] {
    StreamState* st = find_stream(s);
    EventState* ev = find_event(e);
    if (st == nullptr || ev == nullptr) return Status::InvalidResourceHandle;
    return capture_event_wait(*st, e.id, *ev, external);
  });
}

bool SimDevice::event_unusable(const EventState& ev) const {
  if (ev.capture == 0) return false;
  auto it = captures_.find(ev.capture);
  return it == captures_.end() || it->second.invalidated;
}

SimDevice::CaptureState* SimDevice::active_capture_of(const EventState& ev) {
  if (ev.capture == 0 || event_unusable(ev)) return nullptr;
  return &captures_.at(ev.capture);
}

Status SimDevice::capture_event_wait(StreamState& st, uint64_t event_id, EventState& ev, bool external) {
  if (Status r = refuse_if_legacy(st); !ok(r)) return r;
  CaptureState* event_capture = active_capture_of(ev);
  // The legacy stream waiting on a captured event would depend on a capture: 906, and that
  // capture is invalidated (measured on the H200, with a non-blocking capture stream).
  if (st.legacy && event_capture != nullptr) {
    invalidate(event_capture->id);
    return Status::StreamCaptureImplicit;
  }
  CaptureState* own = capture_of(st);
  if (own != nullptr && own->invalidated) return Status::StreamCaptureInvalidated;
  // Last recorded in a capture that has ended (or been invalidated): InvalidValue; a capturing
  // waiter is invalidated too (measured on the H200).
  if (event_unusable(ev)) {
    if (own != nullptr) invalidate(own->id);
    return Status::InvalidValue;
  }
  if (own != nullptr) {
    // cudaEventWaitExternal: an event-wait node, whatever the event is.
    if (external) {
      Op op;
      op.kind = OpKind::EventWait;
      op.event = event_id;
      add_node(*own, st, std::move(op));
      return Status::Success;
    }
    if (event_capture == own) {  // a dependency inside the capture: the frontiers merge
      std::vector<size_t>& f = own->frontier[st.id];
      for (size_t n : ev.frontier)
        if (std::find(f.begin(), f.end(), n) == f.end()) f.push_back(n);
      std::sort(f.begin(), f.end());
      return Status::Success;
    }
    if (event_capture != nullptr) {  // two capture sequences would merge: 902, both invalidated
      invalidate(own->id);
      invalidate(event_capture->id);
      return Status::StreamCaptureMerge;
    }
    if (!ev.recorded) return Status::Success;  // never recorded: nothing to depend on (measured)
    invalidate(own->id);                        // uncaptured work: isolation, 905
    return Status::StreamCaptureIsolation;
  }
  if (event_capture != nullptr) {  // a stream outside any capture waits on a captured event: it joins
    st.capture = event_capture->id;
    event_capture->members.push_back(st.id);
    event_capture->frontier[st.id] = ev.frontier;
    return Status::Success;
  }
  Op marker;
  marker.name = "event wait";
  issue_on_stream(st, marker, {ev.work});
  return Status::Success;
}

// ---- graph memory nodes ---------------------------------------------------------------------

// malloc_async on a capture member: the address is handed out now and stays fixed for the graph's
// life; the bytes become live (as GraphPool) only when a launch runs the alloc node.
Status SimDevice::capture_malloc_async(CaptureState& c, StreamState& s, void** out, size_t bytes) {
  if (bytes == 0) {
    *out = nullptr;
    return Status::Success;
  }
  void* p = arena_.allocate(bytes);
  if (p == nullptr) return Status::MemoryAllocation;
  graph_allocs_[p] = GraphAllocation{bytes};
  if (init_) init_->allocated(p, bytes, "a " + std::to_string(bytes) + "-byte graph allocation (cudaMallocAsync in capture)");
  c.allocs.push_back(p);
  Op op;
  op.kind = OpKind::MemAlloc;
  op.ptr = p;
  op.bytes = bytes;
  add_node(c, s, std::move(op));
  *out = p;
  return Status::Success;
}

// free_async on a capture member: a free node. It may free an allocation of this capture, or one of
// another graph that its own graph does not free; anything else is cudaGraphAddMemFreeNode's
// InvalidValue ("not returned by an allocation node", "twice in the same graph"), and the capture
// stays Active (measured on the H200 for cudaMalloc and cudaMallocAsync memory).
Status SimDevice::capture_free_async(CaptureState& c, StreamState& s, void* p) {
  if (p == nullptr) return Status::Success;
  auto it = graph_allocs_.find(p);
  bool ours = std::find(c.allocs.begin(), c.allocs.end(), p) != c.allocs.end();
  if (it == graph_allocs_.end() || c.freed.count(p) || (!ours && it->second.freed_in_graph))
    return Status::InvalidValue;
  c.freed.insert(p);
  if (ours) it->second.freed_in_graph = true;
  Op op;
  op.kind = OpKind::MemFree;
  op.ptr = p;
  op.bytes = it->second.bytes;
  op.writes = {Access{p, op.bytes}};  // for the race check, as an eager free
  add_node(c, s, std::move(op));
  return Status::Success;
}

}  // namespace recap::device::sim
