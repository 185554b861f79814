"""Test helpers: a recap.worker/1 client over a subprocess, and case/data builders."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.dirname(HERE)
sys.path.insert(0, DRIVERS)

from recap_drivers import protocol  # noqa: E402
from recap_drivers import case as case_mod  # noqa: E402
from recap_drivers.protocol import Frame  # noqa: E402


_VALIDATOR = None


def schema_validator():
    """A Draft 2020-12 validator of drivers/schema/recap.worker.schema.json, or None without
    jsonschema."""
    global _VALIDATOR
    if _VALIDATOR is None:
        try:
            import jsonschema
        except ImportError:
            return None
        with open(os.path.join(DRIVERS, "schema", "recap.worker.schema.json")) as f:
            _VALIDATOR = jsonschema.Draft202012Validator(json.load(f))
    return _VALIDATOR


def validate(header: dict, frames=None):
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

    def __init__(self, *args: str, device: str = "cpu", command: List[str] = None, env_extra: dict = None):
        env = dict(os.environ, **(env_extra or {}))
        env["PYTHONPATH"] = DRIVERS + os.pathsep + env.get("PYTHONPATH", "")
        argv = command or [sys.executable, "-m", "recap_drivers", "--sut", "torch", "--device", device, *args]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def send_raw(self, data: bytes):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def send(self, header: dict, frames: List[Frame] = ()):
        if header.get("op") in ("hello", "run", "shutdown"):
            validate(header, list(frames))
        self.send_raw(protocol.encode_message(header, frames))

    def recv(self) -> Tuple[dict, Dict[str, Frame]]:
        msg = protocol.read_message(self.p.stdout)
        if msg is None:
            raise EOFError("worker closed stdout; stderr: " + self.p.stderr.read().decode(errors="replace")[-3000:])
        h, frames = msg
        validate(h, frames)
        return h, {f.name: f for f in frames}

    def request(self, header: dict, frames: List[Frame] = ()):
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
