"""Observation without changing what the framework does: dropout masks, positions, memory.

Masks. A MaskObserver is a TorchDispatchMode (below autograd, above the kernels). While a dropout
site is open (`site(layer, op)`, opened by the layer's own Python code around its torch dropout
call), it watches the ops that realize a dropout mask and copies the mask the computation itself
produced into a uint8 buffer per draw (1 kept, 0 dropped), keyed (layer, op, microbatch, pass, index),
index counting the draws of one (layer, op, microbatch, pass) in a step:
  aten.native_dropout -> its second output, the boolean mask native_dropout saves for backward
                         (F.dropout on CUDA);
  aten.bernoulli_/bernoulli -> the 0/1 noise before it is scaled (F.dropout on CPU, which multiplies
                         the input by that noise).
The copy is enqueued inside the op's dispatch, i.e. before autograd packs the op's saved tensors,
so a non-reentrant checkpoint whose recompute stops early (once its last saved tensor is packed)
still passes through it; and it is an ordinary device copy into a buffer allocated before any
capture, so it is captured into graphs and refreshed by every replay. A draw is a recompute when it
executes inside the autograd engine (torch._C._current_autograd_node() is not None: a reentrant
checkpoint's CheckpointFunction.backward or a non-reentrant checkpoint's unpack hook), a forward
draw otherwise. A forward draw is `checkpointed` when the Python stack at the draw holds a checkpoint
that owes its recompute (checkpointed_here); a recompute draw always is. Nothing else is changed: no hook is registered on modules or tensors, no feature is
disabled. One exception, for runs already broken: while the mode sees every op (megatron), a step's
backward that runs far more ops than its forward is ended with RunawayBackward (M7, a backward that
would otherwise only end when device memory runs out).

Graphs. A GraphObserver (graph_observer, below) counts CUDA graph captures and replays by label:
torch.cuda.CUDAGraph.capture_end and .replay are wrapped, once per process, by functions that call
the originals unchanged and then count.

Digest: the mask packed as recap packs it (harness/runtime/dropout.h: bit i % 32 of uint32 word
i / 32 set iff element i is kept, bits past n zero), the words as little-endian bytes, FNV-1a 64
over those ceil(n / 32) * 4 bytes, written as 16 lower-case hex digits.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Dict, List, Tuple

FNV_OFFSET = 1469598103934665603
FNV_PRIME = 1099511628211
MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes, h: int = FNV_OFFSET) -> int:
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK64
    return h


def pack_mask_bits(kept: bytes) -> bytes:
    """One byte per element (nonzero: kept) -> recap's packed uint32 words, little-endian bytes.
    Bit i % 32 of word i / 32 is element i, so byte j of the stream holds elements 8j .. 8j+7 with
    element 8j in bit 0."""
    n = len(kept)
    nwords = (n + 31) // 32
    out = bytearray(nwords * 4)
    for j in range(0, n, 8):
        byte = 0
        chunk = kept[j:j + 8]
        for k, v in enumerate(chunk):
            if v:
                byte |= 1 << k
        out[j // 8] = byte
    return bytes(out)


def mask_digest(kept: bytes) -> str:
    return "%016x" % fnv1a64(pack_mask_bits(kept))


# ---- positions (for failure reports) ---------------------------------------------------------


@dataclass
class Position:
    phase: str = ""  # eager | warmup | capture | replay
    pass_: str = ""  # forward | backward | ""
    layer: str = ""
    microbatch: int = -1
    step: int = -1

    def set(self, phase=None, pass_=None, layer=None, microbatch=None, step=None):
        if phase is not None:
            self.phase = phase
        if pass_ is not None:
            self.pass_ = pass_
        if layer is not None:
            self.layer = layer
        if microbatch is not None:
            self.microbatch = microbatch
        if step is not None:
            self.step = step

    def enter_layer(self, name: str):
        """Called by a top-level layer's forward (also when it is recomputed inside backward)."""
        self.layer = name
        if _in_backward():
            self.pass_ = "backward"


# Plain module globals (not thread-local): autograd runs recomputes on its own threads, and the
# GIL serializes the Python that reads and writes them.
position = Position()
_sites: List[Tuple[str, str]] = []
# Where a dropout no site was opened for was drawn, or None: a driver whose framework draws inside
# its own code (megatron's bias_dropout_add) sets a function that reads the Python call stack.
site_resolver = None


# The observer of the run in progress (MaskObserver.start). Between captures it is pushed as a
# dispatch mode only inside the dropout sites, so the ops of a training step do not all pass
# through Python (docs: drivers/benchmarks/observe_overhead.py measures the difference).
_active = None


@contextlib.contextmanager
def site(layer: str, op: str):
    _sites.append((layer, op))
    obs = _active
    pushed = obs is not None and obs._push_scoped()
    try:
        yield
    finally:
        if pushed:
            obs._pop_scoped()
        _sites.pop()


class RunawayBackward(RuntimeError):
    """A step's backward ran far more ops than its forward did: a backward that would not end (a
    recompute that reaches itself again through its own output re-enters without end, each level
    deeper on a new autograd thread with its own cuBLAS workspace, until the device runs out of
    memory, results/FINDINGS.md M7). Raised from the observer: such a run is already broken, and a
    named failure in a second beats an out-of-memory error, which judges nothing, a minute later."""


# A correct step's backward runs its forward's ops at most a few times over (the gradients, plus
# one recompute per checkpoint): RUNAWAY_FACTOR times as many, plus RUNAWAY_FLOOR, is not one.
RUNAWAY_FACTOR = 50
RUNAWAY_FLOOR = 20000


def _in_backward() -> bool:
    try:
        import torch

        return torch._C._current_autograd_node() is not None
    except Exception:
        return False


# ---- the mask observer -----------------------------------------------------------------------

MaskKey = Tuple[str, str, int, str]  # (layer, op, microbatch, pass)
DrawKey = Tuple[str, str, int, str, int]  # (layer, op, microbatch, pass, index)


def _is_checkpoint_frame(code, f_locals_of) -> bool:
    """Whether a Python frame runs a checkpointed region that owes a recompute of what it draws:
    torch.utils.checkpoint's reentrant CheckpointFunction.forward; torch's non-reentrant
    checkpoint, whose function runs in `checkpoint()` itself between the two next(gen) of
    _checkpoint_without_reentrant_generator (torch 2.11, torch/utils/checkpoint.py: the generator
    is suspended, so `checkpoint` with use_reentrant False is the frame on the stack); megatron-core's
    tensor_parallel.random CheckpointFunction.forward. Matched by code name and file, not version.
    Megatron's PR #3919 skip (checkpoint() calling the function during graph warmup/capture) has no
    CheckpointFunction.forward frame: not checkpointed."""
    name = code.co_name
    if name not in ("forward", "checkpoint"):
        return False
    fn = code.co_filename.replace("\\", "/")
    qual = getattr(code, "co_qualname", "")
    if fn.endswith("torch/utils/checkpoint.py"):
        if name == "forward":
            return qual == "CheckpointFunction.forward" if qual else "run_function" in f_locals_of()
        return f_locals_of().get("use_reentrant") is False
    if name == "forward" and fn.endswith("megatron/core/tensor_parallel/random.py"):
        return qual == "CheckpointFunction.forward" if qual else "run_function" in f_locals_of()
    return False


def checkpointed_here(depth: int = 1) -> bool:
    """Whether a forward draw made now is inside a checkpoint that owes its recompute (read from
    the Python call stack; called only at dropout draws). A non-reentrant region run with grad
    disabled recomputes nothing (its generator returns before installing its hooks)."""
    try:
        f = sys._getframe(depth)
    except ValueError:  # a shallower stack than asked: no Python frame above the draw
        return False
    while f is not None:
        frame = f
        if _is_checkpoint_frame(frame.f_code, lambda: frame.f_locals):
            if frame.f_code.co_name == "checkpoint":
                import torch

                return torch.is_grad_enabled()
            return True
        f = f.f_back
    return False


def _make_observer_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    bernoulli_ops = set()
    for name in ("bernoulli_", "bernoulli"):
        pkt = getattr(aten, name, None)
        if pkt is None:
            continue
        for ov in pkt.overloads():
            bernoulli_ops.add(getattr(pkt, ov))
    native_dropout = aten.native_dropout.default
    current_autograd_node = torch._C._current_autograd_node  # _in_backward without its import, per op
    gemm_ops = set()
    for name in ("mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "_scaled_mm", "addmm_", "baddbmm_"):
        pkt = getattr(aten, name, None)
        if pkt is None:
            continue
        for ov in pkt.overloads():
            gemm_ops.add(getattr(pkt, ov))

    class MaskObserver(TorchDispatchMode):
        """See the module comment. Modes:
          live   every draw is copied and belongs to the current step (eager code);
          build  graphs are being made: a draw on a capturing stream is copied (the copy is part
                 of the graph) and its key is remembered as a graph key, refreshed by every
                 replay; a draw outside capture (make_graphed_callables' own warmup iterations)
                 is not a step's draw and is ignored.
        """

        def __init__(self, device):
            super().__init__()
            self.device = device
            # memory: bytes that ops allocated and kept beyond their outputs (cuBLAS workspaces,
            # created lazily on a stream's first GEMM and again inside every capture, since
            # capture_begin clears them); see allocated()
            self.track_memory = getattr(device, "type", str(device)) == "cuda"
            self.hidden_bytes = 0
            self.microbatch = 0
            self._mode = "live"
            self._global = 0  # pushed for the whole run (megatron, captures)
            self._scoped = 0  # pushed by an open site
            self.started = False
            self.buffers: Dict[DrawKey, torch.Tensor] = {}
            # key -> the checkpointed flag of each draw, by index: this step's draws; the draws
            # captured into graphs (reported in every replay step, flags as at capture)
            self.step_keys: Dict[MaskKey, List[bool]] = {}
            self.graph_keys: Dict[MaskKey, List[bool]] = {}
            self.late_allocations = 0  # buffers allocated lazily (not planned)
            # ops of this step outside and inside the autograd engine, counted while the mode is
            # pushed for the whole run (the runaway check needs every op)
            self.forward_ops = 0
            self.backward_ops = 0

        # -- where the mode is pushed --
        # Globally while graphs are built (the mask copies and the cuBLAS workspaces that
        # captures allocate must be seen) or when the framework's own code draws (a
        # site_resolver: megatron); else only inside the sites that the layers open.

        def _want_global(self) -> bool:
            return self.started and (self._mode == "build" or site_resolver is not None)

        def _sync_global(self):
            want = self._want_global()
            if want and not self._global and not self._scoped:
                self.__enter__()
                self._global = 1
            elif not want and self._global:
                self.__exit__(None, None, None)
                self._global = 0

        def _push_scoped(self) -> bool:
            if not self.started or self._global or self._scoped:
                return False
            self.__enter__()
            self._scoped = 1
            return True

        def _pop_scoped(self):
            self.__exit__(None, None, None)
            self._scoped = 0

        @property
        def mode(self) -> str:
            return self._mode

        @mode.setter
        def mode(self, value: str):
            self._mode = value
            self._sync_global()

        def start(self):
            """The run begins: this observer sees its dropout sites (and everything, while
            building graphs or under a site_resolver)."""
            global _active
            _active = self
            self.started = True
            self._sync_global()

        def stop(self):
            global _active
            self.started = False
            self._sync_global()
            if _active is self:
                _active = None

        def plan(self, keys_numel: List[Tuple[MaskKey, int]]):
            """Buffers of the first draw (index 0) of each key, before any capture; a key's later
            draws get theirs when they happen (late_allocations)."""
            for key, n in keys_numel:
                k5 = tuple(key) + (0,)
                if k5 not in self.buffers:
                    self.buffers[k5] = torch.zeros(n, dtype=torch.uint8, device=self.device)

        def _buffer(self, k5, numel: int, device):
            buf = self.buffers.get(k5)
            if buf is None or buf.numel() != numel:
                buf = torch.zeros(numel, dtype=torch.uint8, device=device)
                self.buffers[k5] = buf
                self.late_allocations += 1
            return buf

        def begin_step(self):
            self.step_keys = {}
            self.forward_ops = 0
            self.backward_ops = 0

        def _count_op(self):
            if current_autograd_node() is None:  # outside the autograd engine
                self.forward_ops += 1
                return
            self.backward_ops += 1
            if self.backward_ops > RUNAWAY_FACTOR * self.forward_ops + RUNAWAY_FLOOR:
                raise RunawayBackward(
                    f"a backward that does not end: the backward of step {position.step} ran "
                    f"{self.backward_ops} ops for the {self.forward_ops} of its forward (more than "
                    f"{RUNAWAY_FACTOR} times as many, plus {RUNAWAY_FLOOR}), in {position.layer or 'the model'}")

        def _record(self, mask, where):
            layer, op = where
            forward = current_autograd_node() is None
            pass_ = "forward" if forward else "recompute"
            key = (layer, op, self.microbatch, pass_)
            if self.mode == "build":
                if not (mask.is_cuda and torch.cuda.is_current_stream_capturing()):
                    return
                table = self.graph_keys
            else:
                table = self.step_keys
            flags = table.setdefault(key, [])
            # a buffer allocated here during a capture comes from the capture's pool; the plan
            # covers index 0 of every site, so only a site drawing twice gets there
            buf = self._buffer(key + (len(flags),), mask.numel(), mask.device)
            buf.copy_(mask.reshape(-1))
            flags.append(checkpointed_here(3) if forward else True)

        def allocated(self) -> int:
            """torch.cuda.memory_allocated() less what ops kept beyond their outputs (0 on CPU):
            differences of it are the bytes of tensors a computation produced and still holds."""
            if not self.track_memory:
                return 0
            return _allocated_now() - self.hidden_bytes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # only GEMMs create cuBLAS workspaces; reading the allocator around every op would
            # cost more than the ops (memory_allocated() builds and flattens a dict of stats)
            if self._global:
                self._count_op()
            if self.track_memory and func in gemm_ops:
                a0 = _allocated_now()
                out = func(*args, **(kwargs or {}))
                kept = _allocated_now() - a0
                if kept > HIDDEN_THRESHOLD:
                    kept -= _new_output_bytes(args, kwargs, out)
                    if kept > HIDDEN_THRESHOLD:
                        self.hidden_bytes += kept
            else:
                out = func(*args, **(kwargs or {}))
            if func is native_dropout or func in bernoulli_ops:
                where = _sites[-1] if _sites else (site_resolver() if site_resolver is not None else None)
                if where is not None:
                    self._record(out[1] if func is native_dropout else out, where)
            return out

        def snapshot_graph_keys(self, microbatch: int):
            """Copies what the graph keys' buffers hold now (the masks the graphs' last replays
            wrote) to the step's keys of `microbatch`: for graphs that serve every microbatch (one
            per layer, Megatron's CudaGraphManager with one pipeline stage)."""
            for (layer, op, mb, pass_), gflags in self.graph_keys.items():
                key = (layer, op, microbatch, pass_)
                flags = self.step_keys.setdefault(key, [])
                for i, ck in enumerate(gflags):
                    src = self.buffers[(layer, op, mb, pass_, i)]
                    self._buffer(key + (len(flags),), src.numel(), src.device).copy_(src)
                    flags.append(ck)

        def collect(self, include_graph_keys: bool) -> List[dict]:
            """The masks of the step (call after synchronizing)."""
            keys = {k: list(v) for k, v in self.step_keys.items()}
            if include_graph_keys:
                # a key is drawn either live or in graphs (a graphed layer runs no Python in
                # replays): the two never share a key, so its indices are its buffers'
                for k, v in self.graph_keys.items():
                    keys.setdefault(k, list(v))
            out = []
            for key in sorted(keys, key=lambda k: (k[2], 0 if k[3] == "forward" else 1, k[0], k[1])):
                for i, ck in enumerate(keys[key]):
                    buf = self.buffers[key + (i,)].to("cpu")
                    kept = _tensor_bytes(buf)
                    digest = "%016x" % fnv1a64(_pack_bits_torch(buf))
                    out.append({"layer": key[0], "op": key[1], "microbatch": key[2], "pass": key[3],
                                "index": i, "checkpointed": bool(ck), "numel": int(buf.numel()),
                                "digest": digest, "draws": 1, "_bytes": kept})
            return out

    return MaskObserver


_observer_cls = None


def _allocated_now() -> int:
    """torch.cuda.memory_allocated() of the current device, without flattening every allocator
    statistic into a new dict as memory_allocated() does (it is read around every GEMM)."""
    import torch

    raw = getattr(torch._C, "_cuda_memoryStats", None)
    if raw is None:
        return torch.cuda.memory_allocated()
    try:
        return int(raw(torch.cuda.current_device())["allocated_bytes"]["all"]["current"])
    except (KeyError, TypeError):
        return torch.cuda.memory_allocated()
# An op that keeps more than this beyond its outputs is allocating a workspace, not an activation.
HIDDEN_THRESHOLD = 256 * 1024


def _new_output_bytes(args, kwargs, out) -> int:
    """Bytes of the output storages that are not input storages (views and in-place results are
    not new)."""
    import torch
    from torch.utils._pytree import tree_leaves

    seen = set()
    for t in tree_leaves((args, kwargs or {})):
        if isinstance(t, torch.Tensor):
            try:
                seen.add(t.untyped_storage().data_ptr())
            except Exception:
                pass
    total = 0
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            try:
                st = t.untyped_storage()
                p = st.data_ptr()
            except Exception:
                continue
            if p not in seen:
                seen.add(p)
                total += st.nbytes()
    return total


def MaskObserver(device):
    global _observer_cls
    if _observer_cls is None:
        _observer_cls = _make_observer_class()
    return _observer_cls(device)


def _pack_bits_torch(kept) -> bytes:
    """pack_mask_bits() for a CPU uint8 tensor, vectorized."""
    import torch

    n = kept.numel()
    nwords = (n + 31) // 32
    padded = torch.zeros(nwords * 32, dtype=torch.int32)
    padded[:n] = (kept.reshape(-1) != 0).to(torch.int32)
    weights = torch.tensor([1 << k for k in range(8)], dtype=torch.int32)
    packed = (padded.view(-1, 8) * weights).sum(dim=1).to(torch.uint8)
    return _tensor_bytes(packed)


def _tensor_bytes(t) -> bytes:
    """Raw bytes of a CPU tensor, without numpy."""
    import torch

    t = t.contiguous()
    n = t.numel() * t.element_size()
    ba = bytearray(n)
    if n:
        dst = torch.frombuffer(ba, dtype=t.dtype)
        dst.copy_(t.reshape(-1))
    return bytes(ba)


# ---- graphs ----------------------------------------------------------------------------------


class GraphObserver:
    """Counts the CUDA graphs a run captures and replays, by label. torch.cuda.CUDAGraph's
    capture_end and replay are replaced, at class level and once per process, by wrappers that
    call the originals unchanged and then count (a capture_end that raises is no capture).
    Labels: the first of `resolvers` (functions of the graph, reading the Python stack) that names
    one, else `label` (the driver sets "iteration" around a whole-step capture), else "?". A
    replay counts under its graph's label only when that graph was captured in this run (graphs
    of other cases are unknown: begin_run forgets every label)."""

    _MARK = "_recap_graph_observer"

    def __init__(self):
        self.active = False
        self.label = ""
        self.resolvers: List = []
        self.captures: Dict[str, int] = {}
        self.replays: Dict[str, int] = {}  # since the last take_replays()
        self._labels: Dict[int, str] = {}  # id(graph) -> label, graphs captured in this run

    def install(self, cls=None):
        if cls is None:
            import torch

            cls = torch.cuda.CUDAGraph
        if cls.__dict__.get(self._MARK) is not None:
            return
        end, replay = cls.capture_end, cls.replay
        obs = self

        def capture_end(graph, *args, **kwargs):
            r = end(graph, *args, **kwargs)
            obs._captured(graph)
            return r

        def replay_(graph, *args, **kwargs):
            r = replay(graph, *args, **kwargs)
            obs._replayed(graph)
            return r

        capture_end.__wrapped__, replay_.__wrapped__ = end, replay
        cls.capture_end, cls.replay = capture_end, replay_
        setattr(cls, self._MARK, self)

    def begin_run(self):
        self.active = True
        self.label = ""
        self.captures, self.replays, self._labels = {}, {}, {}

    def end_run(self):
        self.active = False
        self.label = ""
        self._labels = {}

    def take_replays(self) -> Dict[str, int]:
        out, self.replays = self.replays, {}
        return out

    def _captured(self, graph):
        if not self.active:
            return
        label = None
        for r in self.resolvers:
            try:
                label = r(graph)
            except Exception:
                label = None
            if label:
                break
        label = label or self.label or "?"
        self.captures[label] = self.captures.get(label, 0) + 1
        self._labels[id(graph)] = label

    def _replayed(self, graph):
        label = self._labels.get(id(graph)) if self.active else None
        if label is not None:
            self.replays[label] = self.replays.get(label, 0) + 1


def mgc_label(graph) -> str:
    """The recap layer of a graph that torch.cuda.make_graphed_callables captures, "" when it is
    not one: read from its frame (torch 2.11, torch/cuda/graphs.py): forward graphs are captured
    in callable order (loop variables func, fwd_graph), backward graphs in reverse order (loop
    variable bwd_graph, an element of bwd_graphs, paired with callables[i] by its index i). The
    callables are the driver's, which carry recap_path."""
    f = sys._getframe(1)
    while f is not None:
        co = f.f_code
        if co.co_name == "make_graphed_callables" and co.co_filename.replace("\\", "/").endswith("torch/cuda/graphs.py"):
            return mgc_label_in(graph, f.f_locals)
        f = f.f_back
    return ""


def mgc_label_in(graph, loc) -> str:
    fn = None
    if graph is loc.get("bwd_graph"):
        i = next((i for i, g in enumerate(loc.get("bwd_graphs") or ()) if g is graph), -1)
        cs = loc.get("callables") or ()
        fn = cs[i] if 0 <= i < len(cs) else None
    elif graph is loc.get("fwd_graph"):
        fn = loc.get("func")
    path = getattr(fn, "recap_path", "")
    return path.split(".")[0] if isinstance(path, str) else ""


# One per process: the wrappers it installs are class-level.
graph_observer = GraphObserver()


# ---- memory ----------------------------------------------------------------------------------


def pool_bytes() -> int:
    """Bytes of segments the caching allocator holds in private (graph) pools."""
    import torch

    if not torch.cuda.is_available():
        return 0
    try:
        segs = torch.cuda.memory_snapshot()
    except Exception:
        return 0
    total = 0
    for s in segs:
        pid = s.get("segment_pool_id", (0, 0))
        if tuple(pid) != (0, 0):
            total += int(s.get("total_size", 0))
    return total
