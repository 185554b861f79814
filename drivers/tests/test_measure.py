"""The `measure` request (PROTOCOL.md, "measure"; recap tradeoff) of the torch driver, on the CPU
(skipped without torch): the hello lists it, a case's timed steps come back (the host clock, no
device memory on the CPU, said in a note), a case the CPU cannot run is skipped with the run
request's reason, the matmul rate is null with its reason, a bad request is an error reply and
the worker keeps serving. Every reply is validated against drivers/schema/recap.worker.schema.json
(helpers.Worker). No timing is asserted beyond its shape."""

from __future__ import annotations

import unittest

from recap_drivers.core import protocol
from tests.helpers import HAVE_TORCH, Worker, make_case, random_frames

CASE = make_case("measure", [
    {"kind": "block", "heads": 2, "ffn_hidden": 16, "dropout": 0.1, "checkpoint": "full"},
    {"kind": "block", "heads": 2, "ffn_hidden": 16, "dropout": 0.1},
], warmup=2, replays=5, checkpoint_style="reentrant")


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class Measure(unittest.TestCase):
    def setUp(self):
        self.w = Worker()
        self.addCleanup(self.w.close)

    def test_hello_lists_measure(self):
        h, _ = self.w.request({"op": "hello", "protocol": "recap.worker/1"})
        self.assertIn("measure", h["ops"])

    def test_eager_case_is_timed_step_by_step(self):
        h, frames = self.w.request({"op": "measure", "id": 3, "case": CASE})
        self.assertEqual((h["op"], h["id"], h["status"]), ("measurement", 3, "ok"), h)
        self.assertEqual(frames, {})
        self.assertEqual(h["clock"], "host-clock")
        # the replays are the timed steps; the warmup steps are not timed
        self.assertEqual(len(h["step_ms"]), CASE["replays"])
        self.assertTrue(all(ms > 0 for ms in h["step_ms"]), h["step_ms"])
        self.assertIsNone(h["capture_ms"])
        # torch reports no device memory on the CPU: every figure null (never 0), and why
        self.assertEqual(set(h["memory"].values()), {None}, h["memory"])
        self.assertIn("CPU", h["note"])
        self.assertEqual(h["failure"], "")
        # where the request's time went: its phases, within the whole request's time
        prof = h["timings"]["profile"]
        self.assertEqual(set(prof), {"data_ms", "model_build_ms", "run_ms", "cleanup_ms"})
        self.assertTrue(all(v >= 0 for v in prof.values()), prof)
        self.assertLessEqual(sum(prof.values()), h["timings"]["run_ms"])
        self.assertGreaterEqual(prof["run_ms"], sum(h["step_ms"]))

    def test_the_worker_still_runs_cases_as_before(self):
        # a measured run leaves nothing behind: the run request's observation equals a fresh worker's
        self.w.request({"op": "measure", "id": 1, "case": CASE})
        frames = random_frames(CASE)
        a, fa = self.w.request({"op": "run", "id": 2, "case": CASE}, frames)
        fresh = Worker()
        self.addCleanup(fresh.close)
        b, fb = fresh.request({"op": "run", "id": 2, "case": CASE}, frames)
        self.assertEqual(a["status"], "ok", a.get("reason"))
        self.assertEqual([s["losses"] for s in a["steps"]], [s["losses"] for s in b["steps"]])
        self.assertEqual([[m["digest"] for m in s["masks"]] for s in a["steps"]],
                         [[m["digest"] for m in s["masks"]] for s in b["steps"]])
        self.assertEqual({k: v.data for k, v in fa.items()}, {k: v.data for k, v in fb.items()})

    def test_a_case_the_cpu_cannot_run_is_skipped_with_the_run_requests_reason(self):
        graphed = dict(CASE, executor="per-layer", warmup_backward="grad-of-inputs")
        m, _ = self.w.request({"op": "measure", "id": 4, "case": graphed})
        r, _ = self.w.request({"op": "run", "id": 5, "case": graphed}, random_frames(graphed))
        self.assertEqual((m["status"], r["status"]), ("skipped", "skipped"))
        self.assertEqual(m["reason"], r["reason"])
        self.assertIn("needs CUDA graphs", m["reason"])

    def test_matmul_rate_is_null_on_the_cpu_with_its_reason(self):
        h, _ = self.w.request({"op": "measure", "id": 6, "what": "matmul-bf16"})
        self.assertEqual((h["op"], h["status"]), ("measurement", "ok"))
        self.assertIsNone(h["matmul_bf16_tflops"])
        self.assertIn("no GPU", h["reason"])

    def test_bad_requests_are_error_replies_and_the_worker_keeps_serving(self):
        bad_case = dict(CASE, hidden=-3)
        for req, words in (({"op": "measure", "id": 7, "case": bad_case}, "hidden"),
                           ({"op": "measure", "id": 8}, "missing 'case'"),
                           ({"op": "measure", "id": 9, "what": "everything", "case": CASE}, "unknown 'what'"),
                           ({"op": "measure", "id": "x", "case": CASE}, "'id' must be an integer")):
            self.w.send_raw(protocol.encode_message(req, []))  # not validated: the schema refuses them
            h, _ = self.w.recv()
            self.assertEqual(h["op"], "error", h)
            self.assertIn(words, h["message"])
        h, _ = self.w.request({"op": "measure", "id": 10, "case": CASE})
        self.assertEqual(h["status"], "ok")


if __name__ == "__main__":
    unittest.main()
