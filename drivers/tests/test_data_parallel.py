"""Data-parallel replicas (frameworks/torch/data_parallel.py; PROTOCOL.md, "Data-parallel replicas"):
the rank layout against megatron-core's own RankGenerator read from the wheels at hand, the
replica's share of the data, and a group of four ranks (tp 2 on dp 2 replicas, gloo on the CPU)
whose gradients are summed over the replicas, judged by the Python oracles clean and under each
planted dp fault. Skips without torch (and the layout comparison without a wheel)."""

from __future__ import annotations

import ast
import itertools
import os
import unittest
import zipfile
from typing import Any, Dict, List, Optional, Tuple

from tests.helpers import HAVE_TORCH, Worker, make_case, megatron_wheels, random_frames

if HAVE_TORCH:
    import torch

    from recap_drivers import case as case_mod
    from recap_drivers.core import ranks_check as rc
    from recap_drivers.core.layout import Layout, dp_problem, local_case, local_data
    from recap_drivers.core.records import RunData


# every kind that splits over tensor-parallel ranks, no dropout: the one-rank comparison applies
NO_DRAWS: List[Dict[str, Any]] = [{"kind": "linear"}, {"kind": "mlp", "checkpoint": "full"}, {"kind": "swiglu"},
                                  {"kind": "attention", "heads": 2}]
TP2_DP2 = make_case("tp2-dp2", NO_DRAWS, microbatches=4, tp=2, dp=2)
Reply = Tuple[Dict[str, Any], Dict[str, Any]]


def rank_generator(wheel: str) -> Any:
    """megatron-core's RankGenerator from the wheel's parallel_state.py, compiled alone with
    generate_masked_orthogonal_rank_groups (the module imports torch.distributed's process groups,
    which these two never touch)."""
    with zipfile.ZipFile(wheel) as z:
        src = z.read("megatron/core/parallel_state.py").decode()
    body: List[ast.stmt] = [n for n in ast.parse(src).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                            and n.name in ("generate_masked_orthogonal_rank_groups", "RankGenerator")]
    ns: Dict[str, Any] = {"List": List, "Optional": Optional}
    exec(compile(ast.Module(body=body, type_ignores=[]), wheel, "exec"), ns)  # noqa: S102 - megatron's own code
    return ns["RankGenerator"]


def groups(ranks: List[List[int]]) -> List[Tuple[int, ...]]:
    return sorted(tuple(g) for g in ranks)


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class LayoutTest(unittest.TestCase):
    SHAPES = [(tp, dp, pp) for tp, dp, pp in itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 3)) if tp * dp * pp <= 16]

    def test_every_rank_has_one_place(self) -> None:
        for tp, dp, pp in self.SHAPES:
            world = tp * dp * pp
            places = {(Layout(tp, dp, pp, r).stage, Layout(tp, dp, pp, r).replica, Layout(tp, dp, pp, r).tp_rank)
                      for r in range(world)}
            self.assertEqual(len(places), world)
            for r in range(world):
                lay = Layout(tp, dp, pp, r)
                self.assertEqual(lay.rank_of(lay.stage, lay.replica, lay.tp_rank), r)

    def test_groups_are_megatron_cores(self) -> None:
        for wheel in megatron_wheels(self):
            gen = rank_generator(wheel)
            for tp, dp, pp in self.SHAPES:
                with self.subTest(wheel=os.path.basename(wheel), tp=tp, dp=dp, pp=pp):
                    mc = gen(tp=tp, ep=1, dp=dp, pp=pp, cp=1, order="tp-cp-ep-dp-pp")  # initialize_model_parallel's
                    lay = Layout(tp, dp, pp, 0)
                    self.assertEqual(groups(mc.get_ranks("tp")),
                                     groups([lay.tp_ranks(s, d) for s in range(pp) for d in range(dp)]))
                    self.assertEqual(groups(mc.get_ranks("dp")),
                                     groups([lay.dp_ranks(s, t) for s in range(pp) for t in range(tp)]))
                    self.assertEqual(groups(mc.get_ranks("pp")),
                                     groups([[lay.rank_of(s, d, t) for s in range(pp)] for d in range(dp) for t in range(tp)]))


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class ShareTest(unittest.TestCase):
    def test_a_replica_runs_its_share_of_the_microbatches(self) -> None:
        c = case_mod.parse_case(TP2_DP2)
        data = RunData({}, {(s, m): torch.full((1,), float(10 * s + m)) for s in range(c.steps) for m in range(4)},
                       {(s, m): torch.full((1,), float(-10 * s - m)) for s in range(c.steps) for m in range(4)})
        loc = local_case(c, 2)
        self.assertEqual((loc.microbatches, loc.order()), (2, [1, -1, 1, -1]))
        mine = local_data(data, c, 2, 1)
        self.assertEqual(sorted(mine.inputs), [(s, j) for s in range(c.steps) for j in range(2)])
        self.assertEqual([float(mine.inputs[(1, j)]) for j in range(2)], [12.0, 13.0])
        self.assertEqual([float(mine.targets[(0, j)]) for j in range(2)], [-2.0, -3.0])

    def test_what_cannot_be_split_is_named(self) -> None:
        c = case_mod.parse_case(make_case("x", NO_DRAWS, microbatches=3, dp=2))
        self.assertIn("dp 2: 3 microbatches are not a multiple of 2", dp_problem(c, 2))
        c = case_mod.parse_case(make_case("x", NO_DRAWS, microbatches=2, microbatch_order=[1, 1, -1, -1], dp=2))
        self.assertIn("forward_backward_no_pipelining", dp_problem(c, 2))
        self.assertEqual(dp_problem(case_mod.parse_case(TP2_DP2), 2), "")


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class DataParallelGroupTest(unittest.TestCase):
    group: Worker
    one: Worker
    clean: Reply
    one_rank: Reply

    @classmethod
    def setUpClass(cls) -> None:
        cls.group = Worker("--ranks", "4")
        cls.one = Worker()
        frames = random_frames(TP2_DP2)
        cls.clean = cls.group.request({"op": "run", "id": 1, "case": TP2_DP2, "tp": 2, "dp": 2}, frames)
        cls.one_rank = cls.one.request({"op": "run", "id": 1, "case": TP2_DP2}, frames)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.group.close()
        cls.one.close()

    def verdicts(self, r: Reply) -> Dict[str, Dict[str, Any]]:
        return {v["check"]: v for v in rc.check_all(r[0], r[1], TP2_DP2, self.one_rank)}

    def test_the_observation_names_the_replicas(self) -> None:
        h, f = self.clean
        self.assertEqual(h["status"], "ok", h["reason"])
        self.assertEqual((h["ranks"]["dp"], h["ranks"]["replicas"], h["ranks"]["tp"]), (2, [0, 0, 1, 1], 2))
        for s in h["steps"]:
            # each rank lists the step's four microbatches, a loss where it ran one
            self.assertEqual([[x is not None for x in r["losses"]] for r in s["ranks"]],
                             [[True, True, False, False]] * 2 + [[False, False, True, True]] * 2)
            self.assertEqual(s["losses"], self.one_rank[0]["steps"][s["step"]]["losses"])
        self.assertIn("grad 0 3 0 @2", f)  # replica 1's microbatch, numbered as the step's
        self.assertNotIn("grad 0 3 0 @0", f)
        self.assertIn("grad 0 0 @3", f)  # the step gradient each rank applied

    def test_clean_replicas_pass(self) -> None:
        v = self.verdicts(self.clean)
        self.assertEqual(v["dp_grads_reduced"]["verdict"], "passed", v["dp_grads_reduced"]["reason"])
        self.assertGreater(v["dp_grads_reduced"]["evidence"]["tensors"], 0)
        self.assertEqual(v["grads_match_one_rank"]["verdict"], "passed", v["grads_match_one_rank"]["reason"])

    def test_each_planted_fault_is_caught(self) -> None:
        for fault, check in (("dp-grad-not-reduced", "dp_grads_reduced"), ("dp-data-same", "grads_match_one_rank")):
            with self.subTest(fault=fault):
                w = Worker("--ranks", "4", env_extra={"RECAP_RANK_FAULT": fault})
                try:
                    r = w.request({"op": "run", "id": 1, "case": TP2_DP2, "tp": 2, "dp": 2}, random_frames(TP2_DP2))
                finally:
                    w.close()
                v = self.verdicts(r)
                self.assertEqual(v[check]["verdict"], "failed", v[check]["reason"])

    def test_a_bad_shape_is_an_error_reply(self) -> None:
        h, _ = self.group.request({"op": "run", "id": 9, "case": TP2_DP2, "tp": 2, "dp": 3}, random_frames(TP2_DP2))
        self.assertEqual(h["op"], "error")
        self.assertIn("tp * pp * dp == its ranks", h["message"])


if __name__ == "__main__":
    unittest.main()
