"""The CUDA graphs a run captures and replays, counted by label (GraphObserver), and the bytes
graph pools hold. Imports torch only
when used: the counting works on any graph class (tests use a fake one)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import worker_faults


class GraphObserver:
    """Counts the CUDA graphs a run captures and replays, by label. torch.cuda.CUDAGraph's
    capture_end and replay are replaced, at class level and once per process, by wrappers that
    call the originals unchanged and then count (a capture_end that raises is no capture).
    Labels: the first of `resolvers` (functions of the graph, reading the Python stack) that names
    one, else `label` (the driver sets "iteration" around a whole-step capture), else "?". A
    replay counts under its graph's label only when that graph was captured in this run (graphs
    of other cases are unknown: begin_run forgets every label)."""

    _MARK = "_recap_graph_observer"

    def __init__(self) -> None:
        self.active = False
        self.label = ""
        self.resolvers: List[Callable[[object], Optional[str]]] = []
        self.captures: Dict[str, int] = {}
        self.replays: Dict[str, int] = {}  # since the last take_replays()
        self._labels: Dict[int, str] = {}  # id(graph) -> label, graphs captured in this run

    # cls: torch.cuda.CUDAGraph or a test's fake graph class, patched at class level (hence Any)
    def install(self, cls: Any = None) -> None:
        if cls is None:
            import torch

            cls = torch.cuda.CUDAGraph
        if cls.__dict__.get(self._MARK) is not None:
            return
        end, replay = cls.capture_end, cls.replay
        obs = self

        def capture_end(graph: object, *args: Any, **kwargs: Any) -> Any:
            if worker_faults.pending:  # a planted worker fault (PROTOCOL.md): SIGKILL while capturing
                worker_faults.at_capture_end(obs.label_of(graph))
            r = end(graph, *args, **kwargs)
            obs._captured(graph)
            return r

        def replay_(graph: object, *args: Any, **kwargs: Any) -> Any:
            r = replay(graph, *args, **kwargs)
            obs._replayed(graph)
            return r

        setattr(capture_end, "__wrapped__", end)
        setattr(replay_, "__wrapped__", replay)
        cls.capture_end, cls.replay = capture_end, replay_
        setattr(cls, self._MARK, self)

    def begin_run(self) -> None:
        self.active = True
        self.label = ""
        self.captures, self.replays, self._labels = {}, {}, {}

    def end_run(self) -> None:
        self.active = False
        self.label = ""
        self._labels = {}

    def take_replays(self) -> Dict[str, int]:
        out, self.replays = self.replays, {}
        return out

    def label_of(self, graph: object) -> str:
        label = None
        for r in self.resolvers:
            try:
                label = r(graph)
            except Exception:
                label = None
            if label:
                break
        return label or self.label or "?"

    def _captured(self, graph: object) -> None:
        if not self.active:
            return
        label = self.label_of(graph)
        self.captures[label] = self.captures.get(label, 0) + 1
        self._labels[id(graph)] = label

    def _replayed(self, graph: object) -> None:
        label = self._labels.get(id(graph)) if self.active else None
        if label is not None:
            self.replays[label] = self.replays.get(label, 0) + 1


def pool_figures() -> Tuple[int, int]:
    """Bytes of the segments the caching allocator holds in private (graph) pools, and the bytes
    allocated in them (blocks a tensor holds); (0, 0) without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return 0, 0
    try:
        segs = torch.cuda.memory_snapshot()
    except Exception:
        return 0, 0
    total = used = 0
    for s in segs:
        pid = s.get("segment_pool_id", (0, 0))
        if tuple(pid) != (0, 0):
            total += int(s.get("total_size", 0))
            used += int(s.get("allocated_size", 0))
    return total, used


def pool_allocated(pool: Optional[Tuple[int, int]]) -> int:
    """Bytes allocated (blocks a tensor holds) in one graph pool; 0 for none or without CUDA.
    A capture's figure is the difference of this around it: a tensor from outside the pool freed
    during the capture does not count, as it does in a difference of memory_allocated(). A failed
    snapshot raises (unlike pool_figures): a 0 read as "the graph holds nothing" would pass the
    memory oracle with 0 B against 0 B."""
    import torch

    if pool is None or not torch.cuda.is_available():
        return 0
    return sum(int(s.get("allocated_size", 0)) for s in torch.cuda.memory_snapshot()
               if tuple(s.get("segment_pool_id", (0, 0))) == tuple(pool))


def pool_bytes() -> int:
    """Bytes of segments the caching allocator holds in private (graph) pools."""
    return pool_figures()[0]
