"""Planted worker faults (RECAP_WORKER_FAULT, PROTOCOL.md "Planted worker faults"): parsing, the
case digest and the choice of cases (no torch), then each fault in a torch worker on the CPU: it
fires in its case only, as documented."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import unittest
from typing import Any, Dict, List

from recap_drivers.core import worker_faults as wf
from tests.helpers import DRIVERS, HAVE_TORCH, Worker, make_case, random_frames

A = make_case("fault", [{"kind": "dropout", "dropout": 0.3, "checkpoint": "full"}, {"kind": "linear", "dropout": 0.0}],
              warmup_backward="grad-of-inputs")
B = dict(A, seeds={"param": 1, "data": 2, "rng": 4})  # another case: one seed differs


class ParseTest(unittest.TestCase):
    def test_kinds_and_lists(self):
        got, problem = wf.parse("lost-context@0123abcd, memory-cap@" + "f" * 64 + ",kill-in-capture@DEADBEEF99")
        self.assertEqual(problem, "")
        self.assertEqual(got, {"0123abcd": "lost-context", "f" * 64: "memory-cap", "deadbeef99": "kill-in-capture"})
        self.assertEqual(wf.parse(""), ({}, ""))
        self.assertEqual(wf.parse(" , "), ({}, ""))

    def test_refusals(self):
        for text, words in [("oom@0123abcd", "unknown fault 'oom'"),
                            ("memory-cap", "KIND@CASE expected"),
                            ("memory-cap@", "KIND@CASE expected"),
                            ("memory-cap@0123abc", "8 to 64 hex digits"),        # 7 digits
                            ("memory-cap@0123abcg", "8 to 64 hex digits"),
                            ("memory-cap@0123abcd,lost-context@0123abcd", "two faults")]:
            got, problem = wf.parse(text)
            self.assertEqual(got, {}, text)
            self.assertIn(words, problem, text)
            self.assertTrue(problem.startswith("RECAP_WORKER_FAULT: "), problem)
            self.assertNotIn("\n", problem)

    def test_digest_is_canonical(self):
        d = wf.case_digest(A)
        self.assertRegex(d, r"^[0-9a-f]{64}$")
        self.assertEqual(wf.case_digest(dict(reversed(list(A.items())))), d)  # key order does not matter
        self.assertNotEqual(wf.case_digest(B), d)
        self.assertNotEqual(wf.case_digest(dict(A, executor="per-layer")), d)  # a twin is another case

    def test_arm_matches_a_prefix_of_its_case_only(self):
        saved = dict(wf.FAULTS)
        try:
            wf.FAULTS.clear()
            wf.FAULTS[wf.case_digest(A)[:12]] = "memory-cap"
            with contextlib.redirect_stderr(io.StringIO()) as err:
                wf.arm(B)
                self.assertEqual(wf.pending, "")
                wf.arm(A)
            self.assertEqual(err.getvalue(),
                             f"recap worker: RECAP_WORKER_FAULT armed memory-cap for case {wf.case_digest(A)[:16]}\n")
            self.assertEqual((wf.pending, wf.executor), ("memory-cap", "eager"))
            wf.disarm()
            self.assertEqual(wf.pending, "")
        finally:
            wf.FAULTS.clear()
            wf.FAULTS.update(saved)
            wf.disarm()

    def test_pick(self):
        # chunks 0..3 of 3 cases; chunk 1 ends with a failed case, chunk 3 has one case only
        disp = ["passed", "failed", "passed", "passed", "passed", "failed", "passed", "passed", "passed", "passed"]
        chunks = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
        cases: List[Dict[str, Any]] = [{"disposition": d, "spec": dict(A, seeds={"param": i, "data": 2, "rng": 3})}
                                       for i, d in enumerate(disp)]
        report = {"cases": cases, "summary": {"report_chunks": chunks}}
        kinds = ["lost-context", "kill-in-capture", "memory-cap"]
        got = wf.pick(report, kinds)
        # the last case of chunks 0, 2, 3 (chunk 1's failed), spread
        self.assertEqual([(k, i) for k, i, _ in got], [("lost-context", 2), ("kill-in-capture", 8), ("memory-cap", 9)])
        self.assertEqual(got[0][2], wf.case_digest(cases[2]["spec"]))
        self.assertEqual([i for _, i, _ in wf.pick(report, ["memory-cap", "lost-context"])], [2, 8])
        # kill-in-capture takes a graphed case when there is one
        cases[8]["spec"] = dict(cases[8]["spec"], executor="full-iteration")
        self.assertEqual([(k, i) for k, i, _ in wf.pick(report, kinds)],
                         [("lost-context", 2), ("kill-in-capture", 8), ("memory-cap", 9)])
        self.assertEqual([(k, i) for k, i, _ in wf.pick(report, ["kill-in-capture", "memory-cap"])],
                         [("kill-in-capture", 8), ("memory-cap", 2)])
        with self.assertRaisesRegex(ValueError, "3 chunks end with a passed case, 4 wanted"):
            wf.pick(report, kinds + ["memory-cap"])
        with self.assertRaisesRegex(ValueError, "unknown fault 'oom'"):
            wf.pick(report, ["oom"])

    def test_bad_variable_refused_before_serving(self):
        env = dict(os.environ, RECAP_WORKER_FAULT="oom@0123abcd", PYTHONPATH=DRIVERS)
        p = subprocess.run([sys.executable, "-m", "recap_drivers", "--sut", "torch", "--device", "cpu"], input=b"",
                           capture_output=True, env=env, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.decode().strip().splitlines(),
                         ["recap_drivers: RECAP_WORKER_FAULT: unknown fault 'oom' in 'oom@0123abcd' "
                          "(known: lost-context, kill-in-capture, memory-cap)"])


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class TorchWorkerFaultTest(unittest.TestCase):
    """Each fault in a torch worker on the CPU, planted for case A: case B, before and after it in
    the same worker, runs clean."""

    def worker(self, kind):
        return Worker(env_extra={"RECAP_WORKER_FAULT": f"{kind}@{wf.case_digest(A)[:16]}"})

    def run_case(self, w, case, rid, **opts):
        h, _ = w.request(dict({"op": "run", "id": rid, "case": case}, **opts), random_frames(case, seed=rid))
        return h

    def test_lost_context(self):
        w = self.worker("lost-context")
        try:
            self.assertEqual(self.run_case(w, B, 1)["status"], "ok")
            h = self.run_case(w, A, 2)
        finally:
            rc = w.close()
        self.assertEqual(h["status"], "failed")
        self.assertIs(h.get("fatal"), True)
        f = h["failure"]
        self.assertEqual((f["phase"], f["pass"], f["layer"], f["microbatch"], f["step"], f["error"]),
                         ("eager", "forward", "dropout0", 0, 0, "cudaErrorAssert"))
        self.assertTrue(f["message"].startswith("CUDA error: device-side assert triggered"), f["message"])
        self.assertEqual(rc, 3, w.stderr_text[-2000:])  # exits after the fatal reply
        self.assertIn("lost-context: emulated on the CPU", w.stderr_text)
        # the context stays lost: the emulated synchronization after the failure failed too
        self.assertIn("CUDA context unusable after a failure: CUDA error: device-side assert triggered", w.stderr_text)

    def test_memory_cap(self):
        w = self.worker("memory-cap")
        try:
            # with a determinism check (recap asks for one): the fault fires in its first run, whose
            # out-of-memory failure is the reply (not "nondeterministic": the second run had memory)
            h = self.run_case(w, A, 1, determinism_check=True)
            after = self.run_case(w, B, 2)  # the same worker, had recap not retired it
        finally:
            rc = w.close()
        self.assertEqual(rc, 0, w.stderr_text[-2000:])
        self.assertEqual(h["status"], "failed")
        self.assertNotIn("fatal", h)
        self.assertIs(h.get("retire"), True)  # after an out-of-memory failure a fresh worker serves the next case
        f = h["failure"]
        self.assertEqual((f["phase"], f["pass"], f["layer"], f["step"], f["error"]),
                         ("eager", "forward", "dropout0", 0, "OutOfMemoryError"))
        self.assertIn("DefaultCPUAllocator: can't allocate memory", f["message"])
        self.assertEqual(after["status"], "ok", after["reason"])  # the limit was restored

    def test_kill_in_capture(self):
        w = self.worker("kill-in-capture")
        try:
            self.assertEqual(self.run_case(w, B, 1)["status"], "ok")
            with self.assertRaises(EOFError) as e:  # its message quotes the worker's stderr
                self.run_case(w, A, 2)
        finally:
            rc = w.close()
        self.assertEqual(rc, -9)  # SIGKILL
        self.assertIn("RECAP_WORKER_FAULT kill-in-capture: SIGKILL in step 1 (eager), after the forward of dropout0, "
                      "microbatch 0: this case makes no capture (a CPU worker)", str(e.exception))


if __name__ == "__main__":
    unittest.main()
