"""Graph-pool uses that Python code takes and never gives back, given back between cases.

torch counts the users of a private graph pool: a capture or a
`torch._C._cuda_beginAllocateCurrentThreadToPool` adds one, `CUDAGraph.reset()` or
`torch._C._cuda_releasePool` takes one away, and the pool's segments are freed only at zero.
torch's own callers pair every begin with a release (torch.cuda.use_mem_pool,
_inductor/cudagraph_trees.py). megatron-core 0.19.2's `alloc_tensor_from_graph_mempool`
(transformer/cuda_graphs.py :279) begins and ends but never releases, once per static buffer it
makes in `CudaGraphManager.global_mempool`: after `delete_cuda_graphs()` the pool stays reserved for
the life of the process (results/FINDINGS.md M6). A worker runs hundreds of cases, so the driver
counts those uses as they happen (a pass-through: the framework's calls are not changed) and gives
them back after each case, when no graph of the case can run any more.
"""

from __future__ import annotations

import collections
from typing import Any, Tuple


class PoolUses:
    """Wraps the two torch._C entry points on `c_module` (torch._C, or a fake in tests)."""

    def __init__(self, c_module: Any) -> None:
        self.c = c_module
        self.begin: Any = getattr(c_module, "_cuda_beginAllocateCurrentThreadToPool", None)
        self.release: Any = getattr(c_module, "_cuda_releasePool", None)
        self.open: "collections.Counter[Tuple[int, Tuple[int, ...]]]" = collections.Counter()
        # (device, pool id) -> uses begun and not released
        self.installed = self.begin is not None and self.release is not None
        if self.installed:
            c_module._cuda_beginAllocateCurrentThreadToPool = self._begin
            c_module._cuda_releasePool = self._release

    @staticmethod
    def _key(device: int, pool: Tuple[int, ...]) -> Tuple[int, Tuple[int, ...]]:
        return (int(device), tuple(pool))

    def _begin(self, device: int, pool: Tuple[int, ...], *rest: Any) -> Any:
        r = self.begin(device, pool, *rest)
        self.open[self._key(device, pool)] += 1
        return r

    def _release(self, device: int, pool: Tuple[int, ...], *rest: Any) -> Any:
        r = self.release(device, pool, *rest)
        key = self._key(device, pool)
        if self.open[key] > 0:  # a release of a use begun through us; others are torch's own
            self.open[key] -= 1
        return r

    def give_back(self) -> int:
        """Releases every use still open; returns how many. Only between cases."""
        n = 0
        for (device, pool), count in list(self.open.items()):
            for _ in range(count):
                self.release(device, pool)
                n += 1
        self.open.clear()
        return n

    def uninstall(self) -> None:
        if self.installed:
            self.c._cuda_beginAllocateCurrentThreadToPool = self.begin
            self.c._cuda_releasePool = self.release
            self.installed = False
