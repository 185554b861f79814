"""Observation without changing what the framework does: dropout masks, positions, memory.

Masks. A MaskObserver is a TorchDispatchMode (below autograd, above the kernels). While a dropout
site is open (`site(layer, op)`, opened by the layer's own Python code around its torch dropout
call), it watches the ops that realize a dropout mask and copies the mask the computation itself
produced into a per-(layer, op, microbatch, pass) uint8 buffer (1 kept, 0 dropped):
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
draw otherwise. Nothing else is changed: no hook is registered on modules or tensors, no feature is
disabled. One exception, for runs already broken: while the mode sees every op (megatron), a step's
backward that runs far more ops than its forward is ended with RunawayBackward (M7, a backward that
would otherwise only end when device memory runs out).

Digest: the mask packed as recap packs it (harness/runtime/dropout.h: bit i % 32 of uint32 word
i / 32 set iff element i is kept, bits past n zero), the words as little-endian bytes, FNV-1a 64
over those ceil(n / 32) * 4 bytes, written as 16 lower-case hex digits.
"""

from __future__ import annotations

import contextlib
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
    memory, drivers/FINDINGS.md M7). Raised from the observer: such a run is already broken, and a
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
            self.buffers: Dict[MaskKey, torch.Tensor] = {}
            self.step_keys: Dict[MaskKey, int] = {}  # key -> draws this step (ordered)
            self.graph_keys: Dict[MaskKey, int] = {}
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
            for key, n in keys_numel:
                if key not in self.buffers:
                    self.buffers[key] = torch.zeros(n, dtype=torch.uint8, device=self.device)

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
            pass_ = "forward" if current_autograd_node() is None else "recompute"
            key = (layer, op, self.microbatch, pass_)
            if self.mode == "build":
                if not (mask.is_cuda and torch.cuda.is_current_stream_capturing()):
                    return
                table = self.graph_keys
            else:
                table = self.step_keys
            buf = self.buffers.get(key)
            if buf is None or buf.numel() != mask.numel():
                buf = torch.zeros(mask.numel(), dtype=torch.uint8, device=mask.device)
                self.buffers[key] = buf
                self.late_allocations += 1
            buf.copy_(mask.reshape(-1))
            table[key] = table.get(key, 0) + 1

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
            for (layer, op, _, pass_), n in self.graph_keys.items():
                src = self.buffers[(layer, op, _, pass_)]
                key = (layer, op, microbatch, pass_)
                dst = self.buffers.get(key)
                if dst is None or dst.numel() != src.numel():
                    dst = torch.zeros_like(src)
                    self.buffers[key] = dst
                    self.late_allocations += 1
                dst.copy_(src)
                self.step_keys[key] = self.step_keys.get(key, 0) + n

        def collect(self, include_graph_keys: bool) -> List[dict]:
            """The masks of the step (call after synchronizing)."""
            keys = dict(self.step_keys)
            if include_graph_keys:
                for k, v in self.graph_keys.items():
                    keys[k] = keys.get(k, 0) + v
            out = []
            for key in sorted(keys, key=lambda k: (k[2], 0 if k[3] == "forward" else 1, k[0], k[1])):
                buf = self.buffers[key].to("cpu")
                kept = _tensor_bytes(buf)
                digest = "%016x" % fnv1a64(_pack_bits_torch(buf))
                out.append({"layer": key[0], "op": key[1], "microbatch": key[2], "pass": key[3],
                            "numel": int(buf.numel()), "digest": digest, "draws": keys[key],
                            "_bytes": kept})
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
