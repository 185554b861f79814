"""The determinism check's first eager run answers the eager twin's request (PROTOCOL.md, section 6).

In process, on the CPU: graphed executors need CUDA, so the SUT here runs a graphed case's
execution as its eager form (a stand-in that counts executions); what is tested is which requests
execute and that a reused reply is the reply a fresh run gives.
"""

from __future__ import annotations

import unittest
from typing import Any, Dict, List, Tuple

from tests.helpers import HAVE_TORCH, make_case, random_frames

if HAVE_TORCH:
    from recap_drivers import case as case_mod
    from recap_drivers.core import worker_faults
    from recap_drivers.frameworks.torch.sut import TorchSUT

CASE = make_case("reuse", [
    {"kind": "block", "heads": 2, "ffn_hidden": 16, "dropout": 0.1, "checkpoint": "full"},
    {"kind": "linear", "dropout": 0.0},
])


def without_timings(h: Dict[str, Any]) -> Dict[str, Any]:
    h = dict(h)
    h.pop("timings", None)
    h.pop("reused", None)
    h.pop("id", None)
    h["steps"] = [{k: v for k, v in s.items() if k != "ms"} for s in h["steps"]]
    return h


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class EagerReuseTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sut = TorchSUT(device="cpu")
        self.executed: List[str] = []
        orig = self.sut.execute

        def execute(c: "case_mod.Case", data: Any, prof: Any = None) -> Any:
            self.executed.append(c.executor)
            return orig(c.with_executor("eager"), data, prof)

        self.sut.execute = execute  # type: ignore[method-assign]
        self.sut.why_skipped = lambda c: ""  # type: ignore[method-assign]
        self.next_id = 0

    def run_request(self, case: Dict[str, Any], frames: Any, **opts: Any) -> Tuple[Dict[str, Any], Any]:
        self.next_id += 1
        h, out = self.sut.run(dict({"op": "run", "id": self.next_id, "case": case}, **opts), frames)
        self.assertEqual(h["status"], "ok", h.get("reason"))
        return h, out

    def test_eager_twin_reuses_the_check_run(self) -> None:
        graphed = dict(CASE, executor="full-iteration")
        frames = random_frames(CASE, seed=3)
        self.run_request(graphed, frames, determinism_check=True)
        self.assertEqual(self.executed, ["eager", "eager", "full-iteration"])
        reused, reused_frames = self.run_request(CASE, frames, mask_frames=True)
        self.assertEqual(self.executed, ["eager", "eager", "full-iteration"])  # nothing ran
        self.assertEqual(reused["reused"], "determinism_check")
        # taken once: the same request again runs, and its reply is the reused one's
        fresh, fresh_frames = self.run_request(CASE, frames, mask_frames=True)
        self.assertEqual(self.executed[-1], "eager")
        self.assertNotIn("reused", fresh)
        self.assertEqual(without_timings(reused), without_timings(fresh))
        self.assertEqual([(f.name, f.data) for f in reused_frames], [(f.name, f.data) for f in fresh_frames])
        self.assertTrue(any(f.name.startswith("mask ") for f in fresh_frames))

    def test_other_data_or_case_runs(self) -> None:
        graphed = dict(CASE, executor="per-layer", warmup_backward="grad-of-inputs")
        frames = random_frames(CASE, seed=3)
        self.run_request(graphed, frames, determinism_check=True)
        n = len(self.executed)
        self.run_request(CASE, random_frames(CASE, seed=4))  # other parameters and data
        self.assertEqual(len(self.executed), n + 1)
        self.run_request(dict(CASE, seeds={"param": 1, "data": 2, "rng": 9}), frames)  # another case
        self.assertEqual(len(self.executed), n + 2)

    def test_planted_fault_on_the_twin_runs_it(self) -> None:
        graphed = dict(CASE, executor="full-iteration")
        frames = random_frames(CASE, seed=3)
        self.run_request(graphed, frames, determinism_check=True)
        n = len(self.executed)
        saved = dict(worker_faults.FAULTS)
        try:
            # a fault armed for the twin's own case must fire in its own execution; "memory-cap" is
            # armed but never reached here: execute is the counting stand-in, which runs clean
            worker_faults.FAULTS.clear()
            worker_faults.FAULTS[worker_faults.case_digest(CASE)[:16]] = "memory-cap"
            self.sut.run({"op": "run", "id": 99, "case": CASE}, frames)
        finally:
            worker_faults.FAULTS.clear()
            worker_faults.FAULTS.update(saved)
        self.assertEqual(len(self.executed), n + 1)


if __name__ == "__main__":
    unittest.main()
