"""Rank groups (PROTOCOL.md, "Rank groups"): `--ranks 2` on the CPU with gloo, its gathered
observation, the cross-rank oracles (core/ranks_check.py) on clean runs and on each planted rank
fault, and a rank lost in the middle of a request. Skips without torch or gloo."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import unittest
from typing import Any, Dict, List, Optional, Tuple

from tests.helpers import DRIVERS, HAVE_TORCH, Worker, make_case, random_frames

try:
    import torch.distributed as dist

    HAVE_GLOO = HAVE_TORCH and dist.is_available() and dist.is_gloo_available()
except Exception:  # pragma: no cover
    HAVE_GLOO = False

if HAVE_TORCH:
    from recap_drivers.core import protocol
    from recap_drivers.core import ranks_check as rc

# A: draws inside a tensor-parallel region (attention dropout) and outside it (mlp dropout), both
# checkpointed: the mask oracles judge it; the gradient oracle is skipped (per-rank draws).
CASE_A = make_case("tp-masks", [{"kind": "attention", "heads": 2, "dropout": 0.2, "checkpoint": "full"},
                                {"kind": "mlp", "dropout": 0.1, "checkpoint": "full"}])
# B: every split kind, draws outside regions only: the gradients compare with a one-rank run.
CASE_B = make_case("tp-grads", [{"kind": "linear"}, {"kind": "mlp", "dropout": 0.1, "checkpoint": "full"},
                                {"kind": "swiglu"}, {"kind": "attention", "heads": 2},
                                {"kind": "block", "heads": 2, "checkpoint": "selective", "checkpoint_modules": ["mlp"]},
                                {"kind": "dropout", "dropout": 0.2}])
WAIT_S = 300  # a bound on a reply that never comes (generous: the test asserts the reply, not a time)

Reply = Tuple[Dict[str, Any], Dict[str, Any]]


def run(w: Worker, case: Dict[str, Any], rid: int = 1, **opts: Any) -> Reply:
    return w.request(dict({"op": "run", "id": rid, "case": case}, **opts), random_frames(case))


def run_faulted(fault: str, case: Dict[str, Any], ranks: int = 2, **opts: Any) -> Reply:
    """One run of `case` on a new group of `ranks` with RECAP_RANK_FAULT=fault (closed after)."""
    w = Worker("--ranks", str(ranks), env_extra={"RECAP_RANK_FAULT": fault})
    try:
        return run(w, case, **opts)
    finally:
        w.close()


def verdicts(h: Dict[str, Any], f: Dict[str, Any], case: Dict[str, Any], one: Optional[Reply] = None) -> Dict[str, str]:
    return {v["check"]: v["verdict"] for v in rc.check_all(h, f, case, one)}


def recv_bounded(w: Worker) -> Reply:
    """The next reply, or a failure after WAIT_S seconds without one (never a hang)."""
    ready, _, _ = select.select([w.p.stdout], [], [], WAIT_S)
    if not ready:
        w.p.kill()
        raise AssertionError(f"no reply within {WAIT_S} s")
    return w.recv()


def children_of(pid: int) -> List[int]:
    out: List[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(x) for x in fh.read().split()]
    except OSError:
        pass
    return out


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class RankGroupTest(unittest.TestCase):
    group: Worker
    one: Worker
    hello: Dict[str, Any]
    a: Reply
    b: Reply
    one_a: Reply
    one_b: Reply

    @classmethod
    def setUpClass(cls) -> None:
        cls.group = Worker("--ranks", "2")
        cls.one = Worker()
        cls.hello, _ = cls.group.request({"op": "hello", "protocol": "recap.worker/1"})
        cls.a = run(cls.group, CASE_A, mask_frames=True)
        cls.b = run(cls.group, CASE_B, rid=2)
        cls.one_a = run(cls.one, CASE_A)
        cls.one_b = run(cls.one, CASE_B)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.group.close()
        cls.one.close()

    def test_hello_lists_the_ranks(self) -> None:
        self.assertEqual(self.hello["ranks"], 2)
        self.assertEqual(self.hello["capabilities"]["tp"], [2])
        self.assertEqual(self.hello["capabilities"]["executor"], ["eager"])
        self.assertNotIn("ops", self.hello)  # measure is not served by a group

    def test_gathered_observation(self) -> None:
        h, f = self.a
        self.assertEqual(h["status"], "ok", h["reason"])
        self.assertEqual(h["ranks"]["world"], 2)
        self.assertEqual(h["ranks"]["tp_sites"], ["attention0.core"])
        for s in h["steps"]:
            self.assertEqual([r["rank"] for r in s["ranks"]], [0, 1])
            self.assertEqual(s["masks"], s["ranks"][0]["masks"])  # the step's own masks are rank 0's
            self.assertEqual(s["ranks"][0]["losses"], s["ranks"][1]["losses"])  # the output is all-reduced
            attn = [m for m in s["ranks"][1]["masks"] if m["layer"] == "attention0.core"]
            self.assertTrue(attn)
            self.assertEqual(attn[0]["numel"], 1 * 4 * 4)  # one head of two on each rank
        qkv = h["ranks"]["shards"][0]
        self.assertEqual(qkv["dim"], 0)
        self.assertEqual(qkv["ranges"][1], [[4, 8], [12, 16], [20, 24]])  # rank 1's heads in q, k and v
        # full-shape frames (as a one-rank reply has them), and every rank's shard and mask frames
        self.assertEqual(set(n for n in self.one_a[1]), set(n for n in f if "@" not in n))
        for n, fr in self.one_a[1].items():
            self.assertEqual(f[n].shape, fr.shape, n)
        self.assertEqual(f["grad 0 0 0 @1"].shape, (12, 8))
        self.assertTrue(any(n.startswith("mask 0 0 forward attention0.core") and n.endswith(" @1") for n in f))

    def test_oracles_pass(self) -> None:
        h, f = self.a
        self.assertEqual(verdicts(h, f, CASE_A, self.one_a),
                         {"recompute_equal": "passed", "tp_masks_differ": "passed", "outside_masks_equal": "passed",
                          "grads_match_one_rank": "skipped", "pp_schedule_1f1b": "skipped",
                          "pp_stage_masks_differ": "skipped", "dp_grads_reduced": "skipped"})
        h, f = self.b
        self.assertEqual(h["status"], "ok", h["reason"])
        v = {x["check"]: x for x in rc.check_all(h, f, CASE_B, self.one_b)}
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "passed", v["grads_match_one_rank"]["reason"])
        self.assertGreater(v["grads_match_one_rank"]["evidence"]["tensors"], 100)
        self.assertGreater(v["grads_match_one_rank"]["evidence"]["replicated_compared"], 0)
        self.assertEqual(v["tp_masks_differ"]["verdict"], "skipped")  # nothing drawn inside a region
        self.assertEqual(v["outside_masks_equal"]["verdict"], "passed")
        self.assertEqual(v["recompute_equal"]["verdict"], "passed")

    def test_oracle_on_one_rank_run_skips(self) -> None:
        h, f = self.one_a
        v = verdicts(h, f, CASE_A)
        self.assertEqual(v["tp_masks_differ"], "skipped")
        self.assertEqual(v["outside_masks_equal"], "skipped")
        self.assertEqual(v["recompute_equal"], "passed")

    def test_bad_requests(self) -> None:
        h, _ = run(self.group, CASE_A, rid=7, tp=3)
        self.assertEqual(h["op"], "error")
        self.assertIn("tp", h["message"])
        odd = make_case("odd", [{"kind": "attention", "heads": 3}], hidden=6)
        h, _ = run(self.group, odd, rid=8)
        self.assertEqual(h["status"], "skipped")
        self.assertIn("3 heads", h["reason"])
        h, _ = run(self.group, dict(CASE_A, executor="per-layer"), rid=9)
        self.assertEqual(h["status"], "skipped")
        # the group still serves
        h, _ = run(self.group, CASE_B, rid=10)
        self.assertEqual(h["status"], "ok")


# P: four layers in two stages of two, draws on stage 0 only (checkpointed): a pp 2 run is bitwise
# a one-rank run's; three microbatches give stage 0 a warmup forward, a steady pair and a cooldown.
CASE_P = make_case("pp-grads", [{"kind": "mlp", "dropout": 0.1, "checkpoint": "full"},
                                {"kind": "attention", "heads": 2, "dropout": 0.2, "checkpoint": "full"},
                                {"kind": "block", "heads": 2, "checkpoint": "selective", "checkpoint_modules": ["mlp"]},
                                {"kind": "swiglu"}], microbatches=3)
# Q: both stages alike ([mlp, dropout] each) and drawing: the stages' streams are compared.
CASE_Q = make_case("pp-seeds", [{"kind": "mlp", "dropout": 0.2, "checkpoint": "full"}, {"kind": "dropout", "dropout": 0.3},
                                {"kind": "mlp", "dropout": 0.2, "checkpoint": "full"}, {"kind": "dropout", "dropout": 0.3}])


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class PipelineTest(unittest.TestCase):
    """pp 2 on a group of 2 (frameworks/torch/pipeline.py): the gathered observation and the oracles."""

    group: Worker
    hello: Dict[str, Any]
    p: Reply
    q: Reply
    one_p: Reply
    one_q: Reply

    @classmethod
    def setUpClass(cls) -> None:
        cls.group = Worker("--ranks", "2")
        one = Worker()
        try:
            cls.hello, _ = cls.group.request({"op": "hello", "protocol": "recap.worker/1"})
            cls.p = run(cls.group, dict(CASE_P, pp=2), pp=2, tp=1, mask_frames=True)
            cls.q = run(cls.group, dict(CASE_Q, pp=2), rid=2, pp=2)
            cls.one_p = run(one, CASE_P)
            cls.one_q = run(one, CASE_Q)
        finally:
            one.close()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.group.close()

    def test_hello_lists_pp(self) -> None:
        self.assertEqual(self.hello["capabilities"]["pp"], [2])
        self.assertEqual(self.hello["capabilities"]["tp"], [2])

    def test_gathered_observation(self) -> None:
        h, f = self.p
        self.assertEqual(h["status"], "ok", h.get("reason"))
        g = h["ranks"]
        self.assertEqual((g["world"], g["tp"], g["pp"], g["stages"], g["stage_layers"]), (2, 1, 2, [0, 1], [[0, 2], [2, 4]]))
        for s in h["steps"]:
            r0, r1 = s["ranks"]
            self.assertEqual(r0["losses"], [None, None, None])  # stage 0 computes no loss
            self.assertEqual(s["losses"], r1["losses"])  # the step's losses are the last stage's
            self.assertEqual(s["masks"], r0["masks"] + r1["masks"])  # every stage's draws in stage order
            self.assertTrue(all(m["layer"].startswith(("mlp0", "attention1")) for m in r0["masks"]))
            self.assertEqual(r0["schedule"], [["forward", 0, 0], ["forward", 1, 0], ["backward", 0, 0], ["forward", 2, 0],
                                              ["backward", 1, 0], ["backward", 2, 0]])
            self.assertEqual(r1["schedule"], [["forward", 0, 0], ["backward", 0, 0], ["forward", 1, 0], ["backward", 1, 0],
                                              ["forward", 2, 0], ["backward", 2, 0]])
        self.assertEqual(set(self.one_p[1]), set(n for n in f if "@" not in n))  # the one-rank reply's shape
        self.assertIn("grad 0 0 0 @0", f)
        self.assertNotIn("grad 0 0 0 @1", f)  # a rank sends its own stage's gradients only
        self.assertTrue(any(n.startswith("mask 0 0 forward mlp0.dropout") and n.endswith(" @0") for n in f))

    def test_bitwise_one_rank(self) -> None:
        h, f = self.p
        v = {x["check"]: x for x in rc.check_all(h, f, CASE_P, self.one_p)}
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "passed", v["grads_match_one_rank"]["reason"])
        self.assertIn("bitwise", v["grads_match_one_rank"]["reason"])
        self.assertGreater(v["grads_match_one_rank"]["evidence"]["tensors"], 100)
        self.assertEqual(v["pp_schedule_1f1b"]["verdict"], "passed", v["pp_schedule_1f1b"]["reason"])
        self.assertEqual(v["recompute_equal"]["verdict"], "passed")
        self.assertEqual(v["outside_masks_equal"]["verdict"], "skipped")  # one rank per stage
        self.assertEqual(v["tp_masks_differ"]["verdict"], "skipped")

    def test_later_stage_draws(self) -> None:
        h, f = self.q
        self.assertEqual(h["status"], "ok", h.get("reason"))
        v = {x["check"]: x for x in rc.check_all(h, f, CASE_Q, self.one_q)}
        self.assertEqual(v["pp_stage_masks_differ"]["verdict"], "passed", v["pp_stage_masks_differ"]["reason"])
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "skipped")
        self.assertIn("stage 1 draws", v["grads_match_one_rank"]["reason"])
        self.assertEqual(v["pp_schedule_1f1b"]["verdict"], "passed")

    def test_bad_requests(self) -> None:
        h, _ = run(self.group, CASE_P, rid=7, pp=3)
        self.assertEqual(h["op"], "error")
        self.assertIn("pp", h["message"])
        h, _ = run(self.group, CASE_P, rid=8, pp=2, tp=2)
        self.assertEqual(h["op"], "error")
        three = make_case("three", [{"kind": "linear"}] * 3)
        h, _ = run(self.group, three, rid=9, pp=2)
        self.assertEqual(h["status"], "skipped")
        self.assertIn("3 layers are not a multiple of 2", h["reason"])
        h, _ = run(self.group, CASE_P, rid=10, pp=2)  # the group still serves
        self.assertEqual(h["status"], "ok")


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class PipelineFaultTest(unittest.TestCase):
    """Each planted pipeline fault is caught by its oracle, where the clean run passes it (PipelineTest)."""

    def faulted(self, fault: str, case: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
        w = Worker("--ranks", "2", env_extra={"RECAP_RANK_FAULT": fault})
        o = Worker()
        try:
            h, f = run(w, case, pp=2)
            one = run(o, case)
        finally:
            w.close()
            o.close()
        self.assertEqual(h["status"], "ok", h.get("reason"))
        return {x["check"]: x for x in rc.check_all(h, f, case, one)}

    def test_pp_stage_seed_shared(self) -> None:
        v = self.faulted("pp-stage-seed-shared", CASE_Q)
        self.assertEqual(v["pp_stage_masks_differ"]["verdict"], "failed")
        self.assertIn("one stream", v["pp_stage_masks_differ"]["reason"])

    def test_pp_send_stale(self) -> None:
        v = self.faulted("pp-send-stale", CASE_P)
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "failed")
        self.assertIn("not bitwise equal", v["grads_match_one_rank"]["reason"])
        self.assertEqual(v["pp_schedule_1f1b"]["verdict"], "passed")

    def test_pp_schedule_gpipe(self) -> None:
        v = self.faulted("pp-schedule-gpipe", CASE_P)
        self.assertEqual(v["pp_schedule_1f1b"]["verdict"], "failed")
        self.assertIn("rank 0 (stage 0 of 2, 3 microbatches): event 2 was the forward of microbatch 2",
                      v["pp_schedule_1f1b"]["reason"])
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "passed")  # the order alone is wrong


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class RankFaultTest(unittest.TestCase):
    """Each planted rank fault is caught by its oracle (and only the fault changes the verdict)."""

    def faulted(self, fault: str, case: Dict[str, Any]) -> Tuple[Dict[str, str], Dict[str, Any]]:
        h, f = run_faulted(fault, case)
        self.assertEqual(h["status"], "ok", h.get("reason"))
        one = None
        if case is CASE_B:
            o = Worker()
            try:
                one = run(o, case)
            finally:
                o.close()
        return verdicts(h, f, case, one), h

    def test_tp_seed_shared(self) -> None:
        v, _ = self.faulted("tp-seed-shared", CASE_A)
        self.assertEqual(v["tp_masks_differ"], "failed")
        self.assertEqual(v["recompute_equal"], "passed")

    def test_tp_recompute_stale(self) -> None:
        v, _ = self.faulted("tp-recompute-stale", CASE_A)
        self.assertEqual(v["recompute_equal"], "failed")

    def test_dp_seed_per_rank(self) -> None:
        v, _ = self.faulted("dp-seed-per-rank", CASE_A)
        self.assertEqual(v["outside_masks_equal"], "failed")
        self.assertEqual(v["tp_masks_differ"], "passed")

    def test_tp_grad_not_reduced(self) -> None:
        v, _ = self.faulted("tp-grad-not-reduced", CASE_B)
        self.assertEqual(v["grads_match_one_rank"], "failed")
        self.assertEqual(v["outside_masks_equal"], "passed")


# S: tp 2 sequence parallel (frameworks/torch/tensor_parallel.py), every draw per-rank: attention
# dropout on the rank's heads, the mlp's and a dropout layer's on the rank's rows, checkpointed.
CASE_SM = make_case("sp-masks", [{"kind": "attention", "heads": 2, "dropout": 0.2, "checkpoint": "full"},
                                 {"kind": "mlp", "dropout": 0.1, "checkpoint": "full"}, {"kind": "layernorm"},
                                 {"kind": "dropout", "dropout": 0.3}], tp=2, sp=True)
# every kind that splits or holds parameters whole (norms, row-parallel biases), no draws: the
# group's gradients compare with a one-rank run's
CASE_SG = make_case("sp-grads", [{"kind": "linear"}, {"kind": "mlp", "checkpoint": "full"}, {"kind": "layernorm"},
                                 {"kind": "swiglu"}, {"kind": "attention", "heads": 2},
                                 {"kind": "block", "heads": 2, "checkpoint": "selective", "checkpoint_modules": ["mlp"]},
                                 {"kind": "rmsnorm"}, {"kind": "gelu"}], tp=2, sp=True)


def one_rank(case: Dict[str, Any]) -> Dict[str, Any]:
    """The same case on one rank (what recap's one-rank twin runs)."""
    return dict(case, tp=1, pp=1, vp=1, sp=False)


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class SequenceParallelTest(unittest.TestCase):
    """tp 2 with sp on a group of 2: rows split between the regions, per-rank draws, the
    gradients of parameters held whole summed over the group; each planted sp fault caught."""

    group: Worker
    hello: Dict[str, Any]
    m: Reply
    g: Reply
    one_g: Reply

    @classmethod
    def setUpClass(cls) -> None:
        cls.group = Worker("--ranks", "2")
        one = Worker()
        try:
            cls.hello, _ = cls.group.request({"op": "hello", "protocol": "recap.worker/1"})
            cls.m = run(cls.group, CASE_SM, mask_frames=True)
            cls.g = run(cls.group, CASE_SG, rid=2)
            cls.one_g = run(one, one_rank(CASE_SG))
        finally:
            one.close()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.group.close()

    def faulted(self, fault: str, case: Dict[str, Any]) -> Dict[str, str]:
        h, f = run_faulted(fault, case)
        self.assertEqual(h["status"], "ok", h.get("reason"))
        return verdicts(h, f, case, self.one_g if case is CASE_SG else None)

    def test_hello_lists_sp(self) -> None:
        self.assertIs(self.hello["capabilities"]["sp"], True)

    def test_every_draw_is_per_rank_on_its_rows(self) -> None:
        h, f = self.m
        self.assertEqual(h["status"], "ok", h["reason"])
        self.assertIs(h["ranks"]["sp"], True)
        self.assertEqual(sorted(h["ranks"]["tp_sites"]), ["attention0.core", "dropout3", "mlp1.dropout"])
        for s in h["steps"]:
            self.assertEqual(s["ranks"][0]["losses"], s["ranks"][1]["losses"])  # the output is gathered whole
            rows = [m for m in s["ranks"][1]["masks"] if m["layer"] == "mlp1.dropout"]
            self.assertTrue(rows)
            self.assertEqual(rows[0]["numel"], 2 * 8)  # tokens 4 / tp 2 rows of hidden 8
        self.assertTrue(any(n.startswith("mask 0 0 forward dropout3") and n.endswith(" @1") for n in f))

    def test_oracles_pass(self) -> None:
        h, f = self.m
        v = {x["check"]: x for x in rc.check_all(h, f, CASE_SM)}
        self.assertEqual(v["tp_masks_differ"]["verdict"], "passed", v["tp_masks_differ"]["reason"])
        self.assertIn("on sequence-parallel rows", v["tp_masks_differ"]["reason"])
        self.assertEqual(v["tp_masks_differ"]["evidence"]["masks"], 36)  # 3 sites x 2 mb x 3 steps x 2 ranks
        self.assertEqual(v["recompute_equal"]["verdict"], "passed", v["recompute_equal"]["reason"])
        self.assertEqual(v["outside_masks_equal"]["verdict"], "skipped")  # no draw from the shared generator
        h, f = self.g
        self.assertEqual(h["status"], "ok", h["reason"])
        v = {x["check"]: x for x in rc.check_all(h, f, CASE_SG, self.one_g)}
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "passed", v["grads_match_one_rank"]["reason"])
        self.assertGreater(v["grads_match_one_rank"]["evidence"]["tensors"], 300)
        self.assertGreater(v["grads_match_one_rank"]["evidence"]["replicated_compared"], 0)

    def test_sp_block_no_fork(self) -> None:  # megatron-core 0.9.0's TransformerBlock: no fork
        v = self.faulted("sp-block-no-fork", CASE_SM)
        self.assertEqual(v["tp_masks_differ"], "failed")
        self.assertEqual(v["recompute_equal"], "passed")

    def test_sp_grad_not_reduced(self) -> None:
        v = self.faulted("sp-grad-not-reduced", CASE_SG)
        self.assertEqual(v["grads_match_one_rank"], "failed")

    def test_what_it_cannot_split(self) -> None:
        odd = dict(CASE_SG, tokens=5)
        h, _ = run(self.group, odd, rid=3)
        self.assertEqual(h["status"], "skipped")
        self.assertIn("tokens 5 is not a multiple of 2", h["reason"])
        # sent raw: the schema (and recap) would refuse it before it left
        self.group.send_raw(protocol.encode_message({"op": "run", "id": 4, "case": dict(CASE_SG, tp=1), "tp": 2},
                                                    random_frames(CASE_SG)))
        h, _ = self.group.recv()
        self.assertEqual(h["op"], "error")  # sp without tp > 1: a malformed case
        self.assertIn("sp", h["message"])


def data_case(name: str) -> Dict[str, Any]:
    with open(os.path.join(os.path.dirname(DRIVERS), "tests", "cli", "data", name + ".json")) as fh:
        c: Dict[str, Any] = json.load(fh)
    return c


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class TpInsidePpTest(unittest.TestCase):
    """tp 2 inside pp 2 stages on a group of 4 (tests/cli/data/tp2-pp2-*.json): rank r is stage r // 2,
    tensor-parallel rank r % 2; each stage's ranks split its layers, the stages run 1F1B."""

    group: Worker
    hello: Dict[str, Any]
    m: Reply
    g: Reply
    one_g: Reply
    M: Dict[str, Any]
    G: Dict[str, Any]

    @classmethod
    def setUpClass(cls) -> None:
        cls.M, cls.G = data_case("tp2-pp2-masks"), data_case("tp2-pp2-grads")
        cls.group = Worker("--ranks", "4")
        one = Worker()
        try:
            cls.hello, _ = cls.group.request({"op": "hello", "protocol": "recap.worker/1"})
            cls.m = run(cls.group, cls.M, tp=2, pp=2)
            cls.g = run(cls.group, cls.G, rid=2, tp=2, pp=2)
            cls.one_g = run(one, one_rank(cls.G))
        finally:
            one.close()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.group.close()

    def test_hello_lists_every_shape(self) -> None:
        self.assertEqual(self.hello["capabilities"]["tp"], [2, 4])
        self.assertEqual(self.hello["capabilities"]["pp"], [2, 4])

    def test_observation_and_oracles(self) -> None:
        h, f = self.m
        self.assertEqual(h["status"], "ok", h["reason"])
        self.assertEqual((h["ranks"]["tp"], h["ranks"]["pp"], h["ranks"]["stages"]), (2, 2, [0, 0, 1, 1]))
        self.assertEqual(h["ranks"]["tp_sites"], ["block0.attn.core", "block2.attn.core"])
        v = {x["check"]: x for x in rc.check_all(h, f, self.M)}
        for name in ("recompute_equal", "tp_masks_differ", "outside_masks_equal", "pp_schedule_1f1b", "pp_stage_masks_differ"):
            self.assertEqual(v[name]["verdict"], "passed", (name, v[name]["reason"]))
        self.assertEqual(v["tp_masks_differ"]["evidence"]["pairs"], 2)  # ranks 0-1 and 2-3: one pair per stage
        h, f = self.g
        self.assertEqual(h["status"], "ok", h["reason"])
        v = {x["check"]: x for x in rc.check_all(h, f, self.G, self.one_g)}
        gm = v["grads_match_one_rank"]
        self.assertEqual(gm["verdict"], "passed", gm["reason"])
        self.assertGreater(gm["evidence"]["tolerance"], 0.0)  # tp sums partial products: not bitwise
        self.assertGreater(gm["evidence"]["replicated_compared"], 0)
        self.assertEqual(v["pp_schedule_1f1b"]["verdict"], "passed")

    def test_shared_stage_seed_and_unreduced_sp_gradients(self) -> None:
        h, f = run_faulted("pp-stage-seed-shared", self.M, 4, tp=2, pp=2)
        self.assertEqual(rc.pp_stage_masks_differ(h, self.M)["verdict"], "failed")
        h, f = run_faulted("sp-grad-not-reduced", self.G, 4, tp=2, pp=2)
        self.assertEqual(rc.grads_match_one_rank(h, f, self.one_g[0], self.one_g[1], self.G)["verdict"], "failed")


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class VirtualPipelineTest(unittest.TestCase):
    """pp 2 with vp 2 on a group of 2 (tests/cli/data/pp2-vp2-*.json): rank s holds chunks c of
    virtual stage c * 2 + s, run in megatron-core's interleaved 1F1B order (core/schedules.py)."""

    group: Worker
    g: Reply
    m: Reply
    one_g: Reply
    G: Dict[str, Any]
    M: Dict[str, Any]

    @classmethod
    def setUpClass(cls) -> None:
        cls.G, cls.M = data_case("pp2-vp2-grads"), data_case("pp2-vp2-masks")
        cls.group = Worker("--ranks", "2")
        one = Worker()
        try:
            cls.g = run(cls.group, cls.G, pp=2)
            cls.m = run(cls.group, cls.M, rid=2, pp=2)
            cls.one_g = run(one, one_rank(cls.G))
        finally:
            one.close()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.group.close()

    def test_observation(self) -> None:
        h, f = self.g
        self.assertEqual(h["status"], "ok", h.get("reason"))
        g = h["ranks"]
        self.assertEqual((g["pp"], g["vp"], g["stages"], g["stage_layers"]), (2, 2, [0, 1], [[0, 1], [1, 2], [2, 3], [3, 4]]))
        for s in h["steps"]:
            r0, r1 = s["ranks"]
            # rank 0 warms up (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards, rank 1 two
            self.assertEqual(r0["schedule"][:5], [["forward", 0, 0], ["forward", 1, 0], ["forward", 0, 1], ["forward", 1, 1],
                                                  ["forward", 2, 0]])
            self.assertEqual(r1["schedule"][:4], [["forward", 0, 0], ["forward", 1, 0], ["forward", 0, 1], ["backward", 0, 1]])
            self.assertEqual(len(r0["schedule"]), 16)
        self.assertIn("grad 0 0 6 @0", f)  # swiglu2: rank 0's second chunk
        self.assertIn("grad 0 0 4 @1", f)  # linear1: rank 1's first chunk
        self.assertNotIn("grad 0 0 4 @0", f)

    def test_oracles(self) -> None:
        h, f = self.g
        v = {x["check"]: x for x in rc.check_all(h, f, self.G, self.one_g)}
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "passed", v["grads_match_one_rank"]["reason"])
        self.assertIn("bitwise", v["grads_match_one_rank"]["reason"])
        self.assertEqual(v["pp_schedule_1f1b"]["verdict"], "passed", v["pp_schedule_1f1b"]["reason"])
        self.assertEqual(v["pp_schedule_1f1b"]["evidence"]["model_chunks"], 2)
        self.assertEqual(v["recompute_equal"]["verdict"], "passed")
        h, f = self.m
        v = {x["check"]: x for x in rc.check_all(h, f, self.M, self.one_g)}
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "skipped")
        self.assertIn("stage 0 draws in a later model chunk (mlp2.dropout)", v["grads_match_one_rank"]["reason"])
        self.assertEqual(v["pp_stage_masks_differ"]["verdict"], "passed", v["pp_stage_masks_differ"]["reason"])

    def test_schedule_oracle_sees_a_chunk_out_of_order(self) -> None:
        h, f = self.g
        bad = json.loads(json.dumps(h))
        row = bad["steps"][0]["ranks"][0]["schedule"]
        row[1], row[2] = row[2], row[1]  # chunk 1 of microbatch 0 before chunk 0 of microbatch 1
        v = rc.pp_schedule_1f1b(bad)
        self.assertEqual(v["verdict"], "failed")
        self.assertIn("event 1 was the forward of microbatch 0 on chunk 1, interleaved 1F1B runs the forward of "
                      "microbatch 1 on chunk 0", v["reason"])

    def test_cases_the_schedule_refuses_are_skipped(self) -> None:
        h, _ = run(self.group, dict(self.G, microbatches=3), rid=3, pp=2)
        self.assertEqual(h["status"], "skipped")
        self.assertIn("3 microbatches are not a multiple of 2", h["reason"])
        h, _ = run(self.group, dict(self.G, layers=self.G["layers"][:2]), rid=4, pp=2)
        self.assertEqual(h["status"], "skipped")
        self.assertIn("2 layers are not a multiple of 4", h["reason"])


@unittest.skipUnless(HAVE_GLOO, "needs torch with gloo")
class LostRankTest(unittest.TestCase):
    def check_lost(self, w: Worker, rid: int) -> None:
        h, _ = recv_bounded(w)
        self.assertEqual(h["op"], "error")
        self.assertEqual(h["id"], rid)
        self.assertIn("rank 1 died of signal 9 (SIGKILL)", h["message"])
        self.assertNotIn("\n", h["message"])
        self.assertEqual(w.close(), 3)

    def test_rank_killed_mid_request(self) -> None:
        w = Worker("--ranks", "2", env_extra={"RECAP_RANK_FAULT": "kill-rank"})
        w.send({"op": "run", "id": 4, "case": CASE_A}, random_frames(CASE_A))
        self.check_lost(w, 4)
        self.assertIn("kill-rank", w.stderr_text)

    def test_stage_killed_mid_request(self) -> None:  # pp 2: the last stage dies in its first layer
        w = Worker("--ranks", "2", env_extra={"RECAP_RANK_FAULT": "kill-rank"})
        w.send({"op": "run", "id": 5, "case": CASE_P, "pp": 2}, random_frames(CASE_P))
        self.check_lost(w, 5)

    @unittest.skipUnless(os.path.isdir("/proc/self/task"), "needs /proc")
    def test_rank_killed_between_requests(self) -> None:
        w = Worker("--ranks", "2")
        h, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
        kids = children_of(w.p.pid)
        self.assertEqual(len(kids), 1, kids)
        os.kill(kids[0], signal.SIGKILL)
        w.send({"op": "run", "id": 6, "case": CASE_A}, random_frames(CASE_A))
        self.check_lost(w, 6)


class RankArgsTest(unittest.TestCase):
    def test_bad_values_exit_2_with_one_line(self) -> None:
        env = dict(os.environ, PYTHONPATH=DRIVERS)
        for args, extra in ((["--ranks", "1"], {}), (["--ranks", "two"], {}), (["--rank", "1"], {}),
                            (["--ranks", "2"], {"RECAP_RANK_FAULT": "nope"}),
                            (["--ranks", "2"], {"RECAP_RANK_TIMEOUT_S": "-1"})):
            p = subprocess.run([sys.executable, "-m", "recap_drivers", "--sut", "torch", *args], stdin=subprocess.DEVNULL,
                               capture_output=True, env=dict(env, **extra), timeout=WAIT_S)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(p.stdout, b"")
            self.assertEqual(len(p.stderr.decode().strip().splitlines()), 1, (args, p.stderr))


if __name__ == "__main__":
    unittest.main()
