// Graphs and executable graphs: instantiate, launch (replay), exec update, destroy.
#include <algorithm>

#include "harness/device/sim/sim_impl.h"

namespace recap::device::sim {
namespace {

std::vector<size_t> sorted(std::vector<size_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

Status SimDevice::graph_instantiate(GraphExec* out, Graph g, unsigned flags) {
  return call([&] {
    if (out == nullptr) return Status::InvalidValue;
    auto git = graphs_.find(g.id);
    if (git == graphs_.end()) return Status::InvalidResourceHandle;
    if ((flags & ~kGraphInstantiateAutoFreeOnLaunch) != 0) return Status::InvalidValue;
    // A potentially unsafe call: the barred-thread rule applies (measured on the H200).
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;
    GraphState& gs = git->second;
    // A graph with memory nodes may have only one executable at a time (cudaGraphInstantiate's
    // documentation; measured on the H200 for unfreed and for freed allocations, and allowed again
    // once the first executable is destroyed).
    if (gs.has_memory_nodes && gs.execs > 0) return Status::NotSupported;
    ExecState ex;
    ex.graph = g.id;
    ex.nodes = gs.nodes;
    ex.flags = flags;
    ex.allocs = gs.allocs;
    hold_allocations(ex.allocs);
    gs.execs += 1;
    uint64_t id = next_exec_++;
    execs_.emplace(id, std::move(ex));
    *out = GraphExec{id};
    return Status::Success;
  });
}

Status SimDevice::graph_launch(GraphExec e, Stream s) {
  return call([&] {
    auto eit = execs_.find(e.id);
    if (eit == execs_.end()) return Status::InvalidResourceHandle;
    StreamState* st = find_stream(s);
    if (st == nullptr) return Status::InvalidResourceHandle;
    if (Status r = refuse_if_legacy(*st); !ok(r)) return r;
    ExecState& ex = eit->second;
    // Launched into a capturing stream: 900 and invalidation in every mode (measured on the H200).
    if (CaptureState* c = capture_of(*st)) {
      invalidate(c->id);
      return Status::StreamCaptureUnsupported;
    }
    return launch_exec(ex, e.id, *st);
  });
}

// A replay: every node becomes a work item ordered by the graph's edges, behind earlier work on the
// launch stream and the executable's previous launch. Kernels run the closures captured (or set by
// exec update), so they touch the pointers baked in at capture.
Status SimDevice::launch_exec(ExecState& ex, uint64_t exec_id, StreamState& s) {
  bool auto_free = (ex.flags & kGraphInstantiateAutoFreeOnLaunch) != 0;
  // An allocation of the previous launch still live: InvalidValue, unless AutoFreeOnLaunch (then
  // the alloc node frees and re-allocates it at the same address).
  for (void* p : ex.allocs) {
    const GraphAllocation& ga = graph_allocs_.at(p);
    if (!ga.freed_in_graph && ga.issued_live && !auto_free) return Status::InvalidValue;
  }

  std::vector<WorkRef> deps = stream_order(s);
  deps.push_back(ex.last_end);
  Op start;
  start.name = "graph launch";
  WorkRef start_ref = issue(deps, s.lane, start, s.name, nullptr);

  std::string where = s.name + " (graph exec " + std::to_string(exec_id) + ")";
  std::vector<WorkRef> refs(ex.nodes.size());
  for (size_t i = 0; i < ex.nodes.size(); ++i) {
    const Node& n = ex.nodes[i];
    std::vector<WorkRef> nd;
    for (size_t d : n.deps) nd.push_back(refs[d]);
    if (n.deps.empty()) nd.push_back(start_ref);
    std::function<void()> body = n.op.body;
    switch (n.op.kind) {
      case OpKind::EventWait: {  // waits for the event's last eager record as of this launch
        auto ev = events_.find(n.op.event);
        if (ev != events_.end() && ev->second.capture == 0) nd.push_back(ev->second.work);
        break;
      }
      case OpKind::MemAlloc:
        body = [this, p = n.op.ptr] { run_graph_alloc(p); };
        break;
      case OpKind::MemFree:
        body = [this, p = n.op.ptr] { run_graph_free(p); };
        break;
      default:
        break;
    }
    // One race-check lane per capture stream of this executable: its nodes are ordered within one
    // launch by the capture frontier, and across launches by the launch order.
    auto [lane, fresh] = ex.lanes.try_emplace(n.captured_on, 0);
    if (fresh && race_) lane->second = race_->new_lane();
    refs[i] = issue(nd, lane->second, n.op, where, std::move(body));
    if (n.op.kind == OpKind::MemFree && race_) race_->forget(n.op.ptr, n.op.bytes);
  }

  // Issue-order memory state: this launch allocates its unfreed allocations and frees whatever its
  // free nodes free.
  for (void* p : ex.allocs) {
    GraphAllocation& ga = graph_allocs_.at(p);
    if (!ga.freed_in_graph) ga.issued_live = true;
  }
  for (const Node& n : ex.nodes) {
    if (n.op.kind != OpKind::MemFree) continue;
    auto it = graph_allocs_.find(n.op.ptr);
    if (it != graph_allocs_.end() && !it->second.freed_in_graph) it->second.issued_live = false;
  }

  std::vector<WorkRef> end_deps{start_ref};
  end_deps.insert(end_deps.end(), refs.begin(), refs.end());
  Op end;
  end.name = "graph launch end";
  WorkRef end_ref = issue(end_deps, s.lane, end, s.name, nullptr);
  s.tail = end_ref;
  ex.last_end = end_ref;
  return Status::Success;
}

// Why `want` cannot be written into an executable made from `have`, or nothing when it can. The
// topology (node count and edges) must match; node types too; kernels, host functions, copy and
// set addresses and values, and memory-node addresses may change; sizes may not.
std::optional<GraphExecUpdateResult> SimDevice::update_mismatch(const std::vector<Node>& have,
                                                                const std::vector<Node>& want) {
  if (have.size() != want.size()) return GraphExecUpdateResult::ErrorTopologyChanged;
  for (size_t i = 0; i < have.size(); ++i)
    if (sorted(have[i].deps) != sorted(want[i].deps)) return GraphExecUpdateResult::ErrorTopologyChanged;
  for (size_t i = 0; i < have.size(); ++i)
    if (have[i].op.kind != want[i].op.kind) return GraphExecUpdateResult::ErrorNodeTypeChanged;
  for (size_t i = 0; i < have.size(); ++i) {
    const Op& a = have[i].op;
    const Op& b = want[i].op;
    switch (a.kind) {
      case OpKind::MemAlloc:
      case OpKind::MemFree:
      case OpKind::Memcpy:
      case OpKind::Memset:
        if (a.bytes != b.bytes) return GraphExecUpdateResult::ErrorParametersChanged;
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

Status SimDevice::graph_exec_update(GraphExec e, Graph g, GraphExecUpdateResult* result) {
  return call([&] {
    if (result == nullptr) return Status::InvalidValue;
    auto eit = execs_.find(e.id);
    auto git = graphs_.find(g.id);
    if (eit == execs_.end() || git == graphs_.end()) return Status::InvalidResourceHandle;
    ExecState& ex = eit->second;
    if (auto mismatch = update_mismatch(ex.nodes, git->second.nodes)) {
      *result = *mismatch;
      return Status::GraphExecUpdateFailure;
    }
    // Same topology: the executable takes the new graph's operations (kernel closures, so the
    // pointers they were captured with) and, measured on the H200, its memory nodes' addresses:
    // its launches now allocate what the new graph's alloc nodes allocate. Edges and race-check
    // lanes stay the executable's.
    for (size_t i = 0; i < ex.nodes.size(); ++i) ex.nodes[i].op = git->second.nodes[i].op;
    std::vector<void*> old_allocs = ex.allocs;
    ex.allocs = git->second.allocs;
    hold_allocations(ex.allocs);
    drop_allocations(old_allocs);
    *result = GraphExecUpdateResult::Success;
    return Status::Success;
  });
}

Status SimDevice::graph_destroy(Graph g) {
  return call([&] {
    auto it = graphs_.find(g.id);
    if (it == graphs_.end()) return Status::InvalidResourceHandle;
    std::vector<void*> allocs = it->second.allocs;
    graphs_.erase(it);
    drop_allocations(allocs);
    return Status::Success;
  });
}

Status SimDevice::graph_exec_destroy(GraphExec e) {
  return call([&] {
    auto it = execs_.find(e.id);
    if (it == execs_.end()) return Status::InvalidResourceHandle;
    if (Status r = refuse_unsafe_call(); !ok(r)) return r;  // measured: barred like cudaFree
    host_waits_for({it->second.last_end});  // destruction: its launches complete
    auto git = graphs_.find(it->second.graph);
    if (git != graphs_.end()) git->second.execs -= 1;
    std::vector<void*> allocs = it->second.allocs;
    execs_.erase(it);
    drop_allocations(allocs);
    return Status::Success;
  });
}

void SimDevice::hold_allocations(const std::vector<void*>& allocs) {
  for (void* p : allocs) graph_allocs_.at(p).holders += 1;
}

void SimDevice::drop_allocations(const std::vector<void*>& allocs) {
  for (void* p : allocs) {
    graph_allocs_.at(p).holders -= 1;
    maybe_release_graph_allocation(p);
  }
}

Status SimDevice::graph_node_count(Graph g, size_t* count) {
  return call([&] {
    if (count == nullptr) return Status::InvalidValue;
    auto it = graphs_.find(g.id);
    if (it == graphs_.end()) return Status::InvalidResourceHandle;
    *count = it->second.nodes.size();
    return Status::Success;
  });
}

}  // namespace recap::device::sim
