"""The PyTorch SUT: runs recap cases on torch's own modules, checkpointing and CUDA graphs.

Executors (each runs warmup + replays steps numbered from 0, as recap's executors do):
  eager           every step eagerly.
  per-layer       steps 0 .. W-1 are real eager training steps on a side stream (phase "warmup");
                  then torch.cuda.make_graphed_callables(num_warmup_iters=W) makes a forward and a
                  backward graph per graphed layer and microbatch (the CUDA RNG state is saved
                  before and restored after, so its own warmup iterations do not shift the replays'
                  draws); steps W .. run the graphed callables (fresh inputs copied into their
                  static inputs by the graphed function), ungraphed layers eagerly between them.
                  torch's make_graphed_callables has no `_order`/num_microbatches (those are
                  TransformerEngine's): each call captures the forwards of its callables in tuple
                  order, then their backwards in reverse. With shared_pool one call per microbatch
                  shares one graph_pool_handle() (capture order = live order only for the order
                  [1, -1] per microbatch: other orders are skipped); without it, one call per
                  (layer, microbatch), each with its own pool, for any order.
  full-iteration  steps 0 .. W-1 eagerly on a side stream (phase "warmup"), then one
                  torch.cuda.graph capture of a whole training step (zero grads, forwards, losses,
                  backwards, grad copies, SGD), replayed once per later step with fresh data copied
                  into its static input/target buffers.

A training step (recap's Trainer): zero the gradients; for each entry of the microbatch order a
forward (input -> layers -> recap's mse loss) or a backward (loss.backward(), then a copy of every
accumulated gradient); then SGD p -= lr * grad. Gradients live in preallocated .grad tensors that
backward accumulates into in place, so eager and graphed steps run the same kernels.
"""

from __future__ import annotations

import ast
import gc
import inspect
import math
import os
import re
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA initializes

import torch

from . import case as case_mod
from . import layers as layers_mod
from . import observe
from .protocol import Frame

ALL_KINDS = list(case_mod.LAYER_KINDS)


class RequestError(Exception):
    """A run request that cannot be served (bad case, missing frames): an error reply."""


class SkipCase(Exception):
    """The framework refuses the case while it is being built (one line): a skipped reply."""


def collect_between_cases():
    """Frees the last case's cycles (its graphs, modules, hooks). Never gc.freeze() here: an object
    a framework global still holds between cases (Megatron's) becomes garbage only in a later case,
    and frozen it would never be collected (a campaign on the H200 leaked tens of GiB that way).
    The import-time heap is frozen once, when the SUT starts (worker.serve)."""
    gc.collect()


_holder_shown = False


def _holder_chain(obj, mine, depth: int = 6) -> str:
    """The types on one path of referrers from `obj` up (who keeps it alive), skipping frames
    and `mine` (the caller's list that holds `obj`)."""
    chain, seen = [], {id(obj), id(mine)}
    for _ in range(depth):
        refs = [r for r in gc.get_referrers(obj) if id(r) not in seen and not inspect.isframe(r)]
        if not refs:
            break
        obj = refs[0]
        seen.update((id(obj), id(refs)))
        name = type(obj).__name__
        if isinstance(obj, dict):  # an instance's __dict__ or a module's globals: say whose
            owner = [r for r in gc.get_referrers(obj) if getattr(r, "__dict__", None) is obj]
            name = f"dict of {type(owner[0]).__name__}" if owner else ("globals of " + obj["__name__"]
                                                                       if "__name__" in obj else "dict")
        chain.append(name)
    return " < ".join(chain)


def release_stray_graphs(trace: bool = False) -> int:
    """Resets the CUDA graphs still alive after a case and returns how many there were. Between
    cases no graph may run, but a framework global can keep a finished case's graphs referenced
    (megatron-core 0.19.2 on the H200: 6 more alive after each per-layer case, their pools
    reserved, up to out-of-memory errors in later cases); reset() gives the pool back."""
    global _holder_shown
    stray = [o for o in gc.get_objects() if isinstance(o, torch.cuda.CUDAGraph)]
    if stray and trace and not _holder_shown:
        _holder_shown = True
        print(f"recap_drivers: a CUDA graph alive after its case is held by: CUDAGraph < {_holder_chain(stray[0], stray)}",
              file=sys.stderr, flush=True)
    for g in stray:
        g.reset()
    return len(stray)


def memory_trace(device, name: str, held: int, stray: int):
    """With RECAP_MEMORY_TRACE=1: after each case, one stderr line with what the allocator holds,
    how much of it sits in graph pools, and how many graphs outlived the case (a leak's shape)."""
    pools = sum(s["allocated_size"] for s in torch.cuda.memory_snapshot()
                if s.get("segment_pool_id", (0, 0)) != (0, 0))
    print(f"recap_drivers: memory after case {name!r}: held {held >> 20} MiB, peak in the case "
          f"{torch.cuda.max_memory_allocated(device) >> 20} MiB, allocated "
          f"{torch.cuda.memory_allocated(device) >> 20} MiB, in graph pools {pools >> 20} MiB, reserved "
          f"{torch.cuda.memory_reserved(device) >> 20} MiB, {stray} CUDA graphs outlived it (reset)",
          file=sys.stderr, flush=True)


_leak_reported = False


def leak_report(held: int):
    """With RECAP_LEAK_REPORT=MiB: once `held` passes it, the allocation sites of the blocks still
    allocated (torch's memory history), largest first, on stderr: where a leak comes from."""
    global _leak_reported
    mib = os.environ.get("RECAP_LEAK_REPORT")
    if not mib or _leak_reported or held < (int(mib) << 20):
        return
    _leak_reported = True
    allocation_sites(f"leak report at {held >> 20} MiB held")


def allocation_sites(title: str):
    """The blocks allocated now, grouped by the Python frames that allocated them, largest first,
    on stderr (needs the memory history that RECAP_LEAK_REPORT turns on)."""
    sites: Dict[str, List[int]] = {}
    for seg in torch.cuda.memory._snapshot().get("segments", []):
        for b in seg.get("blocks", []):
            if b.get("state") != "active_allocated":
                continue
            frames = [f for f in b.get("frames", []) if f.get("filename", "").endswith(".py")]
            key = " < ".join(f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}" for f in frames[:8]) or "?"
            e = sites.setdefault(key, [0, 0])
            e[0] += b.get("size", 0)
            e[1] += 1
    print(f"recap_drivers: {title}, by allocation site:", file=sys.stderr)
    for key, (size, n) in sorted(sites.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"  {size >> 20} MiB in {n} blocks: {key}", file=sys.stderr)
    sys.stderr.flush()


# Planted driver faults, for testing recap's oracles (PROTOCOL.md, "Planted driver faults"). Off
# unless RECAP_DRIVER_FAULT names one; read once, here, so that off costs one comparison per reply.
#   wrong-mask-frame     the first forward mask frame of step 0 reports one element flipped, while
#                        the run used the true mask (recap's fp64 oracles must see it; tests/cli:
#                        sut_torch_eager); nothing else reads the frames.
#   no-recompute-draws   the reply drops every recompute draw (entries and frames).
#   drop-recompute-mask  the reply drops one recompute draw: the first recompute entry of the first
#                        step that has one.
#   no-graphs            on a CPU worker: per-layer and full-iteration cases run eagerly, steps
#                        after warmup labelled "replay", no capture or replay observed (a driver
#                        that forgot to build its graphs); the hello lists those executors.
#   twin-fails           a case without any checkpoint fails: RuntimeError "planted fault twin-fails".
DRIVER_FAULTS = ("wrong-mask-frame", "no-recompute-draws", "drop-recompute-mask", "no-graphs", "twin-fails")
_FAULT = os.environ.get("RECAP_DRIVER_FAULT", "")
_WRONG_MASK_FRAME = _FAULT == "wrong-mask-frame"


def _observed_masks(steps: list) -> List[List[dict]]:
    """The mask entries a reply reports per step: all of them, unless a planted fault drops some."""
    out = [list(s.masks) for s in steps]
    if _FAULT == "no-recompute-draws":
        out = [[m for m in ms if m["pass"] != "recompute"] for ms in out]
    elif _FAULT == "drop-recompute-mask":
        for ms in out:
            i = next((i for i, m in enumerate(ms) if m["pass"] == "recompute"), -1)
            if i >= 0:
                del ms[i]
                break
    return out


def _skipped_reply(rid, names: List[str], reason: str, run_ms: float) -> Tuple[dict, list]:
    return {"op": "observation", "id": rid, "status": "skipped", "reason": reason, "param_names": names,
            "steps": [], "memory": RunRecord(names, []).memory, "graphs": {"captures": {}},
            "timings": {"run_ms": run_ms}}, []


# ---- CUDA error names ------------------------------------------------------------------------

_CUDA_ERROR_STRINGS = {
    "operation not permitted when stream is capturing": "cudaErrorStreamCaptureUnsupported",
    "operation failed due to a previous error during capture": "cudaErrorStreamCaptureInvalidated",
    "capture was not initiated in this stream": "cudaErrorStreamCaptureUnmatched",
    "capture sequence contains a merge of two independent capture sequences": "cudaErrorStreamCaptureMerge",
    "the capture sequence contains a fork that was not joined to the primary stream": "cudaErrorStreamCaptureUnjoined",
    "contains a fork that was not joined": "cudaErrorStreamCaptureUnjoined",
    "dependency created on uncaptured work in another stream": "cudaErrorStreamCaptureIsolation",
    "would make the legacy stream depend on a capturing blocking stream": "cudaErrorStreamCaptureImplicit",
    "not permitted on an event last recorded in a capturing stream": "cudaErrorCapturedEvent",
    "attempt to terminate a thread-local capture sequence from another thread": "cudaErrorStreamCaptureWrongThread",
    "an illegal memory access was encountered": "cudaErrorIllegalAddress",
    "out of memory": "cudaErrorMemoryAllocation",
    "invalid argument": "cudaErrorInvalidValue",
    "device-side assert triggered": "cudaErrorAssert",
}
_STICKY = {"cudaErrorIllegalAddress", "cudaErrorAssert", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
           "cudaErrorMisalignedAddress"}


def _one_line(s: str, limit: int = 1000) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def cuda_error_name(message: str) -> str:
    m = re.search(r"\b(cudaError[A-Za-z]+)\b", message)
    if m:
        return m.group(1)
    low = message.lower()
    for k, v in _CUDA_ERROR_STRINGS.items():
        if k in low and ("cuda" in low or "captur" in low):
            return v
    return ""


def cuda_api_name(message: str) -> str:
    for m in re.finditer(r"\b(cuda[A-Z][A-Za-z]+)\b", message):
        if not m.group(1).startswith("cudaError"):
            return m.group(1)
    return ""


def _root_exception(e: BaseException) -> BaseException:
    """The first exception of an implicit chain (a failed capture's capture_end in __exit__ raises
    a second one whose __context__ is the cause)."""
    seen = set()
    while e.__context__ is not None and not e.__suppress_context__ and id(e) not in seen:
        seen.add(id(e))
        e = e.__context__
    return e


def _layer_from_traceback(tb) -> str:
    """The innermost recap layer a traceback passes through: a module's forward (self) or a
    reentrant checkpoint's CheckpointFunction.backward (ctx.run_function)."""
    found = ""
    while tb is not None:
        loc = tb.tb_frame.f_locals
        for cand in (loc.get("self"), getattr(loc.get("ctx"), "run_function", None), loc.get("function"),
                     loc.get("fn")):
            path = getattr(cand, "recap_path", None)
            if isinstance(path, str) and path:
                found = path
        tb = tb.tb_next
    return found.split(".")[0] if found else ""


_GRAPH_LINES: Dict[Any, Tuple[set, set]] = {}


def graph_lines(fn) -> Tuple[set, set]:
    """Absolute line numbers of a framework function's body: those inside a
    `with torch.cuda.graph(...)` block (capture), and those of statements that call
    torch.autograd.grad (its backward). Read once per function from its source, so that a
    traceback's line tells warmup from capture without patching anything."""
    key = getattr(fn, "__code__", fn)
    if key in _GRAPH_LINES:
        return _GRAPH_LINES[key]
    capture, grad = set(), set()
    try:
        import textwrap

        src, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(src)))
        for node in ast.walk(tree):
            if isinstance(node, ast.With):
                for item in node.items:
                    ce = item.context_expr
                    f = ce.func if isinstance(ce, ast.Call) else None
                    if (getattr(f, "attr", None) or getattr(f, "id", None)) == "graph":
                        capture.update(range(node.lineno + start - 1, (node.end_lineno or node.lineno) + start))
            if isinstance(node, (ast.Assign, ast.Expr, ast.AnnAssign)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Call) and getattr(sub.func, "attr", None) == "grad":
                        grad.update(range(node.lineno + start - 1, (node.end_lineno or node.lineno) + start))
    except Exception:
        pass
    _GRAPH_LINES[key] = (capture, grad)
    return capture, grad


def _locate_in_make_graphed_callables(tb) -> Optional[dict]:
    """Where in torch.cuda.make_graphed_callables a failure happened: phase (warmup: its own
    warmup iterations; capture: inside torch.cuda.graph), pass and the callable's index. Read from
    the traceback (line numbers and the frame's locals), so nothing is patched."""
    frame = None
    lineno = 0
    while tb is not None:
        co = tb.tb_frame.f_code
        if co.co_name == "make_graphed_callables" and co.co_filename.replace("\\", "/").endswith("torch/cuda/graphs.py"):
            frame, lineno = tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    if frame is None:
        return None
    capture, grad = graph_lines(torch.cuda.make_graphed_callables)
    loc = frame.f_locals
    phase = "capture" if lineno in capture else "warmup"
    pass_ = "backward" if lineno in grad else "forward"
    index = -1
    try:
        if pass_ == "backward" and phase == "capture" and "bwd_graph" in loc and "bwd_graphs" in loc:
            index = [id(g) for g in loc["bwd_graphs"]].index(id(loc["bwd_graph"]))
        elif "func" in loc and "callables" in loc:
            index = [id(c) for c in loc["callables"]].index(id(loc["func"]))
    except Exception:
        index = -1
    return {"phase": phase, "pass": pass_, "index": index, "line": lineno}


# ---- records ---------------------------------------------------------------------------------


@dataclass
class StepRecord:
    step: int
    phase: str
    losses: List[float]
    masks: List[dict]
    ms: float
    grads_mb: List[List[torch.Tensor]]  # [microbatch][param], after that microbatch's backward
    grads: List[torch.Tensor]  # after the step's last backward
    params: List[torch.Tensor]  # after the update
    replays: Dict[str, int] = field(default_factory=dict)  # graph replays observed, by label


@dataclass
class RunRecord:
    param_names: List[str]
    param_shapes: List[Tuple[int, ...]]
    steps: List[StepRecord] = field(default_factory=list)
    failure: Optional[dict] = None
    memory: Dict[str, int] = field(default_factory=lambda: {
        "capture_peak_bytes": 0, "replay_peak_bytes": 0, "graph_pool_bytes": 0,
        "activations_in_graphs_bytes": 0, "activations_eager_bytes": 0})
    run_ms: float = 0.0
    fatal: bool = False
    notes: List[str] = field(default_factory=list)
    captures: Dict[str, int] = field(default_factory=dict)  # graph captures observed, by label


def _f32_bits(x: float) -> bytes:
    return struct.pack("<f", x)


def _to_f32(x: float) -> float:
    if math.isnan(x) or math.isinf(x):
        return x
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def first_difference(a: RunRecord, b: RunRecord) -> str:
    """The name of the first tensor where two runs differ bitwise ("" when identical)."""
    if (a.failure is None) != (b.failure is None):
        return "failure"
    if len(a.steps) != len(b.steps):
        return "steps"
    for sa, sb in zip(a.steps, b.steps):
        s = sa.step
        for m, (la, lb) in enumerate(zip(sa.losses, sb.losses)):
            if _f32_bits(la) != _f32_bits(lb):
                return f"loss {s} {m}"
        ma = {(x["layer"], x["op"], x["microbatch"], x["pass"], x["index"]): x["digest"] for x in sa.masks}
        mb = {(x["layer"], x["op"], x["microbatch"], x["pass"], x["index"]): x["digest"] for x in sb.masks}
        if ma != mb:
            for k in sorted(set(ma) | set(mb)):
                if ma.get(k) != mb.get(k):
                    return f"mask {s} {k[2]} {k[3]} {k[0]} {k[1]} {k[4]}"
        for m, (ga, gb) in enumerate(zip(sa.grads_mb, sb.grads_mb)):
            for i, (x, y) in enumerate(zip(ga, gb)):
                if not torch.equal(x.view(torch.int32), y.view(torch.int32)):
                    return f"grad {s} {m} {i}"
        for i, (x, y) in enumerate(zip(sa.params, sb.params)):
            if not torch.equal(x.view(torch.int32), y.view(torch.int32)):
                return f"param {s} {i}"
    return ""


# ---- one execution of a case -----------------------------------------------------------------


class Runner:
    def __init__(self, sut: "TorchSUT", c: case_mod.Case, data: "RunData"):
        self.sut = sut
        self.case = c
        self.data = data
        self.dev = sut.device
        self.cuda = self.dev.type == "cuda"
        self.dt = layers_mod.TORCH_DTYPES[c.dtype]
        self.run_base = torch.cuda.memory_allocated() if self.cuda else 0
        torch.manual_seed(c.seed_rng)  # seeds the CPU and every CUDA generator
        self.model = self.make_model()
        self.model.load(data.params)
        self.params = self.model.params
        for p in self.params:
            p.grad = torch.zeros_like(p)
        M = c.microbatches
        shape = (c.tokens, c.hidden)
        self.inp = [torch.zeros(shape, dtype=self.dt, device=self.dev) for _ in range(M)]
        self.tgt = [torch.zeros(shape, dtype=self.dt, device=self.dev) for _ in range(M)]
        self.gbuf = [[torch.zeros_like(p) for p in self.params] for _ in range(M)]
        self.order = c.order()
        self.last_backward = -1
        b = 0
        for e in self.order:
            if e < 0:
                self.last_backward = b
                b += 1
        self.obs = observe.MaskObserver(self.dev)
        plan = []
        for s in case_mod.drop_sites(c):
            for m in range(M):
                for ps in ("forward", "recompute"):
                    plan.append(((s.layer, s.op, m, ps), s.numel))
        self.obs.plan(plan)
        self.graphs = observe.graph_observer
        self.graphs.resolvers = self.graph_resolvers()
        self.record = RunRecord(self.model.param_names, [tuple(p.shape) for p in self.params])
        self.pos = observe.position
        self.pos.set(phase="", pass_="", layer="", microbatch=-1, step=-1)
        self.graphed_fns: Dict[Tuple[int, int], Any] = {}
        self.graph = None
        self.static_losses = None
        self.mem_eager = 0
        self.side = sut.side_stream  # one per worker: a new stream gets new cuBLAS workspaces
        self.body_activations = 0
        self.graph_fwd_bytes: Dict[Tuple[int, int], int] = {}
        self.layer_names = c.layer_names()
        self.mgc_layers: List[int] = []

    def make_model(self):
        return layers_mod.Model(self.case, self.dev)

    def graph_resolvers(self) -> list:
        """Functions that name the layer of a graph being captured (GraphObserver)."""
        return [observe.mgc_label]

    # -- pieces --

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def load_data(self, step: int):
        with torch.no_grad():
            for m in range(self.case.microbatches):
                self.inp[m].copy_(self.data.inputs[(step, m)].to(self.dev, self.dt))
                self.tgt[m].copy_(self.data.targets[(step, m)].to(self.dev, self.dt))

    def call_eager(self, l: int, m: int, x):
        return self.model.layers[l](x)

    def call_replay(self, l: int, m: int, x):
        fn = self.graphed_fns.get((l, m))
        if fn is None:
            return self.model.layers[l](x)
        return fn(x, *self.model.layer_params(l))

    def body(self, call_layer) -> List[torch.Tensor]:
        """One training step's work (eager, or captured whole)."""
        c = self.case
        for p in self.params:
            p.grad.zero_()
        losses: List[Optional[torch.Tensor]] = [None] * c.microbatches
        held = [0] * c.microbatches  # bytes each microbatch's forward left allocated
        inflight: List[int] = []
        peak = 0
        f = b = 0
        for e in self.order:
            if e > 0:
                m = f
                f += 1
                self.obs.microbatch = m
                self.pos.set(pass_="forward", microbatch=m, layer="")
                a0 = self.obs.allocated()
                x = self.inp[m].detach().requires_grad_(True)
                for l in range(len(c.layers)):
                    self.pos.set(pass_="forward", layer=self.layer_names[l])
                    x = call_layer(l, m, x)
                self.pos.set(layer="loss")
                losses[m] = layers_mod.mse_loss(x, self.tgt[m])
                del x
                held[m] = max(0, self.obs.allocated() - a0)
                inflight.append(m)
                peak = max(peak, sum(held[k] for k in inflight))
            else:
                m = b
                b += 1
                self.obs.microbatch = m
                self.pos.set(pass_="backward", microbatch=m, layer="")
                losses[m].backward()
                for i, p in enumerate(self.params):
                    self.gbuf[m][i].copy_(p.grad)
                if m in inflight:
                    inflight.remove(m)
        self.body_activations = peak
        self.pos.set(pass_="", layer="", microbatch=-1)
        with torch.no_grad():
            for p in self.params:
                p.add_(p.grad, alpha=-c.lr)
        return losses

    def finish(self, step: int, phase: str, losses, t0: float, graph_keys: bool) -> StepRecord:
        self.sync()
        # recap stores a loss as fp32 (accumulated in double): report the double rounded to fp32
        vals = [_to_f32(float(l.item())) if l is not None else float("nan") for l in losses]
        grads_mb = [[g.detach().float().cpu().clone() for g in row] for row in self.gbuf]
        grads = grads_mb[self.last_backward] if self.last_backward >= 0 else []
        # in recap's layout, as the gradients are (megatron keeps qkv rows in its own order)
        layout = getattr(self.model, "recap_layout", None)
        params = [(layout(i, p.detach()) if layout else p.detach()).float().cpu().clone()
                  for i, p in enumerate(self.params)]
        masks = self.obs.collect(graph_keys)
        return StepRecord(step, phase, vals, masks, (time.perf_counter() - t0) * 1e3, grads_mb, grads, params,
                          self.graphs.take_replays())

    def eager_step(self, step: int, phase: str, on_side: bool = False) -> StepRecord:
        t0 = time.perf_counter()
        self.pos.set(phase=phase, step=step)
        self.load_data(step)
        self.obs.begin_step()
        if on_side and self.cuda:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                losses = self.body(self.call_eager)
            torch.cuda.current_stream().wait_stream(self.side)
        else:
            losses = self.body(self.call_eager)
        rec = self.finish(step, phase, losses, t0, graph_keys=False)
        self.mem_eager = max(self.mem_eager, self.body_activations)
        return rec

    def replay_step(self, step: int) -> StepRecord:
        t0 = time.perf_counter()
        self.pos.set(phase="replay", step=step)
        self.load_data(step)
        self.obs.begin_step()
        if self.cuda:
            self.sync()
            torch.cuda.reset_peak_memory_stats()
        if self.graph is not None:
            self.graph.replay()
            losses = self.static_losses
        else:
            losses = self.body(self.call_replay)
        rec = self.finish(step, "replay", losses, t0, graph_keys=True)
        if self.cuda:
            m = self.record.memory
            m["replay_peak_bytes"] = max(m["replay_peak_bytes"], torch.cuda.max_memory_allocated() - self.run_base)
        return rec

    # -- failures --

    def failure(self, e: BaseException, phase: str, mgc: Optional[dict] = None) -> dict:
        root = _root_exception(e)
        msg = _one_line(str(root) or type(root).__name__)
        full = str(root) + " " + str(e)
        err = cuda_error_name(full) or type(root).__name__
        pos = self.pos
        f = {"phase": phase, "pass": pos.pass_, "layer": pos.layer, "microbatch": pos.microbatch,
             "step": pos.step, "api": cuda_api_name(full), "error": err, "message": msg}
        if mgc is not None:
            f["phase"] = mgc["phase"]
            f["pass"] = mgc["pass"]
            if 0 <= mgc["index"] < len(self.mgc_layers):
                f["layer"] = self.layer_names[self.mgc_layers[mgc["index"]]]
        tb_layer = _layer_from_traceback(root.__traceback__) or _layer_from_traceback(e.__traceback__)
        if tb_layer and (f["pass"] == "backward" or not f["layer"]):
            f["layer"] = tb_layer
        if err in _STICKY:
            self.record.fatal = True
        if err == "cudaErrorMemoryAllocation" and os.environ.get("RECAP_LEAK_REPORT") and torch.cuda.is_available():
            allocation_sites(f"out of memory in the {phase} of case {self.case.name!r}")  # what filled it
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        return f

    def _recover(self):
        try:
            self.sync()
        except Exception as e:  # the context is gone: the worker must not serve another case
            self.record.fatal = True
            print(f"recap worker: CUDA context unusable after a failure: {_one_line(str(e))}", file=sys.stderr)

    # -- executors --

    def run(self) -> RunRecord:
        t0 = time.perf_counter()
        if self.cuda:
            self.graphs.install()
        self.graphs.begin_run()
        self.obs.start()
        try:
            ex = self.case.executor
            if _FAULT == "twin-fails" and not self.case.any_checkpoint():
                self.record.failure = {"phase": "eager" if ex == "eager" else "warmup", "pass": "", "layer": "",
                                       "microbatch": -1, "step": 0, "api": "", "error": "RuntimeError",
                                       "message": "planted fault twin-fails"}
            elif ex == "eager":
                self._run_eager()
            elif not self.cuda and _FAULT == "no-graphs":
                self._run_eager(graphs_forgotten=True)
            elif ex == "per-layer":
                self._run_per_layer()
            else:
                self._run_full_iteration()
        finally:
            self.obs.stop()
            self.record.captures = dict(self.graphs.captures)
            self.graphs.end_run()
            self.pos.set(phase="", pass_="", layer="", microbatch=-1, step=-1)
        self.record.memory["activations_eager_bytes"] = int(self.mem_eager)
        self.record.run_ms = (time.perf_counter() - t0) * 1e3
        return self.record

    def _run_eager(self, graphs_forgotten: bool = False):
        for s in range(self.case.steps):
            # the planted fault no-graphs: a graphed case's steps labelled as if graphs ran
            phase = ("warmup" if s < self.case.warmup else "replay") if graphs_forgotten else "eager"
            try:
                self.record.steps.append(self.eager_step(s, phase))
            except Exception as e:
                self.record.failure = self.failure(e, "eager")
                self._recover()
                return

    def _warmup(self) -> bool:
        for s in range(self.case.warmup):
            try:
                self.record.steps.append(self.eager_step(s, "warmup", on_side=True))
            except Exception as e:
                self.record.failure = self.failure(e, "warmup")
                self._recover()
                return False
        return True

    def _replays(self):
        c = self.case
        for s in range(c.warmup, c.steps):
            try:
                self.record.steps.append(self.replay_step(s))
            except Exception as e:
                self.record.failure = self.failure(e, "replay")
                self._recover()
                return

    def _begin_build(self):
        self.sync()
        gc.collect()
        torch.cuda.reset_peak_memory_stats()
        self.pos.set(phase="capture", step=self.case.warmup, pass_="", layer="", microbatch=-1)
        self.obs.mode = "build"

    def _end_build(self, activations: int):
        self.obs.mode = "live"
        self.sync()
        m = self.record.memory
        m["capture_peak_bytes"] = int(max(0, torch.cuda.max_memory_allocated() - self.run_base))
        m["activations_in_graphs_bytes"] = int(activations)
        m["graph_pool_bytes"] = int(observe.pool_bytes())

    def _run_per_layer(self):
        c = self.case
        if not self._warmup():
            return
        graphed = [i for i, l in enumerate(c.layers) if l.graphed]
        if graphed:
            if not self._build_per_layer(graphed):
                return
        self._replays()

    def _graph_fn(self, l: int):
        layer = self.model.layers[l]

        def fn(x, *params):  # params: the layer's parameters, the graph's static input surface
            if not torch.cuda.is_current_stream_capturing():
                return layer(x)
            a0 = self.obs.allocated()
            y = layer(x)
            self.graph_fwd_bytes[(l, self.obs.microbatch)] = max(0, self.obs.allocated() - a0)
            return y

        fn.recap_path = self.layer_names[l]
        return fn

    def _sample(self, l: int):
        c = self.case
        x = torch.zeros((c.tokens, c.hidden), dtype=self.dt, device=self.dev, requires_grad=True)
        return (x,) + tuple(self.model.layer_params(l))

    def _build_per_layer(self, graphed: List[int]) -> bool:
        c = self.case
        mgc = torch.cuda.make_graphed_callables
        sig = inspect.signature(mgc).parameters
        kw = {"num_warmup_iters": c.warmup}
        self._begin_build()
        cuda_rng = torch.cuda.get_rng_state()
        cpu_rng = torch.get_rng_state()
        try:
            if c.shared_pool:
                pool = torch.cuda.graph_pool_handle()
                if "pool" in sig:
                    kw["pool"] = pool
                for m in range(c.microbatches):
                    self.obs.microbatch = m
                    self.pos.set(microbatch=m)
                    self.mgc_layers = list(graphed)
                    fns = tuple(self._graph_fn(l) for l in graphed)
                    samples = tuple(self._sample(l) for l in graphed)
                    outs = mgc(fns, samples, **kw)
                    for l, g in zip(graphed, outs):
                        self.graphed_fns[(l, m)] = g
            else:
                for m in range(c.microbatches):
                    for l in graphed:
                        self.obs.microbatch = m
                        self.pos.set(microbatch=m, layer=self.layer_names[l])
                        self.mgc_layers = [l]
                        self.graphed_fns[(l, m)] = mgc(self._graph_fn(l), self._sample(l), **kw)
        except Exception as e:
            where = _locate_in_make_graphed_callables(_root_exception(e).__traceback__) or \
                _locate_in_make_graphed_callables(e.__traceback__)
            self.record.failure = self.failure(e, "capture", where)
            self.obs.mode = "live"
            self._recover()
            return False
        finally:
            try:
                torch.cuda.set_rng_state(cuda_rng)
                torch.set_rng_state(cpu_rng)
            except Exception:
                pass
        # bytes the forward graphs hold for their backward graphs: with one shared pool the
        # microbatches' captures reuse each other's memory (max), with a pool per graph they add up
        per_mb = [sum(v for (l, m), v in self.graph_fwd_bytes.items() if m == mb) for mb in range(c.microbatches)]
        self._end_build(max(per_mb) if c.shared_pool else sum(per_mb))
        return True

    def _run_full_iteration(self):
        if not self._warmup():
            return
        self._begin_build()
        g = torch.cuda.CUDAGraph()
        self.graphs.label = "iteration"
        try:
            with torch.cuda.graph(g):
                self.static_losses = self.body(self.call_eager)
        except Exception as e:
            self.record.failure = self.failure(e, "capture")
            self.obs.mode = "live"
            self._recover()
            return
        finally:
            self.graphs.label = ""
        self.graph = g
        self._end_build(self.body_activations)
        self._replays()


# ---- request data ----------------------------------------------------------------------------


@dataclass
class RunData:
    params: Dict[str, torch.Tensor]
    inputs: Dict[Tuple[int, int], torch.Tensor]
    targets: Dict[Tuple[int, int], torch.Tensor]


def _frame_tensor(f: Frame) -> torch.Tensor:
    dt = torch.float32 if f.dtype == "f32" else torch.uint8
    if f.numel == 0:
        return torch.zeros(f.shape, dtype=dt)
    return torch.frombuffer(bytearray(f.data), dtype=dt).reshape(f.shape).clone()


def read_run_data(c: case_mod.Case, frames: List[Frame]) -> RunData:
    by_name = {f.name: f for f in frames}
    used = set()

    def get(name: str, shape: Tuple[int, ...]) -> torch.Tensor:
        f = by_name.get(name)
        if f is None:
            raise RequestError(f"missing frame '{name}'")
        if f.dtype != "f32":
            raise RequestError(f"frame '{name}': expected dtype f32, got {f.dtype}")
        if tuple(f.shape) != tuple(shape):
            raise RequestError(f"frame '{name}': expected shape {list(shape)}, got {list(f.shape)}")
        used.add(name)
        return _frame_tensor(f)

    params = {p.name: get(f"param {p.name}", p.shape) for p in case_mod.param_infos(c)}
    shape = (c.tokens, c.hidden)
    inputs, targets = {}, {}
    for s in range(c.steps):
        for m in range(c.microbatches):
            inputs[(s, m)] = get(f"input {s} {m}", shape)
            targets[(s, m)] = get(f"target {s} {m}", shape)
    extra = [f.name for f in frames if f.name not in used]
    if extra:
        raise RequestError(f"unexpected frame '{extra[0]}' (frames are 'param <name>', 'input <step> <mb>', "
                           f"'target <step> <mb>')")
    return RunData(params, inputs, targets)


# ---- the SUT ---------------------------------------------------------------------------------


def _device_state_model() -> str:
    """torch <= 2.11 keeps one device (seed, offset) pair per generator state for all graphs
    (recap's "shared"); later versions key them by capture (CUDAGeneratorCaptureState)."""
    try:
        h = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "cuda", "CUDAGeneratorImpl.h")
        with open(h, "r", encoding="utf-8", errors="replace") as fh:
            return "per-capture" if "CUDAGeneratorCaptureState" in fh.read() else "shared"
    except OSError:
        pass
    v = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if v and (int(v.group(1)), int(v.group(2))) <= (2, 11):
        return "shared"
    return "per-capture"


def setup_determinism():
    torch.use_deterministic_algorithms(True)
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except Exception:
        pass
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception:
        pass
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


class TorchSUT:
    name = "torch"

    def __init__(self, device: str = "auto"):
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda: torch.cuda.is_available() is false")
        self.device = torch.device(device)
        setup_determinism()
        self.graphs = self.device.type == "cuda"
        self.device_state = _device_state_model()
        self.side_stream = torch.cuda.Stream(self.device) if self.graphs else None
        if self.graphs:
            self._prime_cublas()
            # Campaigns run many workers on one GPU: a cap keeps one that leaks from starving the
            # others (its own cases then fail with an out-of-memory error that names it).
            frac = os.environ.get("RECAP_CUDA_MEMORY_FRACTION", "")
            if frac:
                torch.cuda.set_per_process_memory_fraction(float(frac))  # the current device
        # bytes the allocator holds before any case: what is held above it after one is reported
        self.base_allocated = torch.cuda.memory_allocated(self.device) if self.graphs else 0
        self.base_reserved = torch.cuda.memory_reserved(self.device) if self.graphs else 0
        self.retire = False  # worker.serve adds `retire` to the reply and the client replaces us
        self.retire_bytes = int(os.environ.get("RECAP_WORKER_RETIRE_MIB", "1024")) << 20  # 0: never
        if self.graphs and os.environ.get("RECAP_LEAK_REPORT"):
            torch.cuda.memory._record_memory_history(max_entries=200000)

    def _prime_cublas(self):
        """cuBLAS allocates a workspace per (handle, stream) on its first GEMM there: make ours
        now, so an eager step never allocates one (the observer reads the allocator around GEMMs
        only while graphs are built, whose captures make their own)."""
        for st in (torch.cuda.current_stream(self.device), self.side_stream):
            with torch.cuda.stream(st):
                for dt in (torch.float32, torch.bfloat16):
                    a = torch.ones(64, 64, device=self.device, dtype=dt, requires_grad=True)
                    (a @ a).sum().backward()
                    torch.bmm(a.detach()[None], a.detach()[None])
        torch.cuda.synchronize(self.device)

    def _clear_cublas_workspaces(self):
        """torch caches a cuBLAS workspace (32 MiB under CUBLAS_WORKSPACE_CONFIG=:4096:8) per
        (handle, stream) and never frees it; make_graphed_callables warms up on a new stream per
        call and Megatron captures on new streams, so every case left 32 MiB more allocated, up
        to out-of-memory errors in later cases (results/h200/2026-12-01-sut-campaigns). torch's
        own leak checks and cudagraph trees clear them the same way (common_utils.py,
        cudagraph_trees.py). Between cases no graph is alive; ours are made again."""
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
            self._prime_cublas()

    def device_name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return "cpu"

    def capabilities(self) -> dict:
        return {
            "kinds": list(ALL_KINDS),
            "dtype": ["fp32", "bf16"],
            # (the planted fault no-graphs claims graphed executors on a CPU worker)
            "executor": ["eager"] + (["per-layer", "full-iteration"] if self.graphs or _FAULT == "no-graphs" else []),
            "checkpoint": ["none", "full", "selective"],
            "checkpoint_style": ["reentrant", "non-reentrant"],
            "policy": ["naive"],
            "generator": ["graph-safe"],
            "device_state": [self.device_state],
            "warmup_backward": ["backward", "grad-of-inputs"],
            "shared_pool": [True, False],
            "graphs": self.graphs,
            # make_graphed_callables warms up and captures backwards with torch.autograd.grad, and a
            # shared pool follows only the order [1, -1] per microbatch (PROTOCOL.md, section 5)
            "per_layer": {"warmup_backward": ["grad-of-inputs"], "shared_pool_orders": ["default"]},
        }

    def hello(self) -> dict:
        return {"sut": self.name, "version": torch.__version__, "device": self.device_name(),
                "capabilities": self.capabilities()}

    def why_skipped(self, c: case_mod.Case) -> str:
        """"" when the case runs here, else one line: the dimension and why torch cannot run it.
        A dimension that has no effect on the case (recap ignores it too) is not a reason."""
        if c.faults:
            return f"faults {', '.join(c.faults)}: fault points are recap's own runtime's (docs/faults.md)"
        if c.executor not in self.capabilities()["executor"]:
            return (f"executor {c.executor}: needs CUDA graphs, this worker runs on {self.device_name()} "
                    f"(torch.cuda.is_available() is {torch.cuda.is_available()})")
        if c.any_checkpoint():
            if c.checkpoint_style == "without-output":
                return ("checkpoint_style without-output: torch has no CheckpointWithoutOutput (Megatron-LM's "
                        "tensor_parallel.random); torch.utils.checkpoint is reentrant or non-reentrant")
            if c.policy == "skip":
                return ("policy skip: torch.utils.checkpoint has no graph-phase switch that bypasses recompute "
                        "(Megatron-LM PR #3919); torch's checkpoint is the naive policy")
            if c.policy == "graph-safe":
                return ("policy graph-safe: torch.utils.checkpoint saves and restores RNG state with "
                        "get_rng_state/set_rng_state, it has no device (seed, offset) pair read at recompute "
                        "(TransformerEngine); torch's checkpoint is the naive policy")
        draws = c.any_dropout()
        per_layer_graphs = c.executor == "per-layer" and any(l.graphed for l in c.layers)
        graphs_used = c.executor == "full-iteration" or per_layer_graphs
        # the generator decides how a checkpoint saves RNG state (recap: a host generator's
        # get_rng_state synchronizes) even without dropout, and how graphs draw
        if (c.any_checkpoint() or (draws and graphs_used)) and c.generator != "graph-safe":
            return ("generator host: torch's CUDA generator is graph-safe (under capture its draws read a "
                    "device seed/offset and replays refresh it); a generator baking values into graphs is not torch's")
        if draws and graphs_used and c.device_state != self.device_state:
            return (f"device_state {c.device_state}: torch {torch.__version__} keeps its graph RNG state "
                    f"{self.device_state}")
        if per_layer_graphs:
            if c.warmup_backward == "backward":
                return ("warmup_backward backward: torch.cuda.make_graphed_callables warms up and captures every "
                        "backward graph with torch.autograd.grad (grad-of-inputs), never .backward()")
            default = []
            for _ in range(c.microbatches):
                default += [1, -1]
            if c.shared_pool and c.microbatches > 1 and c.order() != default:
                return ("microbatch_order with shared_pool: torch.cuda.make_graphed_callables has no _order "
                        "(TransformerEngine's); one shared pool captured forwards-then-backwards per call "
                        f"cannot follow the order {c.order()}")
        return ""

    def run(self, request: dict, frames: List[Frame]) -> Tuple[dict, List[Frame]]:
        rid = request.get("id")
        if "case" not in request:
            raise RequestError("run: missing 'case'")
        try:
            c = case_mod.parse_case(request["case"], extension_styles=case_mod.EXTENSION_STYLES)
        except case_mod.CaseError as e:
            raise RequestError(f"case: {e}") from None
        data = read_run_data(c, frames)
        mask_frames = bool(request.get("mask_frames", False))
        names = [p.name for p in case_mod.param_infos(c)]
        reason = self.why_skipped(c)
        if reason:
            return _skipped_reply(rid, names, reason, 0.0)
        t0 = time.perf_counter()
        try:
            first = None
            if request.get("determinism_check", False):
                ec = c.with_executor("eager")
                r1 = self._execute(ec, data)
                if r1.fatal:
                    return self._reply(rid, r1, "failed", mask_frames, t0)
                r2 = self._execute(ec, data)
                diff = first_difference(r1, r2)
                if diff:
                    return _skipped_reply(rid, names, f"nondeterministic: {diff}", (time.perf_counter() - t0) * 1e3)
                if c.executor == "eager":
                    first = r1
            rec = first if first is not None else self._execute(c, data)
        except SkipCase as e:
            return _skipped_reply(rid, names, str(e), (time.perf_counter() - t0) * 1e3)
        return self._reply(rid, rec, "failed" if rec.failure else "ok", mask_frames, t0)

    def _execute(self, c: case_mod.Case, data: RunData) -> RunRecord:
        runner = Runner(self, c, data)
        try:
            return runner.run()
        finally:
            del runner
            self.after_case(c)

    def after_case(self, c: case_mod.Case):
        """Frees what the case left and says on stderr when memory stays held (a leak)."""
        collect_between_cases()
        if self.device.type == "cuda":
            try:
                torch.cuda.synchronize()
                self._clear_cublas_workspaces()
                trace = bool(os.environ.get("RECAP_MEMORY_TRACE"))
                stray = release_stray_graphs(trace)
                torch.cuda.empty_cache()
                # a graph's pool keeps its segments reserved with nothing allocated in them: judge both
                held = max(torch.cuda.memory_allocated(self.device) - self.base_allocated,
                           torch.cuda.memory_reserved(self.device) - self.base_reserved)
                if held > (64 << 20):  # a leak across cases: on stderr, the campaign log keeps it
                    print(f"recap_drivers: {held >> 20} MiB still allocated or reserved after case {c.name!r}",
                          file=sys.stderr, flush=True)
                    leak_report(held)
                self.retire = self.retire or (self.retire_bytes > 0 and held > self.retire_bytes)
                if trace:
                    memory_trace(self.device, c.name, held, stray)
                    torch.cuda.reset_peak_memory_stats(self.device)  # the next line's peak is its case's
            except Exception as e:  # never silent: a failing check here hid a leak once
                print(f"recap_drivers: after case {c.name!r}: {type(e).__name__}: {e}"[:300],
                      file=sys.stderr, flush=True)
                self.retire = True  # the process's state is unknown: start a fresh one

    def _reply(self, rid, rec: RunRecord, status: str, mask_frames: bool, t0: float) -> Tuple[dict, List[Frame]]:
        from .observe import _tensor_bytes

        out: List[Frame] = []
        steps = []
        for s, observed in zip(rec.steps, _observed_masks(rec.steps)):
            masks = []
            for mk in observed:
                masks.append({k: v for k, v in mk.items() if not k.startswith("_")})
            steps.append({"step": s.step, "phase": s.phase, "losses": s.losses, "masks": masks,
                          "replays": dict(s.replays), "ms": s.ms})
            for m, row in enumerate(s.grads_mb):
                for i, g in enumerate(row):
                    out.append(Frame(f"grad {s.step} {m} {i}", "f32", tuple(g.shape), _tensor_bytes(g)))
            for i, g in enumerate(s.grads):
                out.append(Frame(f"grad {s.step} {i}", "f32", tuple(g.shape), _tensor_bytes(g)))
            for i, p in enumerate(s.params):
                out.append(Frame(f"param {s.step} {i}", "f32", tuple(p.shape), _tensor_bytes(p)))
            if mask_frames:
                for mk in observed:
                    name = f"mask {s.step} {mk['microbatch']} {mk['pass']} {mk['layer']} {mk['op']} {mk['index']}"
                    data = mk["_bytes"]
                    if _WRONG_MASK_FRAME and s.step == 0 and mk["pass"] == "forward" and not any(
                            f.name.startswith("mask 0 ") for f in out):
                        data = bytes([data[0] ^ 1]) + data[1:]  # the fault: reports what was not applied
                    out.append(Frame(name, "u8", (mk["numel"],), data))
        h = {"op": "observation", "id": rid, "status": status,
             "reason": "" if status == "ok" else (rec.failure or {}).get("message", ""),
             "param_names": rec.param_names, "steps": steps, "memory": rec.memory,
             "graphs": {"captures": dict(rec.captures)}, "timings": {"run_ms": (time.perf_counter() - t0) * 1e3}}
        if rec.failure is not None:
            f = rec.failure
            h["reason"] = _one_line(
                f"{f['phase']} failed" + (f" in the {f['pass']}" if f["pass"] else "") +
                (f" of {f['layer']}" if f["layer"] else "") +
                (f", microbatch {f['microbatch']}" if f["microbatch"] >= 0 else "") +
                (f" (step {f['step']})" if f["step"] >= 0 else "") + f": {f['message']}" +
                (f" [{f['error']}]" if f["error"] and f["error"] not in f["message"] else ""))
            h["failure"] = f
        if rec.fatal:
            h["fatal"] = True
        return h, out
