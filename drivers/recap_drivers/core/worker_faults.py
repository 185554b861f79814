"""Planted worker faults (PROTOCOL.md, "Planted worker faults"): a worker that loses its CUDA
context, one killed by SIGKILL in the middle of a capture, one that exhausts its memory cap, each
in exactly one chosen case of a campaign, for testing that recap survives them (issue 21).

Off unless RECAP_WORKER_FAULT is set, read once at import; off, a run request pays one test of an
empty dict. The value is a comma-separated list of KIND@CASE:

  KIND   lost-context | kill-in-capture | memory-cap
  CASE   the case's digest (case_digest: 8 to 64 hex digits, a prefix of the SHA-256 of the case
         as recap sends it, canonical JSON), which `python3 -m recap_drivers.core.worker_faults
         pick REPORT.json` prints for cases of a report

The fault fires in every run request whose case has that digest, in whichever worker process
receives it (so --jobs does not matter), once per request: a campaign's other cases, their
twins (other executors or checkpoints: other digests) and the candidates a shrink tries (other
cases) run clean, and the faulted case fails again when replayed (confirm_failures).

Where each fires, in the request's first execution (the determinism check's first eager run
when the request asks for one):
  lost-context     the first forward of the run, after its first layer. CUDA: a real sticky
                   error, a device-side assert (torch._assert_async of a zero; an out-of-bounds
                   index_select where torch lacks it), synchronized;
                   every later CUDA call of the process fails. CPU (emulated): torch's RuntimeError
                   text for that error is raised, and every later synchronization and run request
                   of the worker fails the same way. Either way the reply is `failed` with
                   `fatal: true` and the worker exits with status 3.
  kill-in-capture  CUDA, a graphed case: SIGKILL inside its first capture (from capture_end's
                   wrapper, before the original runs: the stream is capturing). A case without a
                   capture (eager; every case on the CPU; a graphed case that captured nothing):
                   SIGKILL in step min(warmup, steps - 1), the step a graphed case replays first,
                   after the first layer's forward (not in a determinism check's eager runs of a
                   graphed case).
                   A line on stderr first says where (recap quotes it in the crash's reason).
  memory-cap       the first forward, after its first layer: allocations until the allocator
                   refuses. CUDA with RECAP_CUDA_MEMORY_FRACTION: 1 GiB blocks up to the cap;
                   without a cap, one block larger than the device (nothing is taken from other
                   workers on the GPU). CPU: RLIMIT_AS set 256 MiB above the process's size, then
                   64 MiB blocks until torch's CPU allocator refuses (the limit restored after).
                   torch's own out-of-memory error, the run's failure; the driver retires the
                   worker after it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sys
from typing import Any, Dict, List, Optional, Tuple

KINDS = ("lost-context", "kill-in-capture", "memory-cap")
ENV = "RECAP_WORKER_FAULT"

# torch's text for a sticky CUDA error (c10/cuda/CUDAException, torch 2.11): what the CPU emulation raises
STICKY_TEXT = ("CUDA error: device-side assert triggered\n"
               "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
               "below might be incorrect.\n"
               "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
               "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")


def parse(text: str) -> Tuple[Dict[str, str], str]:
    """{digest prefix: kind} of a RECAP_WORKER_FAULT value, and "" or the one-line problem."""
    out: Dict[str, str] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        kind, at, sel = item.partition("@")
        if kind not in KINDS:
            return {}, f"{ENV}: unknown fault {kind!r} in {item!r} (known: {', '.join(KINDS)})"
        sel = sel.lower()
        if not at or not re.fullmatch(r"[0-9a-f]{8,64}", sel):
            return {}, f"{ENV}: {item!r}: KIND@CASE expected, CASE the case's digest (8 to 64 hex digits)"
        if sel in out and out[sel] != kind:
            return {}, f"{ENV}: case {sel} is given two faults ({out[sel]}, {kind})"
        out[sel] = kind
    return out, ""


def case_digest(case: Any) -> str:
    """The SHA-256 of a case (the request's `case`, or a report's `spec`) as canonical JSON: keys
    sorted, no spaces. recap writes both with one function, so a report's spec and the request's
    case of the same run have the same digest."""
    text = json.dumps(case, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


FAULTS, PROBLEM = parse(os.environ.get(ENV, ""))
pending = ""   # the fault of the request being served ("" none); cleared when it fires
executor = ""  # the request's executor (a determinism check's eager runs of a graphed case capture nothing)
lost = ""      # the emulated lost context's message (CPU): every later sync and request fails with it


def arm(case: Any) -> None:
    """At the start of a run request (only called when FAULTS is not empty)."""
    global pending, executor
    d = case_digest(case)
    pending = next((k for sel, k in FAULTS.items() if d.startswith(sel)), "")
    executor = str(case.get("executor", "eager")) if isinstance(case, dict) else ""
    if pending:
        say(f"armed {pending} for case {d[:16]}")


def disarm() -> None:
    global pending
    pending = ""


def say(text: str) -> None:
    print(f"recap worker: {ENV} {text}", file=sys.stderr, flush=True)


# -- the faults --

def kill(where: str) -> None:
    """SIGKILL to this process, after a line on stderr saying where."""
    say(f"kill-in-capture: SIGKILL {where}")
    os.kill(os.getpid(), signal.SIGKILL)


def at_capture_end(label: str) -> None:
    """From the graph observer's capture_end wrapper, before the original: the stream is capturing."""
    global pending
    if pending == "kill-in-capture":
        pending = ""
        kill(f"inside the capture of graph {label or '?'} (the stream is capturing)")


def at_forward(runner: Any) -> None:
    """From Runner.body after the first layer's forward of a microbatch (megatron: after the
    model's forward), only called when a fault is pending; never inside a capture (a whole-step
    capture runs the body: the fault waits for the next step outside it)."""
    global pending
    pos = runner.pos
    c = runner.case
    if pos.phase == "capture":
        return
    if pending == "kill-in-capture":
        # the request's own case (not a determinism check's eager run of a graphed one), in the step
        # a graphed case replays first: a graphed case on CUDA has been killed in its capture by then
        if c.executor == executor and pos.phase != "capture" and pos.step == min(c.warmup, c.steps - 1):
            pending = ""
            kill(f"in step {pos.step} ({pos.phase}), after the forward of {pos.layer}, microbatch {pos.microbatch}: "
                 f"this case makes no capture ({'executor ' + c.executor if runner.cuda else 'a CPU worker'})")
        return
    kind, pending = pending, ""
    if kind == "lost-context":
        lose_context(runner.dev)
    elif kind == "memory-cap":
        exhaust_memory(runner.dev)


def lose_context(device: Any) -> None:
    import torch

    global lost
    if device.type == "cuda":
        assert_async = getattr(torch, "_assert_async", None)
        if assert_async is not None:  # its kernel asserts that the value is nonzero
            say("lost-context: torch._assert_async of a zero on the device (a device-side assert)")
            assert_async(torch.zeros((), device=device))
        else:
            say("lost-context: an out-of-bounds index_select on the device (a device-side assert)")
            torch.index_select(torch.zeros(4, device=device), 0, torch.full((1,), 1 << 20, dtype=torch.long, device=device))
        torch.cuda.synchronize(device)  # raises the assert: the context is gone
        say("lost-context: the device raised nothing; emulating the error")
    else:
        say("lost-context: emulated on the CPU (torch's text of a sticky CUDA error; every later request fails)")
    lost = STICKY_TEXT
    raise RuntimeError(STICKY_TEXT)


def check_lost() -> None:
    """Raises the emulated lost context's error (CPU), as every CUDA call after a sticky error does."""
    if lost:
        raise RuntimeError(lost)


def _vm_bytes() -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def exhaust_memory(device: Any) -> None:
    import torch

    held: List[Any] = []
    if device.type == "cuda":
        frac = os.environ.get("RECAP_CUDA_MEMORY_FRACTION", "")
        try:
            if frac:
                say(f"memory-cap: 1 GiB blocks until the cap (RECAP_CUDA_MEMORY_FRACTION={frac}) is reached")
                while True:
                    held.append(torch.empty(1 << 30, dtype=torch.uint8, device=device))
            total = torch.cuda.get_device_properties(device).total_memory
            say("memory-cap: no RECAP_CUDA_MEMORY_FRACTION: one block larger than the device")
            held.append(torch.empty(total + (1 << 30), dtype=torch.uint8, device=device))
        finally:
            held.clear()
        raise RuntimeError("RECAP_WORKER_FAULT memory-cap: the allocator never refused")  # not reached
    import resource

    vm = _vm_bytes()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        vm = None
    if vm is None:
        say("memory-cap: no RLIMIT_AS here: one allocation larger than the address space")
        torch.empty(1 << 62, dtype=torch.uint8)
        raise RuntimeError("RECAP_WORKER_FAULT memory-cap: the allocator never refused")  # not reached
    cap = vm + (256 << 20)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    say(f"memory-cap: RLIMIT_AS {cap >> 20} MiB (256 MiB above the process's size), 64 MiB blocks until refused")
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        for _ in range(1 << 16):  # 4 TiB: past any cap
            held.append(torch.empty(64 << 20, dtype=torch.uint8))
    finally:
        held.clear()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    raise RuntimeError("RECAP_WORKER_FAULT memory-cap: the allocator never refused")


# -- choosing cases (the tests and scripts/gpu-check.sh) --

def pick(report: Dict[str, Any], kinds: List[str]) -> List[Tuple[str, int, str]]:
    """A case of a fuzz report for each fault in `kinds`, such that the faults leave every other
    case as it was: each passed, and is the last case its chunk ran (a crashed case is shrunk, and a
    chunk draws the cases after a counterexample from a new seed), one per chunk, spread over the
    campaign; kill-in-capture takes a graphed case (executor not eager) when there is one, so that
    on the GPU it fires inside a capture. (kind, index in the report's cases, digest) each."""
    cases = report.get("cases", [])
    chunks = report.get("summary", {}).get("report_chunks", [])
    if len(chunks) != len(cases):
        raise ValueError("the report's summary.report_chunks does not match its cases")
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"unknown fault {k!r} (known: {', '.join(KINDS)})")
    last: Dict[int, int] = {}
    for i, c in enumerate(chunks):
        last[c] = i
    eligible = [i for c, i in sorted(last.items()) if cases[i].get("disposition") == "passed"]
    if len(eligible) < len(kinds):
        raise ValueError(f"{len(eligible)} chunks end with a passed case, {len(kinds)} wanted "
                         "(more cases, or a smaller --chunk-cases)")
    chosen: Dict[str, int] = {}
    graphed = [i for i in eligible if cases[i]["spec"].get("executor", "eager") != "eager"]
    if "kill-in-capture" in kinds and graphed:
        chosen["kill-in-capture"] = graphed[len(graphed) // 2]
    rest = [i for i in eligible if i not in chosen.values()]
    todo = [k for k in kinds if k not in chosen]
    step = len(rest) / max(1, len(todo))
    for n, k in enumerate(todo):
        chosen[k] = rest[int(n * step)]
    return [(k, chosen[k], case_digest(cases[chosen[k]]["spec"])) for k in kinds]


def main(argv: List[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m recap_drivers.core.worker_faults",
                                 description="Cases for RECAP_WORKER_FAULT (PROTOCOL.md, section 4d).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pick", help="a case of a fuzz report for each fault: `kind index digest` a line")
    p.add_argument("report")
    p.add_argument("kinds", nargs="+", metavar="KIND", help=", ".join(KINDS))
    d = sub.add_parser("digest", help="the digest of case N of a fuzz report (its spec, as recap sends it)")
    d.add_argument("report")
    d.add_argument("case", type=int, help="the index of a case in the report's cases")
    a = ap.parse_args(argv)
    with open(a.report) as f:
        doc = json.load(f)
    if a.cmd == "pick":
        try:
            for k, i, dg in pick(doc, a.kinds):
                print(k, i, dg[:16])
        except ValueError as e:
            print(f"worker_faults: {e}", file=sys.stderr)
            return 1
        return 0
    print(case_digest(doc["cases"][a.case]["spec"])[:16])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
