"""Where Megatron draws and captures, read without changing its code: the recap site of a
dropout drawn inside Megatron (resolve_site), where a failure inside its graph creation happened
(locate_in_megatron_graphs), the bytes its forward graph captures keep (CaptureSpans), the
RNG states it uses (rng_values, restore_rng_values), and its graph-buffer reuse state reset
between cases (reset_buffer_reuse)."""

from __future__ import annotations

import sys
from types import FrameType, TracebackType
from typing import Any, Dict, List, Optional, Tuple

import torch

from ...core.observe.graphs import pool_allocated
from ...core.runner import Runner
from ...core.tracebacks import graph_lines

_FRAME_SITES = {"_forward_attention": ".drop1", "_forward_mlp": ".mlp.dropout"}


def resolve_site() -> Optional[Tuple[str, str]]:
    """The recap site of a dropout drawn inside Megatron's code, read from the Python stack: the
    core attention module (tagged with recap_site), or bias_dropout_add called from
    TransformerLayer._forward_attention / _forward_mlp."""
    f: Optional[FrameType] = sys._getframe(2)
    while f is not None:
        slf = f.f_locals.get("self")
        site = getattr(slf, "recap_site", None)
        if site is not None:
            return site
        suffix = _FRAME_SITES.get(f.f_code.co_name)
        if suffix is not None:
            layer = getattr(slf, "recap_layer", None)
            if layer:
                return (layer + suffix, "dropout")
        f = f.f_back
    return None



def locate_in_megatron_graphs(tb: Optional[TracebackType]) -> Optional[Dict[str, str]]:
    """Where a failure inside Megatron's graph creation happened: the innermost frame of
    _CudaGraphRunner.create_fwd_graph / create_bwd_graph or FullCudaGraphWrapper.__call__, whether
    inside its torch.cuda.graph block (capture) or not (warmup), the pass, and the layer."""
    hit = None
    while tb is not None:
        co = tb.tb_frame.f_code
        fn = co.co_filename.replace("\\", "/")
        if (fn.endswith("megatron/core/transformer/cuda_graphs.py") and
                co.co_name in ("create_fwd_graph", "create_bwd_graph")) or \
                (fn.endswith("megatron/core/full_cuda_graph.py") and co.co_name == "__call__"):
            hit = (tb.tb_frame, tb.tb_lineno, co)
        tb = tb.tb_next
    if hit is None:
        return None
    frame, lineno, co = hit
    slf = frame.f_locals.get("self")
    method = getattr(type(slf), co.co_name, None)
    capture, grad = graph_lines(method) if method is not None else (set(), set())
    phase = "capture" if lineno in capture else "warmup"
    if co.co_name == "create_bwd_graph":
        pass_ = "backward"
    elif co.co_name == "create_fwd_graph":
        pass_ = "backward" if lineno in grad else "forward"
    else:
        pass_ = ""
    base = getattr(slf, "base_module", None)
    layer = getattr(base, "recap_path", "") or getattr(base, "recap_layer", "")
    return {"phase": phase, "pass": pass_, "layer": layer, "function": f"{co.co_name}:{lineno}"}


def rng_values(api: Any) -> List[Tuple[str, Any, Any]]:
    """The values (seed, offset) of every RNG state Megatron uses: the CPU generator, the CUDA
    default generator and each tracker state. By value: with use_cudagraphable_rng the tracker's
    states are generator objects the graphs registered, so they are restored in place."""
    out: List[Tuple[str, Any, Any]] = [("cpu", None, torch.get_rng_state())]
    dev = torch.cuda.current_device()
    out.append(("cuda", None, torch.cuda.default_generators[dev].get_state()))
    tracker = api.tensor_parallel.get_cuda_rng_tracker()
    for name, st in tracker.get_states().items():
        if isinstance(st, torch.Generator):
            out.append(("gen", st, st.get_state()))
        else:
            out.append(("tensor", name, st.clone()))
    return out


def restore_rng_values(api: Any, values: List[Tuple[str, Any, Any]]) -> None:
    tracker = api.tensor_parallel.get_cuda_rng_tracker()
    dev = torch.cuda.current_device()
    for kind, obj, v in values:
        if kind == "cpu":
            torch.set_rng_state(v)
        elif kind == "cuda":
            torch.cuda.default_generators[dev].set_state(v)
        elif kind == "gen":
            obj.set_state(v)
        else:
            tracker.states_[obj] = v


def reset_buffer_reuse(cuda_graphs: Any) -> int:
    """Resets what megatron-core 0.16-0.18 keep for reusing graph buffers across graph creations, as a
    new process has it; returns how many buffers the pool had made. delete_cuda_graphs() resets the
    runners and the record but not `_CudagraphGlobalRecord.tensor_reuse_pool` (TensorReusePool: its
    free list, strong references and data_ptr set are class attributes) nor the module's
    fwd/bwd_buffer_reuse_ref_count. Left as they are, a case's graphs take buffers the earlier cases
    of the worker returned, and with an earlier case whose last graphed layer returned its input the
    free list holds the same memory twice (finding M10): a later case's static input and output
    gradient then share memory and its weight gradients are wrong, a failure of the earlier case seen
    in the later one. Only between cases, when no graph of the case can run any more. 0.15 and 0.19
    have no pool: nothing to do."""
    record = getattr(cuda_graphs, "_CudagraphGlobalRecord", None)
    pool = getattr(record, "tensor_reuse_pool", None)
    made = 0
    if pool is not None:
        refs = getattr(pool, "tensor_strong_refs", None)
        made = len(refs) if refs is not None else 0
        for name in ("pool", "tensor_strong_refs", "tensor_strong_refs_dataptrs"):
            v = getattr(pool, name, None)  # class attributes: cleared in place, never rebound
            if v is not None and hasattr(v, "clear"):
                v.clear()
    for name in ("fwd_buffer_reuse_ref_count", "bwd_buffer_reuse_ref_count"):
        if isinstance(getattr(cuda_graphs, name, None), int):
            setattr(cuda_graphs, name, 0)
    return made


class CaptureSpans:
    """Bytes each forward graph capture of Megatron's keeps allocated (its outputs and the
    activations its backward graph reads): torch.cuda.graph's __enter__/__exit__ are wrapped to
    read the bytes allocated in the capture's pool around captures made while a runner is
    building, less the cuBLAS workspaces the capture made; nothing else is changed. The pool,
    not memory_allocated(): a tensor of an earlier microbatch or case freed during the capture
    took a block off the device-wide figure, so the same case read 512 B or 1024 B by what its
    worker ran before (results/h200/2026-12-02-issue20, "M3's witness"). The SUT owns one (the
    wrappers are class-level, installed once). The frame that opened the capture tells forward
    from backward graphs."""

    def __init__(self) -> None:
        self.runner: Optional[Runner] = None
        self.forward_bytes = 0
        self._installed = False
        self._stack: List[Tuple[int, int, bool]] = []

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        g = torch.cuda.graph
        enter, exit_ = g.__enter__, g.__exit__
        spans = self

        def __enter__(this: torch.cuda.graph) -> Any:
            if spans.runner is not None:
                fwd = sys._getframe(1).f_code.co_name == "create_fwd_graph"
                # a shared pool (Megatron's global mempool) holds blocks already; a private
                # one is made by capture_begin, empty
                pools: Tuple[Any, ...] = getattr(this, "pool", ())
                shared = pools[0] if pools else None
                spans._stack.append((pool_allocated(shared), spans.runner.obs.hidden_bytes, fwd))
            return enter(this)

        def __exit__(this: torch.cuda.graph, *exc: Any) -> Any:
            r = exit_(this, *exc)
            if spans.runner is not None and spans._stack:
                a0, h0, fwd = spans._stack.pop()
                if fwd:
                    kept = pool_allocated(this.cuda_graph.pool()) - a0
                    spans.forward_bytes += max(0, kept - (spans.runner.obs.hidden_bytes - h0))
            return r

        setattr(g, "__enter__", __enter__)
        setattr(g, "__exit__", __exit__)

    def begin(self, runner: Runner) -> None:
        self.install()
        self.runner = runner
        self.forward_bytes = 0
        self._stack = []

    def end(self) -> None:
        self.runner = None
        self._stack = []
