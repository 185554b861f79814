"""recap.worker/1 framing: one JSON header line per message, optionally followed by raw frames.

A message is a JSON object on one line terminated by "\\n". When the header has
"frames": [{"name", "dtype", "shape", "nbytes"}, ...], exactly sum(nbytes) raw bytes follow the
newline, frame after frame, little-endian. This module knows nothing of torch.

Errors:
  FrameError     the message was read completely (its payload consumed or known to be absent) but
                 is malformed; the worker answers {"op": "error"} and keeps serving.
  TruncatedError the input ended inside a message (a header without its newline, or fewer payload
                 bytes than announced); the stream cannot be resynchronized: the worker answers
                 {"op": "error"} and exits.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterable, List, Optional, Tuple

DTYPE_SIZE = {"f32": 4, "u8": 1}
# Upper bound on one header line, to fail cleanly on garbage without a newline.
MAX_HEADER_BYTES = 64 * 1024 * 1024


class FrameError(Exception):
    """A complete but malformed message."""

    def __init__(self, message: str, request_id: Any = None):
        super().__init__(message)
        self.request_id = request_id


class TruncatedError(Exception):
    """The input ended in the middle of a message."""


@dataclass
class Frame:
    name: str
    dtype: str  # "f32" | "u8"
    shape: Tuple[int, ...]
    data: bytes = field(repr=False)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def descriptor(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "nbytes": len(self.data)}

    # Host-side conversions without numpy (array/struct), little-endian.
    def floats(self) -> List[float]:
        if self.dtype != "f32":
            raise FrameError(f"frame '{self.name}': expected dtype f32, got {self.dtype}")
        return list(struct.unpack("<%df" % self.numel, self.data))

    @staticmethod
    def from_floats(name: str, shape: Iterable[int], values: Iterable[float]) -> "Frame":
        vals = list(values)
        shape = tuple(int(s) for s in shape)
        return Frame(name, "f32", shape, struct.pack("<%df" % len(vals), *vals))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_descriptors(header: dict) -> Tuple[List[dict], Optional[str]]:
    """Returns (descriptors, problem). When every nbytes is a valid non-negative integer the
    descriptors are returned even if something else is wrong (so the payload can be skipped);
    when an nbytes is unusable, descriptors is [] (no payload can be assumed)."""
    frames = header.get("frames")
    if frames is None:
        return [], None
    if not isinstance(frames, list):
        return [], "frames: expected an array of frame descriptors"
    # First pass: can we know how many bytes follow?
    for i, f in enumerate(frames):
        if not isinstance(f, dict) or not _is_int(f.get("nbytes")) or f["nbytes"] < 0:
            return [], f"frames[{i}].nbytes: expected a non-negative integer (payload length unknown; none assumed)"
    problem = None
    for i, f in enumerate(frames):
        where = f"frames[{i}]"
        name, dtype, shape, nbytes = f.get("name"), f.get("dtype"), f.get("shape"), f["nbytes"]
        if not isinstance(name, str) or not name:
            problem = f"{where}.name: expected a non-empty string"
        elif dtype not in DTYPE_SIZE:
            problem = f"{where}.dtype: expected 'f32' or 'u8', got {json.dumps(dtype)}"
        elif not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            problem = f"{where}.shape: expected an array of non-negative integers"
        else:
            n = 1
            for d in shape:
                n *= d
            if n * DTYPE_SIZE[dtype] != nbytes:
                problem = (f"{where} ('{name}'): nbytes {nbytes} does not match shape {shape} of {dtype} "
                           f"({n * DTYPE_SIZE[dtype]} bytes)")
        if problem:
            break
    return frames, problem


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks = []
    left = n
    while left > 0:
        b = stream.read(left)
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def read_message(stream: BinaryIO) -> Optional[Tuple[dict, List[Frame]]]:
    """Reads one message. Returns None at a clean EOF (before any byte of a message)."""
    line = stream.readline(MAX_HEADER_BYTES + 1)
    if not line:
        return None
    if not line.endswith(b"\n"):
        if len(line) > MAX_HEADER_BYTES:
            raise TruncatedError(f"header line longer than {MAX_HEADER_BYTES} bytes")
        raise TruncatedError(f"input ended inside a header line ({len(line)} bytes without a newline)")
    text = line[:-1]
    if text.endswith(b"\r"):
        text = text[:-1]
    if not text.strip():
        raise FrameError("empty header line")
    try:
        header = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise FrameError(f"header is not UTF-8: {e}") from None
    except json.JSONDecodeError as e:
        raise FrameError(f"malformed JSON header: {e.msg} at column {e.colno}") from None
    if not isinstance(header, dict):
        raise FrameError(f"header must be a JSON object, got {type(header).__name__}")
    rid = header.get("id")
    descs, problem = parse_descriptors(header)
    frames: List[Frame] = []
    for d in descs:
        nbytes = d["nbytes"]
        data = _read_exact(stream, nbytes)
        if len(data) != nbytes:
            raise TruncatedError(f"truncated frame '{d.get('name')}': expected {nbytes} bytes, got {len(data)}")
        if problem is None:
            frames.append(Frame(d["name"], d["dtype"], tuple(d["shape"]), data))
    if problem is not None:
        raise FrameError(problem, rid)
    names = [f.name for f in frames]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise FrameError(f"frame '{dup}' appears twice", rid)
    return header, frames


def _json_safe(v: Any) -> Any:
    """recap's convention: non-finite numbers are the strings "nan", "inf", "-inf"."""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def encode_message(header: dict, frames: Iterable[Frame] = ()) -> bytes:
    frames = list(frames)
    h = dict(header)
    if frames:
        h["frames"] = [f.descriptor() for f in frames]
    line = json.dumps(_json_safe(h), separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    if "\n" in line:  # json.dumps never emits a raw newline; keep the invariant explicit
        raise ValueError("header contains a newline")
    return line.encode("ascii") + b"\n" + b"".join(f.data for f in frames)


def write_message(stream: BinaryIO, header: dict, frames: Iterable[Frame] = ()) -> None:
    stream.write(encode_message(header, frames))
    stream.flush()


def error_message(message: str, request_id: Any = None) -> dict:
    one_line = " ".join(str(message).split())
    h = {"op": "error", "message": one_line}
    if request_id is not None:
        h["id"] = request_id
    return h


def guard_stdout() -> BinaryIO:
    """Keeps the real stdout (fd 1) for protocol messages only: duplicates it, points fd 1 at
    stderr (so C libraries printing to stdout cannot corrupt the stream) and sys.stdout at
    sys.stderr. Returns the binary protocol stream."""
    import os

    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "wb")


if sys.byteorder != "little":  # frames are little-endian; struct '<' handles it, torch paths assume it
    raise ImportError("recap_drivers assumes a little-endian host")
