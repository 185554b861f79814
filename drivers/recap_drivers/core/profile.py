"""A run's phases in milliseconds, for a run request with "profile": true (PROTOCOL.md, "profile").

Off (the default) the runner holds None and each instrumented place costs one `is None` test: no
clock is read and no synchronization is added. On, the reply's timings.profile holds:

  parse_ms              the case and its frames read into tensors (and copied to the device, once)
  determinism_check_ms  the determinism check's extra runs of the eager form (an eager case's first
                        run is the case's own: its phases are the case's)
  model_build_ms        the runner made: the model built, its parameters loaded
  eager_steps_ms, warmup_ms, replay_ms   the steps, by phase
  capture_ms            the graphs made (torch: between the warmup and the replays; megatron makes
                        them inside a step, so there it is also inside warmup_ms or replay_ms)
  cleanup_ms            what is cleared after the case (leaks.py, the framework's state)
  encode_ms             the reply's header and frames made (the last JSON dump and the write are not)
  h2d_ms, d2h_ms, sync_ms   within the phases above: the step data copied in, the results copied
                        out, torch.cuda.synchronize
  run_ms                the whole request, as timings.run_ms
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Dict, Iterator, Optional


class Profile:
    def __init__(self) -> None:
        self.ms: Dict[str, float] = {}

    def add(self, key: str, ms: float) -> None:
        self.ms[key] = self.ms.get(key, 0.0) + ms

    @contextmanager
    def phase(self, key: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(key, (time.perf_counter() - t0) * 1e3)


_NOTHING: AbstractContextManager[None] = nullcontext()  # reusable: off costs the `is None` test


def phase(prof: Optional[Profile], key: str) -> AbstractContextManager[None]:
    """prof.phase(key), or a context that does nothing when profiling is off."""
    return _NOTHING if prof is None else prof.phase(key)
