"""The recap.worker/1 request loop, shared by every SUT.

A SUT object provides hello() -> dict (sut, version, device, capabilities) and
run(header, frames) -> (reply header, reply frames); it raises errors.RequestError (or
case.CaseError), with a one-line message, for a request it cannot serve. Exit codes: 0 shutdown or EOF, 2 protocol
mismatch, truncated input or a SUT that is not available, 3 the device became unusable (a sticky
CUDA error) after the reply that reported it, or a rank group lost a rank (errors.GroupLost).
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import traceback
from typing import Any, BinaryIO, Callable, Optional, TextIO

from .. import PROTOCOL
from .errors import REFUSALS, GroupLost
from .protocol import FrameError, TruncatedError, error_message, read_message, write_message


def die_with_parent() -> None:
    """SIGKILL when the process (thread) that started this worker ends, on Linux. A worker in the
    middle of a long request reads no EOF: killed recap's workers went on using the GPU and
    slowed the next run's measurements (results/h200/2026-12-03-issue19-s8)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(0)


def serve(sut_factory: Callable[[], Any], inp: BinaryIO, out: BinaryIO, log: TextIO = sys.stderr) -> int:
    """Serves requests until shutdown or EOF. The SUT is created lazily, on the first request
    that needs it, so a bad environment is reported as an error reply, not a silent death."""
    die_with_parent()
    sut = None
    sut_error: Optional[str] = None

    def get_sut() -> Any:
        nonlocal sut, sut_error
        if sut is None and sut_error is None:
            try:
                sut = sut_factory()
                # The framework's import-time heap (millions of objects with torch's dynamo) is never
                # garbage: frozen, a full collection between cases skips it (~170 ms each otherwise).
                # Only what exists before the first case is frozen.
                gc.collect()
                gc.freeze()
            except Exception as e:
                traceback.print_exc(file=log)
                sut_error = f"cannot start the SUT: {type(e).__name__}: {e}"
        return sut

    while True:
        try:
            msg = read_message(inp)
        except FrameError as e:
            write_message(out, error_message(str(e), e.request_id))
            continue
        except TruncatedError as e:
            write_message(out, error_message(str(e)))
            return 2
        if msg is None:
            return 0
        header, frames = msg
        op = header.get("op")
        rid = header.get("id")
        if not isinstance(op, str):
            write_message(out, error_message("request has no 'op' string (hello, run, shutdown)", rid))
            continue
        if op == "shutdown":
            return 0
        s = get_sut()
        if op == "hello":
            proto = header.get("protocol")
            if proto != PROTOCOL:
                write_message(out, error_message(f"protocol mismatch: this worker speaks {PROTOCOL}, "
                                                 f"the request asks for {proto!r}", rid))
                return 2
            if s is None:
                write_message(out, error_message(sut_error or "no SUT", rid))
                return 2
            h = {"op": "hello", "protocol": PROTOCOL}
            h.update(s.hello())
            write_message(out, h)
            continue
        if op == "run":
            if s is None:
                write_message(out, error_message(sut_error or "no SUT", rid))
                continue
            if rid is None or isinstance(rid, bool) or not isinstance(rid, int):
                write_message(out, error_message("run: 'id' must be an integer", rid))
                continue
            try:
                reply, out_frames = s.run(header, frames)
            except GroupLost as e:  # a rank group that lost a rank cannot serve another request
                write_message(out, error_message(str(e), rid))
                print(f"recap worker: exiting: {e}", file=log)
                return 3
            except REFUSALS as e:  # a request this SUT cannot serve: its one line
                write_message(out, error_message(str(e), rid))
                continue
            except Exception as e:  # a driver bug: answer and keep serving
                traceback.print_exc(file=log)
                text = f"internal error: {type(e).__name__}: {e}"
                write_message(out, error_message(text, rid))
                continue
            if getattr(s, "retire", False):  # its memory grew: the client replaces it (PROTOCOL.md)
                reply["retire"] = True
            write_message(out, reply, out_frames)
            if reply.get("fatal"):
                print("recap worker: exiting after a fatal device error", file=log)
                return 3
            continue
        if op == "measure":  # recap tradeoff (PROTOCOL.md, "measure")
            if s is None:
                write_message(out, error_message(sut_error or "no SUT", rid))
                continue
            if rid is None or isinstance(rid, bool) or not isinstance(rid, int):
                write_message(out, error_message("measure: 'id' must be an integer", rid))
                continue
            try:
                reply = s.measure(header)
            except REFUSALS as e:
                write_message(out, error_message(str(e), rid))
                continue
            except Exception as e:  # a driver bug: answer and keep serving
                traceback.print_exc(file=log)
                write_message(out, error_message(f"internal error: {type(e).__name__}: {e}", rid))
                continue
            if getattr(s, "retire", False):
                reply["retire"] = True
                reply["held_after"] = int(getattr(s, "held_after", 0))  # why: recap tradeoff prints it
            write_message(out, reply)
            if reply.get("fatal"):
                print("recap worker: exiting after a fatal device error", file=log)
                return 3
            continue
        write_message(out, error_message(f"unknown op '{op}' (hello, run, measure, shutdown)", rid))


def same_version(have: str, expected: str) -> bool:
    """The public versions agree, and so do the local parts when both have one. The local part
    ("+cu130") is in torch.__version__, which the hello reports and corpus files record, but not
    always in the wheel's metadata (the H200 image's torch says 2.11.0 there)."""
    h_pub, _, h_loc = have.partition("+")
    e_pub, _, e_loc = expected.partition("+")
    return h_pub == e_pub and (not h_loc or not e_loc or h_loc == e_loc)


def check_version(dist: str, have: Optional[str], expected: str) -> str:
    """"" when the installed framework is the one asked for (or nothing was asked), else one line.
    `have` is what the framework's driver reads without importing it (None: not installed)."""
    if not expected:
        return ""
    if have is None:
        return f"--expect-version {expected}: {dist} is not installed for {sys.executable}"
    if not same_version(have, expected):
        return f"{dist} {have} is installed, {expected} was asked (--expect-version)"
    return ""
