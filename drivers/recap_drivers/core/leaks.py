"""Memory between cases: freeing what a case left, the CUDA graphs that outlived it, and the
traces that say where a leak comes from (RECAP_MEMORY_TRACE, RECAP_LEAK_REPORT; stderr only)."""

from __future__ import annotations

import gc
import inspect
import os
import sys
from typing import Dict, List

import torch


def collect_between_cases() -> None:
    """Frees the last case's cycles (its graphs, modules, hooks). Never gc.freeze() here: an object
    a framework global still holds between cases (Megatron's) becomes garbage only in a later case,
    and frozen it would never be collected (a campaign on the H200 leaked tens of GiB that way).
    The import-time heap is frozen once, when the SUT starts (worker.serve)."""
    gc.collect()


_holder_shown = False


def _holder_chain(obj: object, mine: object, depth: int = 6) -> str:
    """The types on one path of referrers from `obj` up (who keeps it alive), skipping frames
    and `mine` (the caller's list that holds `obj`)."""
    chain: List[str] = []
    seen = {id(obj), id(mine)}
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


def memory_trace(device: torch.device, name: str, held: int, stray: int) -> None:
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


def leak_report(held: int) -> None:
    """With RECAP_LEAK_REPORT=MiB: once `held` passes it, the allocation sites of the blocks still
    allocated (torch's memory history), largest first, on stderr: where a leak comes from."""
    global _leak_reported
    mib = os.environ.get("RECAP_LEAK_REPORT")
    if not mib or _leak_reported or held < (int(mib) << 20):
        return
    _leak_reported = True
    allocation_sites(f"leak report at {held >> 20} MiB held")


def allocation_sites(title: str) -> None:
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
