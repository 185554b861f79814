"""The observation reply (PROTOCOL.md): a run's steps, masks, memory and graphs as a header and
frames; the skipped reply (the skip policy: a SUT that cannot run a case says why in one line,
it never runs a neighbour); and the planted driver faults, which change only what a reply says.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Tuple

from .cuda_errors import one_line
from .observe.digest import tensor_bytes
from .protocol import Frame
from .records import RunRecord, StepRecord

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
FAULT = os.environ.get("RECAP_DRIVER_FAULT", "")
_WRONG_MASK_FRAME = FAULT == "wrong-mask-frame"


def observed_masks(steps: List[StepRecord]) -> List[List[dict]]:
    """The mask entries a reply reports per step: all of them, unless a planted fault drops some."""
    out = [list(s.masks) for s in steps]
    if FAULT == "no-recompute-draws":
        out = [[m for m in ms if m["pass"] != "recompute"] for ms in out]
    elif FAULT == "drop-recompute-mask":
        for ms in out:
            i = next((i for i, m in enumerate(ms) if m["pass"] == "recompute"), -1)
            if i >= 0:
                del ms[i]
                break
    return out


def skipped(rid: Any, names: List[str], reason: str, run_ms: float) -> Tuple[dict, list]:
    """The reply of a case this SUT does not run: the reason, an empty run."""
    return {"op": "observation", "id": rid, "status": "skipped", "reason": reason, "param_names": names,
            "steps": [], "memory": RunRecord(names, []).memory, "graphs": {"captures": {}},
            "timings": {"run_ms": run_ms}}, []


def observation(rid: Any, rec: RunRecord, status: str, mask_frames: bool, t0: float) -> Tuple[dict, List[Frame]]:
    """The observation reply of a run (PROTOCOL.md): its header and frames, the masks' frames
    when the request asked for them."""
    out: List[Frame] = []
    steps = []
    for s, observed in zip(rec.steps, observed_masks(rec.steps)):
        masks = []
        for mk in observed:
            masks.append({k: v for k, v in mk.items() if not k.startswith("_")})
        steps.append({"step": s.step, "phase": s.phase, "losses": s.losses, "masks": masks,
                      "replays": dict(s.replays), "graph_pool_bytes": s.graph_pool_bytes,
                      "graph_pool_used_bytes": s.graph_pool_used_bytes, "ms": s.ms})
        for m, row in enumerate(s.grads_mb):
            for i, g in enumerate(row):
                out.append(Frame(f"grad {s.step} {m} {i}", "f32", tuple(g.shape), tensor_bytes(g)))
        for i, g in enumerate(s.grads):
            out.append(Frame(f"grad {s.step} {i}", "f32", tuple(g.shape), tensor_bytes(g)))
        for i, p in enumerate(s.params):
            out.append(Frame(f"param {s.step} {i}", "f32", tuple(p.shape), tensor_bytes(p)))
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
        h["reason"] = one_line(
            f"{f['phase']} failed" + (f" in the {f['pass']}" if f["pass"] else "") +
            (f" of {f['layer']}" if f["layer"] else "") +
            (f", microbatch {f['microbatch']}" if f["microbatch"] >= 0 else "") +
            (f" (step {f['step']})" if f["step"] >= 0 else "") + f": {f['message']}" +
            (f" [{f['error']}]" if f["error"] and f["error"] not in f["message"] else ""))
        h["failure"] = f
    if rec.fatal:
        h["fatal"] = True
    return h, out


# -- the measure request's replies (recap tradeoff; PROTOCOL.md, "measure") --

def _memory_figures(rec: RunRecord, runner: Any, device: Any, steps: int) -> Dict[str, Optional[int]]:
    """The measurement's bytes: torch's allocator over the timed steps, the device's use at their
    end, the graphs' figures (section 7) when graphs were made; null on the CPU, where torch
    reports no device memory, and where a figure does not apply."""
    none: Dict[str, Optional[int]] = {k: None for k in ("peak_allocated", "peak_reserved", "device_used", "graph_pool",
                                                        "capture_peak", "activations_in_graphs", "activations_eager")}
    if runner is None or getattr(device, "type", "cpu") != "cuda":
        return none
    import torch

    out = dict(none)
    timed = runner.timed[-steps:] if runner.timed else []
    if timed:
        out["peak_allocated"] = int(max(t["peak_allocated"] for t in timed))
        out["peak_reserved"] = int(max(t["peak_reserved"] for t in timed))
    free, total = torch.cuda.mem_get_info(device)
    out["device_used"] = int(total - free)
    m = rec.memory
    if runner.capture_ms is not None:  # graphs were made
        out["graph_pool"] = int(m["graph_pool_bytes"])
        out["capture_peak"] = int(m["capture_peak_bytes"] + runner.run_base)
        out["activations_in_graphs"] = int(m["activations_in_graphs_bytes"])
    if runner.case.executor == "eager":
        out["activations_eager"] = int(m["activations_eager_bytes"])
    return out


def measurement(rid: Any, rec: RunRecord, runner: Any, steps: int, device: Any, t0: float) -> Dict[str, Any]:
    """The reply to a measured run: the last `steps` timed steps (fewer when it failed), the
    capture's time, the memory figures, per layer what the runner says."""
    timed = runner.timed[-steps:] if runner is not None and runner.timed else []
    cuda = getattr(device, "type", "cpu") == "cuda"
    h: Dict[str, Any] = {"op": "measurement", "id": rid, "status": "ok", "reason": "",
                         "clock": "cuda-events" if cuda else "host-clock",
                         "step_ms": [t["ms"] for t in timed],
                         "capture_ms": runner.capture_ms if runner is not None else None,
                         "memory": _memory_figures(rec, runner, device, steps),
                         "per_layer": runner.layer_figures() if runner is not None and cuda else [],
                         "note": "" if cuda else "memory: this worker runs on the CPU, where torch reports no device memory",
                         "failure": "", "timings": {"run_ms": (time.perf_counter() - t0) * 1e3}}
    if rec.failure is not None:
        f = rec.failure
        h["status"] = "failed"
        h["failure"] = h["reason"] = one_line(f"{f['phase']} failed: {f['message']}" +
                                              (f" [{f['error']}]" if f["error"] and f["error"] not in f["message"] else ""))
    if rec.fatal:
        h["fatal"] = True
    return h


def measurement_skipped(rid: Any, reason: str, t0: float) -> Dict[str, Any]:
    """A case this SUT does not run (the same reason a run request gets)."""
    return {"op": "measurement", "id": rid, "status": "skipped", "reason": reason,
            "timings": {"run_ms": (time.perf_counter() - t0) * 1e3}}


def measurement_of_matmul(rid: Any, tflops: Optional[float], why: str, t0: float) -> Dict[str, Any]:
    return {"op": "measurement", "id": rid, "status": "ok", "reason": why, "matmul_bf16_tflops": tflops,
            "timings": {"run_ms": (time.perf_counter() - t0) * 1e3}}
