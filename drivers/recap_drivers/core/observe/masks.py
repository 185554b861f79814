"""Observation without changing what the framework does: dropout masks, positions, memory.

Masks. A MaskObserver (one per run, owned by the core's Runner) is a TorchDispatchMode (below
autograd, above the kernels). While a dropout site is open (`observer.site(layer, op)`, opened by
the layer's own Python code around its torch dropout
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
that owes its recompute (checkpointed_here); a recompute draw always is. Nothing else is changed:
no hook is registered on modules or tensors, no feature is disabled. One exception, for runs
already broken: while the mode sees every op (megatron), a step's backward that runs far more ops
than its forward is ended with RunawayBackward (M7, a backward that would otherwise only end when
device memory runs out).

The observer also keeps the run's Position (what failure reports name) and the open dropout
sites; a framework whose own code draws (megatron's bias_dropout_add) gives it a site_resolver
that reads the Python call stack.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import download
from ..errors import RunawayBackward
from .digest import fnv1a64, pack_bits_torch, tensor_bytes

__all__ = ["MaskObserver", "Position", "RunawayBackward", "checkpointed_here", "in_backward"]


@dataclass
class Position:
    phase: str = ""  # eager | warmup | capture | replay
    pass_: str = ""  # forward | backward | ""
    layer: str = ""
    microbatch: int = -1
    step: int = -1

    def set(self, phase: Optional[str] = None, pass_: Optional[str] = None, layer: Optional[str] = None,
            microbatch: Optional[int] = None, step: Optional[int] = None) -> None:
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

    def enter_layer(self, name: str) -> None:
        """Called by a top-level layer's forward (also when it is recomputed inside backward)."""
        self.layer = name
        if in_backward():
            self.pass_ = "backward"


# A correct step's backward runs its forward's ops at most a few times over (the gradients, plus
# one recompute per checkpoint): RUNAWAY_FACTOR times as many, plus RUNAWAY_FLOOR, is not one.
RUNAWAY_FACTOR = 50
RUNAWAY_FLOOR = 20000


def in_backward() -> bool:
    try:
        return torch._C._current_autograd_node() is not None
    except Exception:
        return False


MaskKey = Tuple[str, str, int, str]  # (layer, op, microbatch, pass)
DrawKey = Tuple[str, str, int, str, int]  # (layer, op, microbatch, pass, index)


def _is_checkpoint_frame(code: CodeType, f_locals_of: Callable[[], Dict[str, Any]]) -> bool:
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
        f: Optional[FrameType] = sys._getframe(depth)
    except ValueError:  # a shallower stack than asked: no Python frame above the draw
        return False
    while f is not None:
        frame = f
        if _is_checkpoint_frame(frame.f_code, lambda: frame.f_locals):
            if frame.f_code.co_name == "checkpoint":
                return torch.is_grad_enabled()
            return True
        f = f.f_back
    return False


def _overloads(*names: str) -> Set[Any]:
    """Every overload of the aten ops named (those this torch has)."""
    out: Set[Any] = set()
    for name in names:
        pkt = getattr(torch.ops.aten, name, None)
        if pkt is not None:
            out.update(getattr(pkt, ov) for ov in pkt.overloads())
    return out


bernoulli_ops = _overloads("bernoulli_", "bernoulli")
native_dropout = torch.ops.aten.native_dropout.default
current_autograd_node = torch._C._current_autograd_node  # in_backward without its try, per op
gemm_ops = _overloads("mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "_scaled_mm", "addmm_",
                      "baddbmm_")


class MaskObserver(TorchDispatchMode):
    """See the module comment. Modes:
      live   every draw is copied and belongs to the current step (eager code);
      build  graphs are being made: a draw on a capturing stream is copied (the copy is part
             of the graph) and its key is remembered as a graph key, refreshed by every
             replay; a draw outside capture (make_graphed_callables' own warmup iterations)
             is not a step's draw and is ignored.
    """

    def __init__(self, device: Any, site_resolver: Optional[Callable[[], Optional[Tuple[str, str]]]] = None):
        super().__init__()
        self.device = device
        # the run's position (failure reports), the dropout sites open now (innermost last), and
        # where a dropout no site was opened for was drawn: a function reading the Python stack
        # (megatron's bias_dropout_add draws inside its own code), or None
        self.position = Position()
        self.sites: List[Tuple[str, str]] = []
        self.site_resolver = site_resolver
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
        # False while a run is measured (recap tradeoff, the `measure` request): no mask is copied
        # and the mode is pushed only while graphs are built (for the bytes their captures keep),
        # so the timed steps run the framework's code alone
        self.record = True
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
        return self.started and (self._mode == "build" or (self.site_resolver is not None and self.record))

    def _sync_global(self) -> None:
        want = self._want_global()
        if want and not self._global and not self._scoped:
            self.__enter__()
            self._global = 1
        elif not want and self._global:
            self.__exit__(None, None, None)
            self._global = 0

    def _push_scoped(self) -> bool:
        if not self.started or not self.record or self._global or self._scoped:
            return False
        self.__enter__()
        self._scoped = 1
        return True

    def _pop_scoped(self) -> None:
        self.__exit__(None, None, None)
        self._scoped = 0

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        self._mode = value
        self._sync_global()

    def start(self) -> None:
        """The run begins: this observer sees its dropout sites (and everything, while
        building graphs or under a site_resolver)."""
        self.started = True
        self._sync_global()

    def stop(self) -> None:
        self.started = False
        self._sync_global()

    @contextlib.contextmanager
    def site(self, layer: str, op: str) -> Iterator[None]:
        """A dropout site, opened by a layer's Python code around its dropout. Between captures
        the mode is pushed only inside the sites, so the ops of a training step do not all pass
        through Python (drivers/benchmarks/observe_overhead.py measures the difference)."""
        self.sites.append((layer, op))
        pushed = self._push_scoped()
        try:
            yield
        finally:
            if pushed:
                self._pop_scoped()
            self.sites.pop()

    def plan(self, keys_numel: List[Tuple[MaskKey, int]]) -> None:
        """Buffers of the first draw (index 0) of each key, before any capture; a key's later
        draws get theirs when they happen (late_allocations)."""
        for key, n in keys_numel:
            k5: DrawKey = (key[0], key[1], key[2], key[3], 0)
            if k5 not in self.buffers:
                self.buffers[k5] = torch.zeros(n, dtype=torch.uint8, device=self.device)

    def _buffer(self, k5: DrawKey, numel: int, device: torch.device) -> torch.Tensor:
        buf = self.buffers.get(k5)
        if buf is None or buf.numel() != numel:
            buf = torch.zeros(numel, dtype=torch.uint8, device=device)
            self.buffers[k5] = buf
            self.late_allocations += 1
        return buf

    def begin_step(self) -> None:
        self.step_keys = {}
        self.forward_ops = 0
        self.backward_ops = 0

    def _count_op(self) -> None:
        if current_autograd_node() is None:  # outside the autograd engine
            self.forward_ops += 1
            return
        self.backward_ops += 1
        if self.backward_ops > RUNAWAY_FACTOR * self.forward_ops + RUNAWAY_FLOOR:
            raise RunawayBackward(
                f"a backward that does not end: the backward of step {self.position.step} ran "
                f"{self.backward_ops} ops for the {self.forward_ops} of its forward (more than "
                f"{RUNAWAY_FACTOR} times as many, plus {RUNAWAY_FLOOR}), in {self.position.layer or 'the model'}")

    def _record(self, mask: torch.Tensor, where: Tuple[str, str]) -> None:
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

    # func is an OpOverload and the arguments whatever the op takes: torch leaves them untyped
    def __torch_dispatch__(self, func: Any, types: Any, args: Tuple[Any, ...] = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
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
        if self.record and (func is native_dropout or func in bernoulli_ops):
            where = self.sites[-1] if self.sites else (self.site_resolver() if self.site_resolver is not None else None)
            if where is not None:
                self._record(out[1] if func is native_dropout else out, where)
        return out

    def snapshot_graph_keys(self, microbatch: int) -> None:
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
        order = [(key, i, ck) for key in sorted(keys, key=lambda k: (k[2], 0 if k[3] == "forward" else 1, k[0], k[1]))
                 for i, ck in enumerate(keys[key])]
        host = download.to_host([self.buffers[key + (i,)] for key, i, _ in order])  # one wait, not one per mask
        out = []
        for (key, i, ck), buf in zip(order, host):
            kept = tensor_bytes(buf)
            digest = "%016x" % fnv1a64(pack_bits_torch(buf))
            out.append({"layer": key[0], "op": key[1], "microbatch": key[2], "pass": key[3],
                        "index": i, "checkpointed": bool(ck), "numel": int(buf.numel()),
                        "digest": digest, "draws": 1, "_bytes": kept})
        return out


def _allocated_now() -> int:
    """torch.cuda.memory_allocated() of the current device, without flattening every allocator
    statistic into a new dict as memory_allocated() does (it is read around every GEMM)."""
    raw = getattr(torch._C, "_cuda_memoryStats", None)
    if raw is None:
        return torch.cuda.memory_allocated()
    try:
        return int(raw(torch.cuda.current_device())["allocated_bytes"]["all"]["current"])
    except (KeyError, TypeError):
        return torch.cuda.memory_allocated()


# An op that keeps more than this beyond its outputs is allocating a workspace, not an activation.
HIDDEN_THRESHOLD = 256 * 1024


def _new_output_bytes(args: Tuple[Any, ...], kwargs: Optional[Dict[str, Any]], out: Any) -> int:
    """Bytes of the output storages that are not input storages (views and in-place results are
    not new)."""
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
