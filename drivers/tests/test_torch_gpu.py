"""Graphed executors on CUDA (skipped without a CUDA device).

Must hold (driver correctness): without checkpoints, eager, per-layer (make_graphed_callables) and
full-iteration (torch.cuda.graph) runs are bitwise equal, step for step, masks included; a
reentrant checkpoint inside per-layer graphs fails with torch's refusal of torch.autograd.grad,
located at the checkpointed layer's backward.

Survey (torch's behaviour, recorded, not asserted): checkpointed cases under graphs, their
equality to eager and their recompute masks. Written to $OUT/gpu_survey.json when OUT is set.
"""

from __future__ import annotations

import copy
import unittest
from typing import Any, Dict

from tests.helpers import (
    HAVE_CUDA,
    Worker,
    check_graphs_observed,
    first_diff,
    make_case,
    mask_table,
    random_frames,
    recompute_mismatches,
    survey_entry,
    write_survey,
)

STACK = make_case("gpu-stack", [
    {"kind": "block", "heads": 2, "ffn_hidden": 32, "dropout": 0.1, "checkpoint": "none"},
    {"kind": "block", "heads": 2, "ffn_hidden": 32, "dropout": 0.1, "checkpoint": "none"},
    {"kind": "linear"},
], hidden=16, tokens=8, warmup=2, replays=3, microbatch_order=[1, -1, 1, -1], warmup_backward="grad-of-inputs",
    shared_pool=True)

SURVEY: list = []


def with_ckpt(case, how, style="reentrant", layers=(0, 1)):
    c = copy.deepcopy(case)
    c["checkpoint_style"] = style
    for i in layers:
        if how == "selective":
            c["layers"][i]["checkpoint"] = "selective"
            c["layers"][i]["checkpoint_modules"] = ["attn_core", "mlp"]
        else:
            c["layers"][i]["checkpoint"] = how
    return c


@unittest.skipUnless(HAVE_CUDA, "no CUDA device")
class GpuTest(unittest.TestCase):
    w: Worker
    hello: Dict[str, Any]
    dev_state: str
    rid: int

    @classmethod
    def setUpClass(cls):
        cls.w = Worker(device="cuda")
        h, _ = cls.w.request({"op": "hello", "protocol": "recap.worker/1"})
        assert h["op"] == "hello", h
        cls.hello = h
        cls.dev_state = h["capabilities"]["device_state"][0]
        cls.rid = 0

    @classmethod
    def tearDownClass(cls):
        cls.w.send({"op": "shutdown"})
        cls.w.close()
        write_survey("gpu_survey.json", cls.hello, SURVEY, 20000)

    def run_case(self, case, frames, **opts):
        type(self).rid += 1
        case = dict(case, device_state=self.dev_state)
        h, f = self.w.request(dict({"op": "run", "id": self.rid, "case": case}, **opts), frames)
        self.assertEqual(h["op"], "observation", h)
        return h, f

    def survey(self, what, case, frames, eager=None):
        h, f = self.run_case(case, frames)
        SURVEY.append(survey_entry(what, case, h, f, eager))
        return h, f

    def test_no_checkpoint_graphed_equals_eager(self):
        frames = random_frames(STACK, seed=3)
        eh, ef = self.survey("eager, no checkpoint", STACK, frames)
        self.assertEqual(eh["status"], "ok", eh["reason"])
        variants = {
            "full-iteration": dict(STACK, executor="full-iteration"),
            "per-layer shared pool": dict(STACK, executor="per-layer"),
            "per-layer own pools [1,1,-1,-1]": dict(STACK, executor="per-layer", shared_pool=False,
                                                    microbatch_order=[1, 1, -1, -1]),
            "per-layer, layer 1 ungraphed": dict(STACK, executor="per-layer",
                                                 layers=[STACK["layers"][0], dict(STACK["layers"][1], graphed=False),
                                                         STACK["layers"][2]]),
        }
        for what, case in variants.items():
            with self.subTest(what):
                ref_h, ref_f = eh, ef
                if case.get("microbatch_order") != STACK["microbatch_order"]:
                    ref_h, ref_f = self.run_case(dict(case, executor="eager"), frames)
                h, f = self.survey(what + ", no checkpoint", case, frames, (ref_h, ref_f))
                self.assertEqual(h["status"], "ok", h["reason"])
                self.assertEqual([s["phase"] for s in h["steps"]], ["warmup"] * 2 + ["replay"] * 3)
                self.assertEqual(first_diff(f, ref_f), "", what)
                self.assertEqual(mask_table(h), mask_table(ref_h))
                self.assertGreater(h["memory"]["graph_pool_bytes"], 0)
                self.assertGreater(h["memory"]["capture_peak_bytes"], 0)
                # make_graphed_callables: a forward and a backward graph per graphed layer and
                # microbatch, each replayed once per microbatch; full-iteration: one graph, one replay
                M = case["microbatches"]
                check_graphs_observed(self, h, case, 1 if case["executor"] == "full-iteration" else 2 * M)
        self.assertEqual(eh["graphs"], {"captures": {}})
        self.assertEqual([s["replays"] for s in eh["steps"]], [{}] * len(eh["steps"]))

    def test_reentrant_checkpoint_refused_in_per_layer_graphs(self):
        for warmup, phase in ((2, "warmup"), (0, "capture")):
            with self.subTest(warmup=warmup):
                case = with_ckpt(dict(STACK, executor="per-layer", warmup=warmup, replays=2), "full", layers=(1,))
                h, f = self.survey(f"per-layer reentrant full, warmup {warmup}", case, random_frames(case, seed=4))
                self.assertEqual(h["status"], "failed", h["reason"])
                fl = h["failure"]
                self.assertEqual(fl["error"], "RuntimeError")
                self.assertIn(".grad()", fl["message"])
                self.assertEqual((fl["phase"], fl["pass"], fl["layer"]), (phase, "backward", "block1"))

    def test_memory_stays_flat_across_cases(self):
        # torch caches a cuBLAS workspace (32 MiB) per (handle, stream) and make_graphed_callables
        # warms up on a new stream per call: without the driver clearing them after each case, a
        # worker grew by one per graph built (results/h200/2026-12-01-sut-campaigns) and asked to
        # retire past RECAP_WORKER_RETIRE_MIB; 8 cases of 4 graphs each stay under 96 MiB.
        w = Worker(device="cuda", env_extra={"RECAP_WORKER_RETIRE_MIB": "96"})
        try:
            h, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
            case = dict(STACK, executor="per-layer", shared_pool=False, microbatch_order=[1, 1, -1, -1],
                        device_state=h["capabilities"]["device_state"][0])
            frames = random_frames(case, seed=5)
            for i in range(8):
                r, _ = w.request({"op": "run", "id": i + 1, "case": case}, frames)
                self.assertEqual(r["status"], "ok", r["reason"])
                self.assertNotIn("retire", r, f"case {i + 1}: the worker's memory grew past 96 MiB")
        finally:
            w.send({"op": "shutdown"})
            w.close()

    def test_skipped_interleaved_shared_pool(self):
        h, _ = self.run_case(dict(STACK, executor="per-layer", microbatch_order=[1, 1, -1, -1]),
                             random_frames(STACK, seed=1))
        self.assertEqual(h["status"], "skipped")
        self.assertIn("_order", h["reason"])

    def test_survey_checkpointed_graphs(self):
        frames = random_frames(STACK, seed=5)
        for style in ("reentrant", "non-reentrant"):
            for how in ("full", "selective"):
                base = with_ckpt(STACK, how, style)
                eager = self.survey(f"eager {style} {how}", base, frames)
                self.assertEqual(eager[0]["status"], "ok", eager[0]["reason"])
                self.assertEqual(recompute_mismatches(eager[0]), [])
                for ex in ("full-iteration", "per-layer"):
                    case = dict(base, executor=ex)
                    h, _ = self.survey(f"{ex} {style} {how}", case, frames, eager)
                    self.assertIn(h["status"], ("ok", "failed"), h["reason"])
                    if h["status"] == "ok":
                        check_graphs_observed(self, h, case)
                    # every forward draw inside a checkpoint is flagged, and a recompute is flagged
                    for s in h["steps"]:
                        for m in s["masks"]:
                            if m["pass"] == "recompute":
                                self.assertTrue(m["checkpointed"])
                    if ex == "full-iteration" and how == "full" and h["status"] == "ok":  # captured inside them
                        fwd = [m for s in h["steps"] for m in s["masks"] if m["pass"] == "forward"]
                        self.assertTrue(fwd and all(m["checkpointed"] for m in fwd if m["layer"].startswith("block")))

    def test_survey_memory(self):
        frames = random_frames(STACK, seed=6)
        for ex in ("full-iteration", "per-layer"):
            for style in ("none", "non-reentrant"):
                case = dict(STACK, executor=ex) if style == "none" else with_ckpt(dict(STACK, executor=ex), "full", style)
                self.survey(f"memory {ex} {style}", case, frames)

    def test_survey_odd_stacks(self):
        """Identity layers (dropout p = 0 returns its input), parameterless graphed layers, an
        ungraphed layer between graphs, bf16."""
        odd = dict(STACK, executor="eager", shared_pool=False, microbatch_order=[1, 1, -1, -1], layers=[
            {"kind": "dropout", "dropout": 0.0},
            {"kind": "gelu"},
            {"kind": "rmsnorm", "graphed": False},
            {"kind": "swiglu", "ffn_hidden": 24},
            {"kind": "dropout", "dropout": 0.2},
            {"kind": "attention", "heads": 4, "dropout": 0.1},
        ])
        for dtype in ("fp32", "bf16"):
            case = dict(odd, dtype=dtype)
            frames = random_frames(case, seed=8)
            eager = self.survey(f"eager odd {dtype}", case, frames)
            self.assertEqual(eager[0]["status"], "ok", eager[0]["reason"])
            for ex in ("per-layer", "full-iteration"):
                h, f = self.survey(f"{ex} odd {dtype}", dict(case, executor=ex), frames, eager)
                self.assertIn(h["status"], ("ok", "failed"), h["reason"])

    def test_measure_times_replays_with_cuda_events(self):
        """The measure request (recap tradeoff) on CUDA: each executor's replays timed by CUDA
        events, the allocator's figures, the graphs' figures only where graphs were made, per layer
        the bytes each per-layer graph keeps, and the matmul rate."""
        for ex in ("eager", "per-layer", "full-iteration"):
            with self.subTest(ex):
                case = dict(STACK, executor=ex, device_state=self.dev_state, replays=5)
                type(self).rid += 1
                h, frames = self.w.request({"op": "measure", "id": self.rid, "case": case})
                self.assertEqual((h["op"], h["status"], frames), ("measurement", "ok", {}), h.get("reason"))
                self.assertEqual(h["clock"], "cuda-events")
                self.assertEqual(len(h["step_ms"]), 5)
                mem = h["memory"]
                for k in ("peak_allocated", "peak_reserved", "device_used"):
                    self.assertGreater(mem[k], 0, k)
                graphed = ex != "eager"
                for k in ("graph_pool", "capture_peak", "activations_in_graphs"):
                    self.assertEqual(mem[k] is not None, graphed, k)
                self.assertEqual(h["capture_ms"] is not None, graphed)
                self.assertEqual(mem["activations_eager"] is not None, not graphed)
                if ex == "per-layer":
                    self.assertEqual([l["layer"] for l in h["per_layer"]], list(range(len(STACK["layers"]))))
        type(self).rid += 1
        m, _ = self.w.request({"op": "measure", "id": self.rid, "what": "matmul-bf16"})
        self.assertGreater(m["matmul_bf16_tflops"], 0)

    def test_determinism_check_on_cuda(self):
        case = with_ckpt(dict(STACK, executor="full-iteration"), "full", "non-reentrant")
        h, _ = self.run_case(case, random_frames(case, seed=7), determinism_check=True)
        self.assertIn(h["status"], ("ok", "failed"), h["reason"])
        self.assertFalse(h["reason"].startswith("nondeterministic"), h["reason"])


if __name__ == "__main__":
    unittest.main()
