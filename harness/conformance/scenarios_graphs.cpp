// Replay and memory: baked pointers, static inputs, accumulation, replay on any stream, exec update,
// graph memory nodes (with and without AutoFreeOnLaunch), host nodes, memory accounting.
#include <iterator>

#include "harness/conformance/scenarios_internal.h"

namespace recap::conformance::detail {
namespace {

constexpr const char* kInferred = " (inferred)";

// Captures `body` on s (global mode) and returns the graph; records begin, end and node count.
device::Graph capture(Recorder& r, Stream s, const std::string& what, int nodes, const std::function<void()>& body) {
  r.begin("cudaStreamBeginCapture(s, global) [" + what + "]", s, CaptureMode::Global);
  body();
  return r.end("cudaStreamEndCapture(s) [" + what + "]", s, Status::Success, nodes);
}

void add_replay(std::vector<Scenario>& out) {
  add(out, "replay.baked_pointers",
      "Kernel arguments (pointers) are fixed at capture: rebinding the host variable afterwards has no effect; a "
      "replay reads and writes the captured addresses.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* a = r.alloc(4);
        uint32_t* b = r.alloc(4);
        uint32_t* src = r.alloc(4);
        r.upload(src, {10, 11, 12, 13});
        uint32_t* target = a;  // the "tensor" the graph writes
        device::Graph g = capture(r, s, "copy_u32(target <- src)", 1, [&] {
          r.kernel("kernel copy_u32(target=a <- src) on s", k::copy_u32(target, src, 4), s);
        });
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        target = b;  // host rebinding: the graph does not see it
        (void)target;
        r.launch("cudaGraphLaunch(exec, s) after rebinding target to b", e, s);
        r.buffer("a (the captured address) after the replay", a, 4, {10, 11, 12, 13});
        r.buffer("b (the rebound address) after the replay", b, 4, rep(4, 0));
        r.upload(src, {20, 21, 22, 23});
        r.launch("cudaGraphLaunch(exec, s) after new data in src", e, s);
        r.buffer("a after the second replay (reads src's new contents)", a, 4, {20, 21, 22, 23});
        r.buffer("b after the second replay", b, 4, rep(4, 0));
      });

  add(out, "replay.static_inputs",
      "Inputs must be copied into static buffers: each replay reads the static input's current contents and "
      "overwrites the static output.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* in = r.alloc(4);
        uint32_t* outb = r.alloc(4);
        device::Graph g = capture(r, s, "out = 3 * in", 2, [&] {
          r.kernel("kernel copy_u32(out <- in) on s", k::copy_u32(outb, in, 4), s);
          r.kernel("kernel scale_u32(out, 3) on s", k::scale_u32(outb, 4, 3), s);
        });
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        const std::vector<std::vector<uint32_t>> batches = {{1, 2, 3, 4}, {5, 6, 7, 8}, {100, 0, 7, 1}};
        for (size_t i = 0; i < batches.size(); ++i) {
          r.upload(in, batches[i]);
          r.launch("cudaGraphLaunch(exec, s) microbatch " + std::to_string(i), e, s);
          std::vector<uint32_t> want;
          for (uint32_t v : batches[i]) want.push_back(3 * v);
          r.buffer("out after microbatch " + std::to_string(i), outb, 4, want);
        }
      });

  add(out, "replay.accumulate",
      "Several replays accumulate: launches of one executable are ordered behind earlier launches in the stream.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* acc = r.alloc(4);
        uint32_t* src = r.alloc(4);
        r.upload(src, {1, 2, 3, 4});
        device::Graph g = capture(r, s, "acc += src; acc += 1", 2, [&] {
          r.kernel("kernel add_u32(acc += src) on s", k::add_u32(acc, src, 4), s);
          r.kernel("kernel increment_u32(acc) on s", k::increment_u32(acc, 4), s);
        });
        r.buffer("acc after the capture", acc, 4, rep(4, 0));
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        for (int i = 0; i < 3; ++i) r.launch("cudaGraphLaunch(exec, s) #" + std::to_string(i + 1), e, s);
        r.buffer("acc after three replays", acc, 4, {6, 9, 12, 15});
      });

  add(out, "replay.any_stream",
      "A graph may replay on any stream, including the legacy stream; launches of one executable are ordered "
      "behind earlier launches of it, whatever the stream.",
      [](Recorder& r) {
        Stream s1 = r.stream(true), s2 = r.stream(true), s3 = r.stream(false);
        uint32_t* acc = r.alloc(4);
        device::Graph g = capture(r, s1, "acc += 1", 1, [&] {
          r.kernel("kernel increment_u32(acc) on s1", k::increment_u32(acc, 4), s1);
        });
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.launch("cudaGraphLaunch(exec, s1)", e, s1);
        r.launch("cudaGraphLaunch(exec, s2)", e, s2);
        r.launch("cudaGraphLaunch(exec, blocking s3)", e, s3);
        r.launch("cudaGraphLaunch(exec, legacy stream)", e, Stream::legacy());
        r.launch("cudaGraphLaunch(exec, s2) again", e, s2);
        r.buffer("acc after five replays on four streams", acc, 4, rep(4, 5));
      });

  add(out, "graph.host_node.run_counts",
      "A host function captured with cudaLaunchHostFunc is not run at capture or instantiation, and runs once per "
      "replay.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        uint32_t* buf = r.alloc(4);
        auto count = r.counter();
        device::Graph g = capture(r, s, "kernel + host node", 2, [&] {
          r.kernel("kernel increment_u32(buf) on s", k::increment_u32(buf, 4), s);
          r.call("cudaLaunchHostFunc(s, count += 1)", r.dev().launch_host_func(s, [count] { count->fetch_add(1); }),
                 Status::Success);
        });
        r.value("host function runs after the capture", count->load(), 0);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.value("host function runs after instantiation", count->load(), 0);
        r.launch("cudaGraphLaunch(exec, s) #1", e, s);
        r.sync();
        r.value("host function runs after one replay", count->load(), 1);
        r.launch("cudaGraphLaunch(exec, s) #2", e, s);
        r.launch("cudaGraphLaunch(exec, s) #3", e, s);
        r.sync();
        r.value("host function runs after three replays", count->load(), 3);
        r.buffer("buf after three replays", buf, 4, rep(4, 3));
      });
}

// The setup of an update scenario: on s, an executable of g1 (fill a with 1); b for a re-capture.
struct Update {
  Stream s;
  uint32_t* a = nullptr;
  uint32_t* b = nullptr;
  device::GraphExec e;
};
Update update_setup(Recorder& r) {
  Update u;
  u.s = r.stream(true);
  u.a = r.alloc(4);
  u.b = r.alloc(4);
  device::Graph g1 = capture(r, u.s, "fill a with 1", 1, [&] {
    r.kernel("kernel fill_u32(a, 1) on s", k::fill_u32(u.a, 4, 1), u.s);
  });
  u.e = r.instantiate("cudaGraphInstantiate(g1)", g1);
  return u;
}

// cudaGraphExecUpdate(e, g2), recorded with its result.
void update_exec(Recorder& r, device::GraphExec e, device::Graph g2, Status expected, GraphExecUpdateResult want) {
  // starts as anything but `want`, so that an update that never ran cannot match
  GraphExecUpdateResult res = want == GraphExecUpdateResult::Success ? GraphExecUpdateResult::Error
                                                                     : GraphExecUpdateResult::Success;
  Status st = g2.id ? r.dev().graph_exec_update(e, g2, &res) : Status::InvalidValue;
  r.call("cudaGraphExecUpdate(exec, g2)", st, expected);
  r.text("update result", update_result_name(res), update_result_name(want));
}

void add_update(std::vector<Scenario>& out) {
  add(out, "graph.update.same_topology",
      "cudaGraphExecUpdate with a re-capture of the same topology retargets the kernel's arguments (result "
      "Success): the executable then writes the new buffer.",
      [](Recorder& r) {
        Update u = update_setup(r);
        r.launch("cudaGraphLaunch(exec, s) before the update", u.e, u.s);
        r.buffer("a after the first replay", u.a, 4, rep(4, 1));
        r.upload(u.a, rep(4, 0));
        device::Graph g2 = capture(r, u.s, "fill b with 2", 1, [&] {
          r.kernel("kernel fill_u32(b, 2) on s", k::fill_u32(u.b, 4, 2), u.s);
        });
        update_exec(r, u.e, g2, Status::Success, GraphExecUpdateResult::Success);
        r.launch("cudaGraphLaunch(exec, s) after the update", u.e, u.s);
        r.buffer("a after the updated replay", u.a, 4, rep(4, 0));
        r.buffer("b after the updated replay", u.b, 4, rep(4, 2));
      });

  add(out, "graph.update.changed_topology",
      std::string("cudaGraphExecUpdate with a re-capture of a different topology fails with "
                  "cudaErrorGraphExecUpdateFailure, result TopologyChanged. The executable is left unchanged and "
                  "still replays the original graph") +
          kInferred,
      [](Recorder& r) {
        Update u = update_setup(r);
        device::Graph g2 = capture(r, u.s, "fill b with 2, then increment b", 2, [&] {
          r.kernel("kernel fill_u32(b, 2) on s", k::fill_u32(u.b, 4, 2), u.s);
          r.kernel("kernel increment_u32(b) on s", k::increment_u32(u.b, 4), u.s);
        });
        update_exec(r, u.e, g2, Status::GraphExecUpdateFailure, GraphExecUpdateResult::ErrorTopologyChanged);
        r.launch("cudaGraphLaunch(exec, s) after the failed update", u.e, u.s);
        r.buffer("a after the replay (original graph)", u.a, 4, rep(4, 1));
        r.buffer("b after the replay (untouched)", u.b, 4, rep(4, 0));
      });
}

// Captures: p = cudaMallocAsync(1024 B); fill p[0..4) with 5; copy buf <- p; [cudaFreeAsync(p)].
device::Graph capture_memnode(Recorder& r, Stream s, uint32_t* buf, void** p, bool free_in_graph,
                              MemCategory cat = MemCategory::Activations) {
  r.begin("cudaStreamBeginCapture(s, global)", s, CaptureMode::Global);
  r.must("cudaMallocAsync(p, 1024 B, s) during the capture", r.dev().malloc_async(p, 1024, s, cat));
  auto* q = static_cast<uint32_t*>(*p);
  if (q == nullptr) r.abort("cudaMallocAsync returned success and a null pointer");
  r.kernel("kernel fill_u32(p, 5) on s", k::fill_u32(q, 4, 5), s);
  r.kernel("kernel copy_u32(buf <- p) on s", k::copy_u32(buf, q, 4), s);
  if (free_in_graph) r.call("cudaFreeAsync(p, s) during the capture", r.dev().free_async(q, s), Status::Success);
  return r.end("cudaStreamEndCapture(s)", s, Status::Success, free_in_graph ? 4 : 3);
}

// The setup of a memnode scenario: a stream, a 4-word buffer and the graph of capture_memnode.
struct Memnode {
  Stream s;
  uint32_t* buf = nullptr;
  void* p = nullptr;
  device::Graph g;
};
Memnode memnode(Recorder& r, bool free_in_graph, MemCategory cat = MemCategory::Activations) {
  Memnode m;
  m.s = r.stream(true);
  m.buf = r.alloc(4);
  m.g = capture_memnode(r, m.s, m.buf, &m.p, free_in_graph, cat);
  return m;
}

void add_memnodes(std::vector<Scenario>& out) {
  add(out, "graph.memnode.freed_in_graph",
      "A graph allocation freed in the same graph (cudaMallocAsync + cudaFreeAsync captured) replays any number of "
      "times; no graph-pool bytes stay live after a replay.",
      [](Recorder& r) {
        auto [s, buf, p, g] = memnode(r, true);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        r.launch("cudaGraphLaunch(exec, s) #1", e, s);
        r.buffer("buf after the first replay", buf, 4, rep(4, 5));
        r.upload(buf, rep(4, 0));
        r.launch("cudaGraphLaunch(exec, s) #2", e, s);
        r.buffer("buf after the second replay", buf, 4, rep(4, 5));
        r.value("graph-pool bytes live after the replays", r.live_delta(MemCategory::GraphPool), 0);
      });

  add(out, "graph.memnode.freed_in_graph.second_instantiate",
      std::string("A graph containing any allocation or free node can have only one executable at a time (CUDA "
                  "Runtime API, cudaGraphInstantiate): a second instantiation fails, as measured for an unfreed "
                  "allocation, with cudaErrorNotSupported") +
          kInferred,
      [](Recorder& r) {
        Memnode m = memnode(r, true);
        r.instantiate("cudaGraphInstantiate #1", m.g);
        r.instantiate("cudaGraphInstantiate #2", m.g, 0, Status::NotSupported);
      });

  add(out, "graph.memnode.unfreed",
      "A graph holding an unfreed allocation: the address is fixed for the graph's life; it can be instantiated "
      "once (second: cudaErrorNotSupported) and cannot be relaunched (cudaErrorInvalidValue) while the allocation "
      "is live. The allocation's bytes are graph-pool bytes after a launch, until freed.",
      [](Recorder& r) {
        auto [s, buf, p, g] = memnode(r, false);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate #1", g);
        r.instantiate("cudaGraphInstantiate #2", g, 0, Status::NotSupported);
        launch_keeping(r, "cudaGraphLaunch(exec, s)", e, s, p);
        r.buffer("buf after the replay", buf, 4, rep(4, 5));
        r.buffer("p (the graph allocation, still live) after the replay", p, 4, rep(4, 5));
        r.value("graph-pool bytes live after the launch", r.live_delta(MemCategory::GraphPool), 1024);
        r.value("activations bytes live after the launch (graph allocations count as graph pool)",
                r.live_delta(MemCategory::Activations), 0);
        r.launch("cudaGraphLaunch(exec, s) again, allocation still live", e, s, Status::InvalidValue);
        r.sync("cudaDeviceSynchronize after the refused launch");
        free_async(r, "cudaFreeAsync(p, s) outside the graph", p, s);
        r.sync();
        r.value("graph-pool bytes live after the free", r.live_delta(MemCategory::GraphPool), 0);
      });

  add(out, "graph.memnode.unfreed.relaunch_after_free",
      std::string("Once the allocation of a graph without AutoFreeOnLaunch is freed outside the graph, the graph "
                  "can be launched again, at the same address") +
          kInferred,
      [](Recorder& r) {
        auto [s, buf, p, g] = memnode(r, false);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        launch_keeping(r, "cudaGraphLaunch(exec, s) #1", e, s, p);
        free_async(r, "cudaFreeAsync(p, s)", p, s);
        r.upload(buf, rep(4, 0));
        launch_keeping(r, "cudaGraphLaunch(exec, s) #2 after the free", e, s, p);
        r.buffer("buf after the second replay", buf, 4, rep(4, 5));
        r.buffer("p after the second replay (same address)", p, 4, rep(4, 5));
        free_async(r, "cudaFreeAsync(p, s) again", p, s);
        r.sync();
        r.value("graph-pool bytes live after the free", r.live_delta(MemCategory::GraphPool), 0);
      });

  add(out, "graph.memnode.autofree",
      "With cudaGraphInstantiateFlagAutoFreeOnLaunch, a graph holding an unfreed allocation can be relaunched: the "
      "previous allocation is freed first, the address stays the same, one allocation's bytes are live.",
      [](Recorder& r) {
        auto [s, buf, p, g] = memnode(r, false);
        device::GraphExec e =
            r.instantiate("cudaGraphInstantiate(AutoFreeOnLaunch)", g, device::kGraphInstantiateAutoFreeOnLaunch);
        launch_keeping(r, "cudaGraphLaunch(exec, s) #1", e, s, p);
        r.buffer("buf after the first replay", buf, 4, rep(4, 5));
        r.upload(buf, rep(4, 0));
        r.launch("cudaGraphLaunch(exec, s) #2", e, s);
        r.buffer("buf after the second replay", buf, 4, rep(4, 5));
        r.buffer("p after the second replay (same address)", p, 4, rep(4, 5));
        r.value("graph-pool bytes live after two launches", r.live_delta(MemCategory::GraphPool), 1024);
        free_async(r, "cudaFreeAsync(p, s) outside the graph", p, s);
        r.sync();
        r.value("graph-pool bytes live after the free", r.live_delta(MemCategory::GraphPool), 0);
      });
}

void add_memory(std::vector<Scenario>& out) {
  add(out, "memory.live_bytes.by_category",
      "cudaMalloc's bytes are live in the category they were allocated under, and no other, until cudaFree.",
      [](Recorder& r) {
        const MemCategory cats[] = {MemCategory::Parameters, MemCategory::Gradients, MemCategory::Activations,
                                    MemCategory::Workspace, MemCategory::Other};
        std::vector<void*> ptrs;
        int64_t total = 0;
        for (size_t i = 0; i < std::size(cats); ++i) {
          void* p = nullptr;
          size_t bytes = 512 * (i + 1);
          Status st = r.dev().malloc(&p, bytes, cats[i]);
          r.must("cudaMalloc(" + std::to_string(bytes) + " B, " + device::category_name(cats[i]) + ")", st);
          r.adopt_device(p);
          ptrs.push_back(p);
          total += static_cast<int64_t>(bytes);
        }
        for (size_t i = 0; i < std::size(cats); ++i)
          r.value(device::category_name(cats[i]) + " bytes live after the allocations", r.live_delta(cats[i]),
                  512 * static_cast<int64_t>(i + 1));
        r.value("graph_pool bytes live after the allocations", r.live_delta(MemCategory::GraphPool), 0);
        r.value("total bytes live after the allocations", r.live_delta(MemCategory::kCount), total);
        for (size_t i = 0; i < ptrs.size(); ++i) {
          r.call("cudaFree(" + device::category_name(cats[i]) + " block)", r.dev().free(ptrs[i]), Status::Success);
          r.release(ptrs[i]);
        }
        for (MemCategory c : cats) r.value(device::category_name(c) + " bytes live after the frees", r.live_delta(c), 0);
        r.value("total bytes live after the frees", r.live_delta(MemCategory::kCount), 0);
      });

  add(out, "memory.peak",
      "Peak bytes: after reset_peak_memory the peak is the live figure; an allocation raises it, a free does not "
      "lower it.",
      [](Recorder& r) {
        r.dev().reset_peak_memory();
        device::MemoryStats before = r.dev().memory_stats();
        void* p = nullptr;
        r.must("cudaMalloc(8192 B, workspace)", r.dev().malloc(&p, 8192, MemCategory::Workspace));
        r.adopt_device(p);
        r.call("cudaFree(workspace block)", r.dev().free(p), Status::Success);
        r.release(p);
        device::MemoryStats after = r.dev().memory_stats();
        r.value("workspace peak minus workspace live", after[MemCategory::Workspace].peak_bytes -
                                                           after[MemCategory::Workspace].live_bytes, 8192);
        r.value("total peak minus total live", after.peak_bytes - after.live_bytes, 8192);
        r.value("workspace allocations made", after[MemCategory::Workspace].allocations -
                                                  before[MemCategory::Workspace].allocations, 1);
      });

  add(out, "memory.malloc_async.eager",
      "cudaMallocAsync outside a capture is an ordinary allocation: its bytes are live under the category asked "
      "for, not the graph pool, until cudaFreeAsync.",
      [](Recorder& r) {
        Stream s = r.stream(true);
        void* p = nullptr;
        r.must("cudaMallocAsync(2048 B, s, workspace)", r.dev().malloc_async(&p, 2048, s, MemCategory::Workspace));
        r.adopt_device(p);
        r.sync();
        r.value("workspace bytes live", r.live_delta(MemCategory::Workspace), 2048);
        r.value("graph_pool bytes live", r.live_delta(MemCategory::GraphPool), 0);
        free_async(r, "cudaFreeAsync(p, s)", p, s);
        r.sync();
        r.value("workspace bytes live after the free", r.live_delta(MemCategory::Workspace), 0);
      });

  add(out, "memory.graph_pool.capture_category",
      "cudaMallocAsync during capture becomes a graph memory node and its bytes are accounted to the graph pool "
      "whatever category was asked for: after a launch they are graph-pool bytes, not activations.",
      [](Recorder& r) {
        auto [s, buf, p, g] = memnode(r, false, MemCategory::Activations);
        device::GraphExec e = r.instantiate("cudaGraphInstantiate", g);
        launch_keeping(r, "cudaGraphLaunch(exec, s)", e, s, p);
        r.sync();
        r.value("graph_pool bytes live after the launch", r.live_delta(MemCategory::GraphPool), 1024);
        r.value("activations bytes live after the launch", r.live_delta(MemCategory::Activations), 0);
        free_async(r, "cudaFreeAsync(p, s)", p, s);
        r.sync();
        r.value("graph_pool bytes live after the free", r.live_delta(MemCategory::GraphPool), 0);
      });
}

}  // namespace

void add_graphs_and_memory(std::vector<Scenario>& out) {
  add_replay(out);
  add_update(out);
  add_memnodes(out);
  add_memory(out);
}

}  // namespace recap::conformance::detail
