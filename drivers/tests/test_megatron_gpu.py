"""The megatron-core driver on CUDA (skipped without a CUDA device or without megatron-core).

Must hold (driver correctness): two eager runs agree bitwise; without checkpoints, eager, per-layer
(CudaGraphManager) and full-iteration (FullCudaGraphWrapper) runs are bitwise equal step for step,
masks included; with dropout 0, Megatron's TransformerLayer computes recap's block (the torch
driver's eager losses agree to 1e-4: the parameter mapping, qkv rows included, is right).

Survey (Megatron's behaviour, recorded, not asserted): checkpointed cases under Megatron's graphs.
Written to $OUT/megatron_survey.json when OUT is set.
"""

from __future__ import annotations

import copy
import os
import sys
import unittest
from typing import Any, Dict, List

from tests import helpers
from tests.helpers import HAVE_CUDA, Worker, make_case, random_frames

try:
    from importlib.metadata import version

    MCORE = version("megatron-core")
except Exception:
    MCORE = ""

STACK = make_case("megatron-stack", [
    {"kind": "block", "heads": 2, "ffn_hidden": 32, "dropout": 0.1, "checkpoint": "none"},
    {"kind": "mlp", "ffn_hidden": 32, "dropout": 0.1, "checkpoint": "none"},
    {"kind": "linear"},
], hidden=16, tokens=8, warmup=2, replays=3, warmup_backward="grad-of-inputs", shared_pool=True)

SURVEY: list = []


def megatron_worker() -> Worker:
    return Worker(command=[sys.executable, "-m", "recap_drivers", "--sut", "megatron", "--device", "cuda"])


@unittest.skipUnless(HAVE_CUDA and MCORE, "needs CUDA and megatron-core")
class MegatronGpuTest(unittest.TestCase):
    w: Worker
    hello: Dict[str, Any]
    policy: str
    rid: int
    stderr_parts: List[str]

    @classmethod
    def setUpClass(cls):
        cls.w = megatron_worker()
        h, _ = cls.w.request({"op": "hello", "protocol": "recap.worker/1"})
        assert h["op"] == "hello", h
        cls.hello = h
        cls.policy = h["capabilities"]["policy"][0]
        cls.rid = 0
        cls.stderr_parts = []

    @classmethod
    def tearDownClass(cls):
        cls.w.send({"op": "shutdown"})
        cls.w.close()
        out = os.environ.get("OUT")
        if out:
            with open(os.path.join(out, f"megatron_worker_stderr_{MCORE}.log"), "w") as f:
                f.write("\n".join(cls.stderr_parts + [cls.w.stderr_text])[-400000:])
        helpers.write_survey(f"megatron_survey_{MCORE}.json", cls.hello, SURVEY, 30000)

    def run_case(self, case, frames, **opts):
        type(self).rid += 1
        case = dict(case, policy=self.policy)
        h, f = self.w.request(dict({"op": "run", "id": self.rid, "case": case}, **opts), frames)
        self.assertEqual(h["op"], "observation", h)
        if h.get("fatal"):  # the worker exits after a fatal reply (status 3): start another
            self.assertEqual(self.w.close(), 3)
            type(self).stderr_parts.append(self.w.stderr_text)
            type(self).w = megatron_worker()
        return h, f

    def survey(self, what, case, frames, eager=None):
        h, f = self.run_case(case, frames)
        entry = helpers.survey_entry(what, case, h, f, eager)
        entry.update(fatal=h.get("fatal", False), phases=[s["phase"] for s in h["steps"]], masks=len(helpers.mask_table(h)))
        SURVEY.append(entry)
        return h, f

    def test_a_eager_deterministic_and_graphs_equal_eager(self):
        frames = random_frames(STACK, seed=3)
        eh, ef = self.survey("eager, no checkpoint", STACK, frames)
        self.assertEqual(eh["status"], "ok", eh["reason"])
        self.assertGreater(len(helpers.mask_table(eh)), 0)
        h2, f2 = self.run_case(STACK, frames)
        self.assertEqual(helpers.first_diff(f2, ef), "", "two eager runs differ")
        for what, case in {
            "per-layer": dict(STACK, executor="per-layer"),
            "full-iteration": dict(STACK, executor="full-iteration"),
        }.items():
            with self.subTest(what):
                h, f = self.survey(what + ", no checkpoint", case, frames, (eh, ef))
                self.assertEqual(h["status"], "ok", h["reason"])
                self.assertEqual(helpers.first_diff(f, ef), "", what)
                self.assertEqual(helpers.mask_table(h), helpers.mask_table(eh), what)
                # every graphed layer (block0, mlp1, linear2) or the whole step captured, and
                # replayed in every replay step (CudaGraphManager: counts per runner, not fixed here)
                helpers.check_graphs_observed(self, h, case)
        self.assertEqual(eh["graphs"], {"captures": {}})

    def test_a2_per_layer_graphs_whatever_layer_0_is(self):
        """Issue 18: the model's config was layer 0's, so a per-layer case whose layer 0 is not
        graphed built no graphs at all (forward_backward_func calls create_cudagraphs() only when the
        model config says cuda_graph_impl "local"). An ungraphed linear, then a graphed linear with a
        full checkpoint: on 0.15.3 (naive) the graphed checkpoint fails as M2 (capture_clean,
        torch refuses .grad() in CheckpointFunction.backward); on 0.19 (skip) its graphs are built
        and replayed, layer 0's are not."""
        case = dict(STACK, executor="per-layer", layers=[
            {"kind": "linear", "graphed": False},
            {"kind": "linear", "checkpoint": "full"},
        ])
        h, _ = self.survey("per-layer: ungraphed linear, graphed linear full checkpoint", case,
                           random_frames(case, seed=6))
        if self.policy == "naive":
            self.assertEqual(h["status"], "failed", h["reason"])
            self.assertIn("Checkpointing is not compatible with .grad()", h["failure"]["message"])
            self.assertEqual(h["failure"]["layer"], "linear1")
            self.assertIn(h["failure"]["phase"], ("warmup", "capture"))
            self.assertTrue(h["graphs"]["captures"].keys() <= {"linear1"}, h["graphs"])
        else:
            self.assertEqual(h["status"], "ok", h["reason"])
            self.assertEqual([s["phase"] for s in h["steps"]], ["warmup"] + ["replay"] * (len(h["steps"]) - 1))
            helpers.check_graphs_observed(self, h, case)  # linear1 captured and replayed, linear0 never
            self.assertNotIn("linear0", h["graphs"]["captures"])

    def test_a3_measure_times_steady_replays(self):
        """The measure request (recap tradeoff) through Megatron's schedules: its replays timed by
        CUDA events (full-iteration: the capture step, which also trains, is not timed, and one more
        replay is run), the graphs' figures where graphs were made."""
        for ex in ("eager", "per-layer", "full-iteration"):
            with self.subTest(ex):
                case = dict(STACK, executor=ex, policy=self.policy, generator="graph-safe", replays=4)
                type(self).rid += 1
                h, _ = self.w.request({"op": "measure", "id": self.rid, "case": case})
                self.assertEqual((h["op"], h["status"]), ("measurement", "ok"), h.get("reason"))
                self.assertEqual(h["clock"], "cuda-events")
                self.assertEqual(len(h["step_ms"]), 4)
                self.assertGreater(h["memory"]["peak_allocated"], 0)
                self.assertEqual(h["memory"]["activations_in_graphs"] is not None, ex != "eager")

    def test_b_block_computes_recaps_block(self):
        case = copy.deepcopy(STACK)
        for l in case["layers"]:
            l["dropout"] = 0.0
        frames = random_frames(case, seed=4)
        mh, _ = self.run_case(case, frames)
        tw = Worker(device="cuda")
        try:
            th, _ = tw.request({"op": "run", "id": 1, "case": case}, frames)
        finally:
            tw.send({"op": "shutdown"})
            tw.close()
        self.assertEqual(mh["status"], "ok", mh["reason"])
        self.assertEqual(th["status"], "ok", th["reason"])
        for sm, st in zip(mh["steps"], th["steps"]):
            for a, b in zip(sm["losses"], st["losses"]):
                self.assertAlmostEqual(a, b, delta=1e-4 * max(1.0, abs(b)))

    def test_c_survey_checkpointed(self):
        frames = random_frames(STACK, seed=5)
        cases = {}
        for ex in ("eager", "per-layer", "full-iteration"):
            mlp_full = copy.deepcopy(dict(STACK, executor=ex))
            mlp_full["layers"][1]["checkpoint"] = "full"
            cases[f"{ex}: mlp full (tensor_parallel.checkpoint)"] = mlp_full
            blk_sel = copy.deepcopy(dict(STACK, executor=ex))
            blk_sel["layers"][0]["checkpoint"] = "selective"
            blk_sel["layers"][0]["checkpoint_modules"] = ["attn_core"]
            cases[f"{ex}: block selective core_attn"] = blk_sel
            blk_sel0 = copy.deepcopy(blk_sel)
            blk_sel0["layers"][0]["dropout"] = 0.0
            cases[f"{ex}: block selective core_attn, no dropout"] = blk_sel0
            blk_full = copy.deepcopy(dict(STACK, executor=ex))
            blk_full["layers"][0]["checkpoint"] = "full"
            cases[f"{ex}: block full"] = blk_full
        for what in [k for k in cases if k.startswith("eager")]:
            cases[what.replace("eager:", "eager, host generator:")] = dict(cases[what], generator="host")
        eager_nock = self.run_case(STACK, frames)
        for what, case in cases.items():
            with self.subTest(what):
                self.survey(what, case, frames, eager_nock)
        # eager checkpointing with use_cudagraphable_rng=False restores real RNG snapshots: the
        # recompute draws the forward's masks (with True it restores live generator handles: a
        # finding, recorded by the survey)
        for e in SURVEY:
            if e["what"].startswith("eager, host generator") and e["status"] == "ok":
                self.assertEqual(e["recompute_mismatches"], [], e["what"])


if __name__ == "__main__":
    unittest.main()
