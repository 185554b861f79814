"""The drivers' shared test helpers: a recap.worker/1 client over a subprocess, case and data
builders, what is installed (torch, CUDA), and the checks the GPU tests share."""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys
import unittest
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from recap_drivers import case as case_mod
from recap_drivers.core import protocol
from recap_drivers.core.protocol import Frame

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.dirname(HERE)

try:
    import torch

    HAVE_TORCH = True
    HAVE_CUDA = bool(torch.cuda.is_available())
except Exception:  # pragma: no cover
    HAVE_TORCH = HAVE_CUDA = False


def make_case(name: str, layers: List[Dict[str, Any]], hidden: int = 8, tokens: int = 4, warmup: int = 1, replays: int = 2,
              **fields: Any) -> Dict[str, Any]:
    """A recap.case/1 case with the tests' usual settings (eager, reentrant naive checkpoints,
    two microbatches, a graph-safe generator, seeds 1 2 3, lr 0.05); `fields` add or replace."""
    c: Dict[str, Any] = {"schema": "recap.case/1", "name": name, "hidden": hidden, "tokens": tokens, "layers": layers,
                         "checkpoint_style": "reentrant", "policy": "naive", "executor": "eager", "warmup": warmup,
                         "replays": replays, "microbatches": 2, "generator": "graph-safe",
                         "seeds": {"param": 1, "data": 2, "rng": 3}, "lr": 0.05}
    c.update(fields)
    return c


# jsonschema is optional (the tests skip schema checks without it) and untyped: its validator is Any.
_VALIDATOR: Any = None
# recap.case/1's schema, which the worker schema's "case" refers to by its $id
CASE_SCHEMA = os.path.join(os.path.dirname(DRIVERS), "reports", "schema", "recap.case.schema.json")
WORKER_SCHEMA = os.path.join(DRIVERS, "schema", "recap.worker.schema.json")


def schema_validator() -> Any:
    """A Draft 2020-12 validator of drivers/schema/recap.worker.schema.json, with recap.case/1's
    schema in its registry, or None without jsonschema."""
    global _VALIDATOR
    if _VALIDATOR is None:
        try:
            import jsonschema
            from referencing import Registry, Resource
        except ImportError:
            return None
        with open(WORKER_SCHEMA) as f:
            worker = json.load(f)
        with open(CASE_SCHEMA) as f:
            case = json.load(f)
        registry: Registry[Any] = Registry().with_resource(case["$id"], Resource.from_contents(case))
        _VALIDATOR = jsonschema.Draft202012Validator(worker, registry=registry)
    return _VALIDATOR


def validate(header: Dict[str, Any], frames: Optional[Sequence[Frame]] = None) -> None:
    """Validates a header (with its frame descriptors) against the schema when jsonschema is
    installed."""
    v = schema_validator()
    if v is None:
        return
    h = dict(header)
    if frames:
        h["frames"] = [f.descriptor() for f in frames]
    v.validate(h)


class Worker:
    """A worker process: the torch driver by default, or any command speaking recap.worker/1
    (`command`, e.g. `recap worker --backend sim`)."""

    def __init__(self, *args: str, device: str = "cpu", command: Optional[List[str]] = None,
                 env_extra: Optional[Dict[str, str]] = None) -> None:
        env = dict(os.environ, **(env_extra or {}))
        env["PYTHONPATH"] = DRIVERS + os.pathsep + env.get("PYTHONPATH", "")
        argv = command or [sys.executable, "-m", "recap_drivers", "--sut", "torch", "--device", device, *args]
        self.p: Any = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def send_raw(self, data: bytes) -> None:
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def send(self, header: Dict[str, Any], frames: Sequence[Frame] = ()) -> None:
        if header.get("op") in ("hello", "run", "measure", "shutdown"):
            validate(header, list(frames))
        self.send_raw(protocol.encode_message(header, frames))

    def recv(self) -> Tuple[Dict[str, Any], Dict[str, Frame]]:
        msg = protocol.read_message(self.p.stdout)
        if msg is None:
            raise EOFError("worker closed stdout; stderr: " + self.p.stderr.read().decode(errors="replace")[-3000:])
        h, frames = msg
        validate(h, frames)
        return h, {f.name: f for f in frames}

    def request(self, header: Dict[str, Any], frames: Sequence[Frame] = ()) -> Tuple[Dict[str, Any], Dict[str, Frame]]:
        self.send(header, frames)
        return self.recv()

    def close(self, timeout: float = 60) -> int:
        try:
            self.p.stdin.close()
        except Exception:
            pass
        try:
            rc = self.p.wait(timeout)
        finally:
            self.p.stdout.close()
            self.stderr_text = self.p.stderr.read().decode(errors="replace")
            self.p.stderr.close()
        return rc


def random_frames(case: dict, seed: int = 0) -> List[Frame]:
    """Random initial parameters (recap-like ranges) and data for every step and microbatch."""
    rnd = random.Random(seed)
    c = case_mod.parse_case(case, extension_styles=case_mod.EXTENSION_STYLES)
    frames = []
    for p in case_mod.param_infos(c):
        n = 1
        for d in p.shape:
            n *= d
        if p.name.endswith(".weight") and len(p.shape) == 1:  # norm gamma
            vals = [1.0 + rnd.uniform(-0.1, 0.1) for _ in range(n)]
        elif len(p.shape) == 1 and ("ln" in p.name or "norm" in p.name):
            vals = [rnd.uniform(-0.1, 0.1) for _ in range(n)]
        else:
            fan_in = p.shape[1] if len(p.shape) == 2 else c.hidden
            b = 1.0 / fan_in ** 0.5
            vals = [rnd.uniform(-b, b) for _ in range(n)]
        frames.append(Frame.from_floats(f"param {p.name}", p.shape, vals))
    shape = (c.tokens, c.hidden)
    for s in range(c.steps):
        for m in range(c.microbatches):
            for kind in ("input", "target"):
                vals = [rnd.uniform(-1, 1) for _ in range(c.tokens * c.hidden)]
                frames.append(Frame.from_floats(f"{kind} {s} {m}", shape, vals))
    return frames


# ---- what the GPU tests check and survey (test_torch_gpu, test_megatron_gpu) ----


def write_survey(name: str, hello: Any, survey: List[Dict[str, Any]], limit: int) -> None:
    """The survey as JSON: in $OUT/<name> when OUT is set, and its first `limit` characters on stderr."""
    text = json.dumps({"hello": hello, "survey": survey}, indent=1)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    sys.stderr.write(text[:limit] + "\n")


MaskRow = Tuple[int, str, str, int, str]  # (step, layer, op, microbatch, pass)


def mask_table(h: Dict[str, Any]) -> Dict[MaskRow, str]:
    return {(s["step"], m["layer"], m["op"], m["microbatch"], m["pass"]): m["digest"]
            for s in h["steps"] for m in s["masks"]}


def recompute_mismatches(h: Dict[str, Any]) -> List[str]:
    t = mask_table(h)
    bad: List[str] = []
    for (s, l, op, mb, ps), d in t.items():
        if ps == "recompute" and t.get((s, l, op, mb, "forward")) != d:
            bad.append(f"step {s} {l} mb {mb}")
    return bad


def graphed_labels(case: Dict[str, Any]) -> Set[str]:
    """The graph labels a graphed case must show: every graphed layer's (per-layer), "iteration"."""
    if case["executor"] == "full-iteration":
        return {"iteration"}
    if case["executor"] != "per-layer":
        return set()
    return {f"{l['kind']}{i}" for i, l in enumerate(case["layers"]) if l.get("graphed", True)}


def check_graphs_observed(test: unittest.TestCase, h: Dict[str, Any], case: Dict[str, Any],
                          per_label: Optional[int] = None) -> None:
    """Every graphed layer (or the whole step) was captured and every replay step replayed it, from
    the observation's own fields (not from the phase labels); per_label: the exact count of
    captures and of replays per replay step of each label, when the executor fixes it."""
    want = graphed_labels(case)
    caps = h["graphs"]["captures"]
    test.assertEqual(set(caps), want, f"captures {caps}")
    for s in h["steps"]:
        if s["phase"] == "replay":
            test.assertEqual(set(s["replays"]), want, f"step {s['step']}: replays {s['replays']}")
        else:
            test.assertEqual(s["replays"], {}, f"step {s['step']} ({s['phase']})")
    if per_label is not None:
        test.assertEqual(caps, {k: per_label for k in want})
        for s in h["steps"]:
            if s["phase"] == "replay":
                test.assertEqual(s["replays"], {k: per_label for k in want}, f"step {s['step']}")


def survey_entry(what: str, case: Dict[str, Any], h: Dict[str, Any], f: Dict[str, Frame],
                 eager: Optional[Tuple[Dict[str, Any], Dict[str, Frame]]] = None) -> Dict[str, Any]:
    """One survey line: what the run said, and how it compares with an eager run (h, frames)."""
    entry: Dict[str, Any] = {"what": what, "executor": case["executor"], "status": h["status"], "reason": h["reason"],
             "failure": h.get("failure"), "memory": h["memory"], "graphs": h.get("graphs"),
             "replays": [s.get("replays") for s in h["steps"]],
             "recompute_mismatches": recompute_mismatches(h)[:6]}
    if eager is not None and h["status"] == "ok":
        eh, ef = eager
        entry["first_diff_vs_eager"] = first_diff(f, ef)
        entry["losses_equal_eager"] = [s["losses"] for s in h["steps"]] == [s["losses"] for s in eh["steps"]]
        mt, et = mask_table(h), mask_table(eh)
        entry["forward_masks_equal_eager"] = all(mt.get(k) == v for k, v in et.items() if k[4] == "forward")
    return entry


def first_diff(fa: Dict[str, Frame], fb: Dict[str, Frame]) -> str:
    for name in sorted(fb):
        if name not in fa or fa[name].data != fb[name].data:
            return name
    return ""


# megatron-core wheels whose own functions the tests run against recap's (test_schedules,
# test_data_parallel): RECAP_MEGATRON_WHEELS, default the repository's .whl/ (scripts/bootstrap.sh test fills it)
WHEELS = os.environ.get("RECAP_MEGATRON_WHEELS", os.path.join(os.path.dirname(DRIVERS), ".whl"))


def megatron_wheels(test: unittest.TestCase) -> List[str]:
    """The megatron-core wheels at hand; the test is skipped, naming the folder, without one."""
    wheels = sorted(glob.glob(os.path.join(WHEELS, "megatron_core-*.whl")))
    if not wheels:
        test.skipTest(f"no megatron-core wheel in {WHEELS} (RECAP_MEGATRON_WHEELS; scripts/bootstrap.sh test downloads them)")
    return wheels
