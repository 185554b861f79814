"""What one execution of a case produced (RunRecord, StepRecord) and the data a run request
carries (RunData, read from its frames)."""

from __future__ import annotations

import math
import struct
import sys
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from .. import case as case_mod
from .cuda_errors import one_line, root_exception
from .download import to_device
from .errors import BuildFailure, RequestError
from .protocol import Frame


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
    graph_pool_bytes: int = 0  # segments held by private (graph) pools when the step ended; 0 on CPU
    graph_pool_used_bytes: int = 0  # of those, the bytes allocated (blocks a tensor holds)


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


def to_f32(x: float) -> float:
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


@dataclass
class RunData:
    params: Dict[str, torch.Tensor]
    inputs: Dict[Tuple[int, int], torch.Tensor]
    targets: Dict[Tuple[int, int], torch.Tensor]

    def on(self, device: torch.device) -> "RunData":
        """The same data on `device`, copied up in one transfer (download.to_device); the CPU takes
        the same path, so the CPU tests run what the GPU runs."""
        keys_p, keys_i, keys_t = list(self.params), list(self.inputs), list(self.targets)
        moved = to_device([self.params[k] for k in keys_p] + [self.inputs[k] for k in keys_i] +
                          [self.targets[k] for k in keys_t], device)
        np_, ni = len(keys_p), len(keys_i)
        return RunData(dict(zip(keys_p, moved[:np_])), dict(zip(keys_i, moved[np_:np_ + ni])),
                       dict(zip(keys_t, moved[np_ + ni:])))


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


def build_failure_record(c: case_mod.Case, e: BuildFailure) -> RunRecord:
    """A failed run whose failure is the framework's exception while building the model (phase
    "build": no step ran; error the exception's type, message its words)."""
    infos = case_mod.param_infos(c)
    rec = RunRecord([p.name for p in infos], [tuple(p.shape) for p in infos])
    cause = root_exception(e.cause)
    rec.failure = {"phase": "build", "pass": "", "layer": e.layer, "microbatch": -1, "step": -1, "api": "",
                   "error": type(cause).__name__,
                   "message": one_line(str(cause) or type(cause).__name__)}
    traceback.print_exception(type(e.cause), e.cause, e.cause.__traceback__, file=sys.stderr)
    return rec
