"""The run request's "profile" (PROTOCOL.md, "profile"): asked, the observation's timings.profile
holds the driver's phases, every figure a non-negative number and the steps' phases within the
request's time; not asked, no profile key. Structure only: no timing is asserted."""

from __future__ import annotations

import os
import unittest

from .helpers import Worker, make_case, random_frames

DEVICE = os.environ.get("RECAP_DRIVER_DEVICE", "cpu")

CASE = make_case("profile", [
    {"kind": "block", "heads": 2, "ffn_hidden": 16, "dropout": 0.1, "checkpoint": "full"},
    {"kind": "linear", "dropout": 0.0},
])


class ProfileTest(unittest.TestCase):
    w: Worker

    @classmethod
    def setUpClass(cls) -> None:
        cls.w = Worker(device=DEVICE)
        cls.w.request({"op": "hello", "protocol": "recap.worker/1"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.w.close()

    def run_case(self, rid: int, **extra: object) -> dict:
        h, _ = self.w.request({"op": "run", "id": rid, "case": CASE, **extra}, random_frames(CASE))
        self.assertEqual(h["status"], "ok", h.get("reason"))
        return h

    def test_profile_only_when_asked(self) -> None:
        self.assertNotIn("profile", self.run_case(1)["timings"])
        self.assertNotIn("profile", self.run_case(2, profile=False)["timings"])
        h = self.run_case(3, profile=True)
        p = h["timings"]["profile"]
        for k in ("parse_ms", "model_build_ms", "eager_steps_ms", "cleanup_ms", "encode_ms", "d2h_ms", "h2d_ms",
                  "run_ms"):
            self.assertIn(k, p)
        for k, v in p.items():
            self.assertIsInstance(v, float, k)
            self.assertGreaterEqual(v, 0.0, k)
        steps = sum(p.get(k, 0.0) for k in ("model_build_ms", "eager_steps_ms", "warmup_ms", "capture_ms",
                                            "replay_ms", "cleanup_ms", "encode_ms"))
        self.assertLessEqual(steps, p["run_ms"] * (1 + 1e-9) + 1e-6)


if __name__ == "__main__":
    unittest.main()
