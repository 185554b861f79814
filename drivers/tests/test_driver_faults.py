"""The planted driver faults (RECAP_DRIVER_FAULT, PROTOCOL.md "Planted driver faults") change the
observation as documented, against a worker without the fault (torch, CPU)."""

from __future__ import annotations

import copy
import unittest
from typing import Any, Dict, List

from recap_drivers.core.protocol import Frame
from tests.helpers import HAVE_TORCH, Worker, make_case, random_frames

CASE = make_case("faults", [
    {"kind": "dropout", "dropout": 0.3, "checkpoint": "full"},
    {"kind": "linear", "dropout": 0.0},
    {"kind": "dropout", "dropout": 0.3, "checkpoint": "full"},
], warmup_backward="grad-of-inputs")


def no_checkpoint(case):
    c = copy.deepcopy(case)
    for l in c["layers"]:
        l["checkpoint"] = "none"
    return c


def entries(h):
    return [(s["step"], m["microbatch"], m["pass"], m["layer"], m["op"], m["index"], m["digest"])
            for s in h["steps"] for m in s["masks"]]


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class DriverFaultTest(unittest.TestCase):
    frames: List[Frame]
    clean: Dict[str, Any]
    clean_frames: Dict[str, Frame]

    @classmethod
    def setUpClass(cls):
        cls.frames = random_frames(CASE, seed=9)
        w = Worker()
        try:
            cls.clean, cls.clean_frames = w.request({"op": "run", "id": 1, "case": CASE, "mask_frames": True},
                                                    cls.frames)
        finally:
            w.send({"op": "shutdown"})
            w.close()
        assert cls.clean["status"] == "ok", cls.clean["reason"]

    def faulty(self, fault, requests):
        w = Worker(env_extra={"RECAP_DRIVER_FAULT": fault})
        try:
            out = [w.request(r, f) for r, f in requests]
        finally:
            w.send({"op": "shutdown"})
            self.assertEqual(w.close(), 0, w.stderr_text[-2000:])
        return out

    def run_request(self, case, **opts):
        return (dict({"op": "run", "id": 2, "case": case}, **opts), random_frames(case, seed=9))

    def test_no_recompute_draws(self):
        (h, f), = self.faulty("no-recompute-draws", [self.run_request(CASE, mask_frames=True)])
        self.assertEqual(h["status"], "ok", h["reason"])
        clean = entries(self.clean)
        self.assertTrue([e for e in clean if e[2] == "recompute"])
        self.assertEqual(entries(h), [e for e in clean if e[2] != "recompute"])
        self.assertFalse([n for n in f if n.startswith("mask ") and " recompute " in n])
        self.assertTrue([n for n in f if n.startswith("mask ") and " forward " in n])

    def test_drop_recompute_mask(self):
        (h, f), = self.faulty("drop-recompute-mask", [self.run_request(CASE, mask_frames=True)])
        self.assertEqual(h["status"], "ok", h["reason"])
        clean = entries(self.clean)
        first = next(e for e in clean if e[2] == "recompute")
        self.assertEqual(first[:3], (0, 0, "recompute"))
        self.assertEqual(entries(h), [e for e in clean if e != first])
        name = "mask %d %d %s %s %s %d" % first[:6]
        self.assertIn(name, self.clean_frames)
        self.assertNotIn(name, f)
        # the run itself is unchanged: its gradients are the clean run's
        for n, fr in self.clean_frames.items():
            if n.startswith("grad "):
                self.assertEqual(f[n].data, fr.data, n)

    def test_no_graphs(self):
        hello = {"op": "hello", "protocol": "recap.worker/1"}
        graphed = dict(CASE, executor="per-layer")
        (hh, _), (h, _), (fh, _), (eh, _) = self.faulty("no-graphs", [
            (hello, []), self.run_request(graphed), self.run_request(dict(CASE, executor="full-iteration")),
            self.run_request(CASE)])
        self.assertIn("per-layer", hh["capabilities"]["executor"])
        self.assertIn("full-iteration", hh["capabilities"]["executor"])
        for r in (h, fh):
            self.assertEqual(r["status"], "ok", r["reason"])
            self.assertEqual([s["phase"] for s in r["steps"]], ["warmup", "replay", "replay"])
            self.assertEqual(r["graphs"], {"captures": {}})
            self.assertEqual([s["replays"] for s in r["steps"]], [{}, {}, {}])
            self.assertEqual([s["losses"] for s in r["steps"]], [s["losses"] for s in self.clean["steps"]])
        self.assertEqual([s["phase"] for s in eh["steps"]], ["eager"] * 3)  # eager cases as ever
        # without the fault a CPU worker skips graphed executors
        w = Worker()
        try:
            r, _ = w.request(*self.run_request(graphed))
        finally:
            w.send({"op": "shutdown"})
            w.close()
        self.assertEqual(r["status"], "skipped")

    def test_twin_fails(self):
        (h, f), (ck, _) = self.faulty("twin-fails", [self.run_request(no_checkpoint(CASE)), self.run_request(CASE)])
        self.assertEqual(h["status"], "failed")
        self.assertEqual((h["failure"]["error"], h["failure"]["message"]), ("RuntimeError", "planted fault twin-fails"))
        self.assertEqual((h["steps"], f), ([], {}))
        self.assertEqual(ck["status"], "ok", ck["reason"])  # a checkpointed case runs
        self.assertEqual(entries(ck), entries(self.clean))


if __name__ == "__main__":
    unittest.main()
